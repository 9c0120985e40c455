"""The chart's Grafana dashboard, run against a real Prometheus scraping real programs, drawn.

``test_chart.py`` checks the dashboard's queries name served metrics; here they are run. The
session's Prometheus (``tests/fixtures/prometheus.py``) scrapes, every second, a real operator
(as in ``test_operator_metrics_scrape.py``: a process against the session's API server and
Hazelcast cluster, the test playing kubelet) and a real local-mode driver (as in
``test_driver_metrics.py``: the metered pipeline, gated at three epochs, snapshotting every 2 s),
both labelled as the chart's PodMonitors label them (``namespace``, ``snapshotjob``, ``pod``).
The driver's execution record is then written into the operator's job, as a driver in a
Pod writes it, so the operator's per-job series show the same restore point. Then every
panel target is run as Grafana runs it (:mod:`testbed.dashboard`) and must be valid PromQL;
the panels that must show something given what ran must have data, checked against the
truth where that is cheap (three members, one RUNNING job and none FAILED, the driver's
snapshots, figures and rows against its execution record and gate, the operator's restore
point against the same record); the variables must select (a job that does not exist
empties the per-job panels, not the operator's own); and the whole dashboard is drawn into a
PNG by ``hack/render_dashboard.py`` (:mod:`testbed.dashboard_png`), the command
``docs/reference/metrics.md`` gives.
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
from kubernetes.client import ApiException
from matplotlib import image

from snapshotjob_contract.record import ExecutionRecord, SnapshotStats
from testbed import dashboard, dashboard_png
from testbed.dashboard import Dashboard, PanelResult, TimeWindow
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.operator_harness import OperatorHarness
from testbed.ports import free_port
from testbed.prometheus import PrometheusServer, Series, Target
from tests.integration.metered_driver import (
    INTERVAL_MS,
    ROWS_PER_EPOCH,
    metered_driver,
    metrics_port,
)
from tests.integration.operator_fixtures import crd, harness, namespace, operator, operator_env
from tests.script_modules import load_script

pytestmark = [
    pytest.mark.integration,
    pytest.mark.kube,
    pytest.mark.prometheus,
    pytest.mark.timeout(300),
]

__all__ = ["crd", "harness", "namespace", "operator", "operator_env"]

RENDER_COMMAND = Path(__file__).resolve().parents[2] / "hack" / "render_dashboard.py"
OPERATOR_PORT = free_port()
JOB = "metered"
SCRAPE_SECONDS = 1.0
"""The session Prometheus' scrape interval (``PrometheusServer``'s default)."""
EPOCHS = 3
READ = ROWS_PER_EPOCH * EPOCHS
"""How far the gate lets the job read: three epochs are enough to draw, and cost less time."""

# Panel title -> the legend prefixes of the series it must show, given what the test runs.
# What may stay empty: reconcile errors, restarts, API errors (none happen; a series appears
# with the first) and snapshot failures (at 0 from the start: their increase is drawn, 0).
MUST_SHOW = {
    "SnapshotJobs by phase": ("RUNNING",),
    "Reconcile duration": ("p50", "p99"),
    "Executions started": ("executions started",),
    "Store members reachable": ("",),
    "Store cluster safe": ("",),
    "Snapshot duration": ("p50", "p99"),
    "Snapshot size and chunks": ("bytes", "chunks"),
    "Time since last snapshot vs interval": ("age", "interval"),
    "Rows in / out": ("in", "out"),
    "Epoch duration": ("p50", "p99"),
    "Restore duration": ("",),
    "Snapshots taken": ("",),
    "SnapshotJob phases": ("",),
    "Failed jobs": ("failed",),
    "Restore points held, by job": ("bytes", "chunks"),
    "Restore point age vs interval, across executions": ("age", "interval"),
}
JOB_PANELS = {
    "SnapshotJob phases",
    "Restore points held, by job",
    "Restore point age vs interval, across executions",
    "Records behind, by source",
}
"""The operator's per-job panels besides the driver's: the job variables select them too."""
DRIVER_PANELS = {
    "Snapshot duration",
    "Snapshot size and chunks",
    "Time since last snapshot vs interval",
    "Snapshot failures",
    "Rows in / out",
    "Epoch duration",
    "Restore duration",
    "Snapshots taken",
}


@pytest.fixture
def operator_args() -> tuple[str, ...]:
    """The operator's metrics endpoint on a free loopback port."""
    return ("--metrics-port", str(OPERATOR_PORT))


@pytest.fixture
def driver(healthy_hazelcast: HazelcastCluster, tmp_path: Path) -> Iterator[DriverHarness]:
    """The metered job's driver (not started), killed after the test."""
    running = metered_driver(healthy_hazelcast, tmp_path / "driver")
    try:
        yield running
    finally:
        if running.running():
            running.kill()


@pytest.fixture
def scraped(prometheus: PrometheusServer, request: pytest.FixtureRequest) -> Iterator[str]:
    """This test's target file name; the scrape stops after the test."""
    name = request.node.name
    yield name
    prometheus.scrape(name, [])


def stats_of(record: ExecutionRecord) -> SnapshotStats:
    """The figures of the record's restore point."""
    stats = record.snapshot_stats
    assert stats is not None and stats.snapshot_id == record.snapshot_id, record
    return stats


def render_command() -> ModuleType:
    """``hack/render_dashboard.py``, the command that draws the dashboard (not a package)."""
    return load_script("render_dashboard", RENDER_COMMAND)


def series_of(result: PanelResult) -> list[tuple[str, Series]]:
    """A panel's series with their legend names."""
    return [named for target in result.results for named in target.named()]


def finite(result: PanelResult, prefix: str) -> list[float]:
    """The numbers of a panel's series whose legend starts with ``prefix``."""
    return [v for name, s in series_of(result) if name.startswith(prefix) for v in s.finite()]


def last(result: PanelResult, name: str) -> float:
    """The last number of a panel's series with exactly this legend."""
    (values,) = [s.finite() for legend, s in series_of(result) if legend == name]
    assert values, f"{result.panel.title}: {name} has no number"
    return values[-1]


def at(result: PanelResult, name: str, moment: float) -> float:
    """The value of a panel's series with exactly this legend at a point in time."""
    (series,) = [s for legend, s in series_of(result) if legend == name]
    points = dict(zip(series.times, series.values, strict=True))
    assert moment in points, (
        f"{result.panel.title}: {name} has no point at {moment}: "
        f"{len(points)} points {series.times[:2]}..{series.times[-2:]}"
    )
    return points[moment]


def quiet_counts(
    prometheus: PrometheusServer, driver: DriverHarness
) -> tuple[ExecutionRecord, float]:
    """Waits for a scrape between two snapshots and checks the driver's series in Prometheus
    against its record: the record was the same before and after that scrape, so the scrape
    saw exactly its snapshots, size, chunks and time.

    A scrape that falls between the record's write and the metrics' update is not such a
    moment; it is tried again, and a series that never agrees fails after a minute.

    Returns:
        The record and the time of that scrape.
    """
    selector = f'{{snapshotjob="{JOB}"}}'
    names = (
        "snapshotjob_driver_snapshots_total",
        "snapshotjob_driver_snapshot_size_bytes",
        "snapshotjob_driver_snapshot_chunks",
        "snapshotjob_driver_last_successful_snapshot_timestamp_seconds",
    )
    seen: tuple[float, ...] = ()
    truth: tuple[float, ...] = ()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        before, since = driver.record(), time.time()
        time.sleep(SCRAPE_SECONDS * 1.2)
        now = time.time()
        (stamp,) = prometheus.api.query(f"timestamp({names[0]}{selector})", now)
        seen = tuple(prometheus.api.query(f"{name}{selector}", now)[0].values[0] for name in names)
        if driver.record() != before or stamp.values[0] <= since:
            continue  # A snapshot ran meanwhile, or nothing was scraped since the record read.
        stats = before.snapshot_stats
        assert stats is not None and stats.num_bytes > 0 and stats.num_chunks > 0
        truth = (before.snapshot_id + 1, stats.num_bytes, stats.num_chunks, stats.start_time / 1000)
        if seen == truth:
            return before, stamp.values[0]
    raise AssertionError(f"Prometheus never showed the record: {seen} vs {truth} ({names})")


def play_the_record(
    prometheus: PrometheusServer, harness: OperatorHarness, record: ExecutionRecord
) -> None:
    """Writes the driver's restore point into the operator's job, as a driver in a Pod does,
    and waits until Prometheus scraped the operator's series of it."""
    stats = record.snapshot_stats
    assert stats is not None
    for attempt in range(5):
        current = harness.status(JOB).get("executionRecord") or {}
        restore_point = {
            "snapshotId": record.snapshot_id,
            "ongoingSnapshotId": max(record.snapshot_id, current.get("ongoingSnapshotId", -1)),
            "dataMapIndex": record.data_map_index,
            "snapshotStats": stats.to_dict(),
        }
        try:
            harness.write_status(JOB, executionRecord={**current, **restore_point})
            break
        except ApiException as conflict:  # the operator wrote meanwhile: read again
            assert conflict.status == 409 and attempt < 4, conflict
    query = f'snapshotjob_operator_job_snapshot_size_bytes{{snapshotjob="{JOB}"}}'
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        found = prometheus.api.query(query)
        if found and found[0].values[0] == stats.num_bytes:
            # The range queries' points fall on whole seconds: the next one must see it.
            (stamp,) = prometheus.api.query(f"timestamp({query})")
            time.sleep(max(0.0, math.ceil(stamp.values[0]) - time.time()) + 0.1)
            return
        time.sleep(SCRAPE_SECONDS / 2)
    raise AssertionError(f"The operator never served the restore point: {query}")


def test_every_panel_runs_and_draws_what_the_operator_and_a_driver_serve(
    prometheus: PrometheusServer,
    scraped: str,
    harness: OperatorHarness,
    driver: DriverHarness,
    healthy_hazelcast: HazelcastCluster,
    tmp_path: Path,
) -> None:
    start = time.time()
    # The gate holds the job until Prometheus scrapes its driver, so every epoch is seen.
    gate = Path(str(driver.args["limit_file"]))
    gate.write_text("0")
    driver.start()  # The JVM starts while the operator takes its job to RUNNING.
    operator_address = f"127.0.0.1:{OPERATOR_PORT}"
    operator_target = Target(
        operator_address,
        {"job": "snapshotjob-operator", "namespace": harness.namespace, "pod": "sj-operator-0"},
    )
    prometheus.scrape(scraped, [operator_target])
    # The counters' zeros are scraped before anything happens, so increase() sees the first.
    prometheus.wait_up([operator_address], timeout=60)
    harness.start_running(JOB)

    driver_address = f"127.0.0.1:{metrics_port(driver)}"
    driver_labels = {
        "job": "snapshotjob-drivers",
        "namespace": harness.namespace,
        "snapshotjob": JOB,
        "pod": f"{JOB}-driver-1",
    }
    prometheus.scrape(scraped, [operator_target, Target(driver_address, driver_labels)])
    prometheus.wait_up([operator_address, driver_address], timeout=60)
    gate.write_text(str(READ))
    assert driver.wait_for_log("Epoch done ", count=EPOCHS, timeout=180), driver.log_tail()
    # Snapshots run every 2 s meanwhile; two are enough for their panels.
    assert driver.wait_for_log("Snapshot done ", count=2, timeout=60), driver.log_tail()
    record, scraped_at = quiet_counts(prometheus, driver)
    play_the_record(prometheus, harness, record)
    # The range queries' points fall on whole seconds; the first after that scrape shows it.
    quiet_point = float(math.ceil(scraped_at))
    time.sleep(max(0.0, quiet_point - time.time()) + 0.1)  # The window must reach that point.

    board = Dashboard.load()
    # A point per scrape (a slow run as well), so the quiet scrape is one of the points.
    window = TimeWindow(start, time.time(), SCRAPE_SECONDS, max_points=3600)
    assert window.step == SCRAPE_SECONDS
    results = dashboard.run(prometheus.api, board, window)
    by_title = {r.panel.title: r for r in results}
    assert {r.panel.type for r in results} >= {"row", "timeseries", "stat"}
    errors = [e for r in results for e in r.errors()]
    assert not errors, "\n".join(errors)
    for title, prefixes in MUST_SHOW.items():
        shown = [name for name, s in series_of(by_title[title]) if s.finite()]
        for prefix in prefixes:
            assert any(n.startswith(prefix) for n in shown), f"{title}: no {prefix!r} in {shown}"
    # The driver's series carry the labels its PodMonitor writes, legends name them.
    snapshots = by_title["Snapshots taken"]
    assert [name for name, _ in series_of(snapshots)] == [f"{harness.namespace}/{JOB}"]

    # Against the truth.
    assert last(by_title["SnapshotJobs by phase"], "RUNNING") == 1
    assert all(
        last(by_title["SnapshotJobs by phase"], name) == 0
        for name, _ in series_of(by_title["SnapshotJobs by phase"])
        if name != "RUNNING"
    )
    cluster = healthy_hazelcast.cluster_name
    assert last(by_title["Store members reachable"], cluster) == len(healthy_hazelcast.nodes)
    assert last(by_title["Store cluster safe"], cluster) == 1
    # The job's own phase series, from the operator: RUNNING now, none FAILED.
    phases = by_title["SnapshotJob phases"]
    assert last(phases, f"{harness.namespace}/{JOB} RUNNING") == 1
    assert {name.rsplit(" ", 1)[1] for name, _ in series_of(phases)} <= {"STARTING", "RUNNING"}
    assert last(by_title["Failed jobs"], "failed") == 0
    # The operator's restore point is the driver's record, whatever the execution.
    held = by_title["Restore points held, by job"]
    assert last(held, f"bytes {harness.namespace}/{JOB}") == stats_of(record).num_bytes
    assert last(held, f"chunks {harness.namespace}/{JOB}") == stats_of(record).num_chunks
    across = by_title["Restore point age vs interval, across executions"]
    assert last(across, f"interval {harness.namespace}/{JOB}") == 10, "the spec's default"
    assert all(0 <= v < 120 for v in finite(across, "age")), finite(across, "age")
    # One driver Pod was created. increase() extrapolates the rise to its window's ends, so a
    # window whose scrapes were late shows up to window / scrape interval times it.
    (executions,) = prometheus.api.query(
        f'snapshotjob_operator_executions_started_total{{namespace="{harness.namespace}"}}'
    )
    assert executions.values == (1,), executions
    started = finite(by_title["Executions started"], "executions started")
    assert 0 < max(started) <= window.rate_interval / SCRAPE_SECONDS, started
    # Quantiles of real durations: positive, and within the buckets (a loaded machine's first
    # epoch, Spark's warm-up, has taken over a minute).
    for title in ("Reconcile duration", "Snapshot duration", "Epoch duration"):
        seconds = finite(by_title[title], "p")
        assert all(0 < v < 600 for v in seconds), (title, seconds)
    sizes = by_title["Snapshot size and chunks"]
    stats = record.snapshot_stats
    assert stats is not None
    assert at(sizes, f"bytes {harness.namespace}/{JOB}", quiet_point) == stats.num_bytes
    assert at(sizes, f"chunks {harness.namespace}/{JOB}", quiet_point) == stats.num_chunks
    ages = by_title["Time since last snapshot vs interval"]
    assert last(ages, f"interval {harness.namespace}/{JOB}") == INTERVAL_MS / 1000
    assert all(0 <= v < 120 for v in finite(ages, "age")), finite(ages, "age")
    taken = finite(snapshots, "")
    assert max(taken) > 0 and all(v >= 0 for v in taken)
    rows = by_title["Rows in / out"]
    assert max(finite(rows, f"in {harness.namespace}/{JOB} numbers")) > 0
    assert max(finite(rows, f"out {harness.namespace}/{JOB} map")) > 0
    for counter in ('rows_in_total{source="numbers"}', 'rows_out_total{sink="map"}'):
        (total,) = prometheus.api.query(f"snapshotjob_driver_{counter}")
        assert total.values == (READ,), counter

    # The variables select: another job's view has no driver series, the operator's stay.
    others = dashboard.run(prometheus.api, board, window, {"snapshotjob": ["no-such-job"]})
    for result in others:
        if result.panel.title in DRIVER_PANELS | JOB_PANELS:
            assert not series_of(result), result.panel.title
    assert series_of({r.panel.title: r for r in others}["Store members reachable"])
    chosen = {"namespace": [harness.namespace], "snapshotjob": [JOB]}
    picked = dashboard.run(prometheus.api, board, window, chosen)
    assert [n for n, _ in series_of({r.panel.title: r for r in picked}["Snapshots taken"])] == [
        f"{harness.namespace}/{JOB}"
    ]

    # Drawn by the command of docs/reference/metrics.md, over the same range.
    png = tmp_path / "dashboard.png"
    command = ["--prometheus", prometheus.url, "--out", str(png), "--scrape-interval", "1s"]
    assert render_command().main([*command, "--from", str(start), "--to", str(window.end)]) == 0
    pixels = image.imread(str(png))
    width = round(dashboard_png.COLUMNS * dashboard_png.UNIT_W * dashboard_png.DPI)
    assert pixels.shape[1] == width and pixels.shape[0] > pixels.shape[1], pixels.shape
    assert png.stat().st_size > 50_000, png.stat().st_size
    # Lines were drawn: the series colours are in the picture, not only frames and text.
    colours = {tuple(round(c * 255) for c in px[:3]) for px in pixels[::4, ::4].reshape(-1, 4)}
    first = tuple(int(dashboard_png.PALETTE[0][i : i + 2], 16) for i in (1, 3, 5))
    assert first in colours and len(colours) > 100, len(colours)
