"""The driver's metrics endpoint, scraped over HTTP from a real driver process.

A local-mode driver (``python -m spark_runtime run --metrics-port 0``, as
:class:`~testbed.driver_process.DriverHarness` starts it) runs
:mod:`tests.integration.metered_pipeline` against the session's Hazelcast members, gated to
read six epochs of 50 numbers and then to wait, snapshotting every 2 seconds. The scrape is
checked against the truth, not only that the series exist: the snapshots, their figures and
their time against the execution record the driver wrote, the epochs against the gate, the
rows read and written against the Hazelcast map the job filled (one entry per number read).
The operator's endpoint is scraped in ``test_operator_metrics_scrape.py``.
"""

from __future__ import annotations

import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from snapshotjob_contract.observability import (
    DRIVER_EPOCH_DURATION,
    DRIVER_LAST_SNAPSHOT_TIME,
    DRIVER_RESTORE_DURATION,
    DRIVER_ROWS_IN,
    DRIVER_ROWS_OUT,
    DRIVER_SNAPSHOT_CHUNKS,
    DRIVER_SNAPSHOT_DURATION,
    DRIVER_SNAPSHOT_FAILURES,
    DRIVER_SNAPSHOT_INTERVAL,
    DRIVER_SNAPSHOT_SIZE,
    DRIVER_SNAPSHOTS,
    METRICS_PATH,
)
from snapshotjob_contract.record import ExecutionRecord
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from tests.integration.metered_driver import (
    EPOCHS,
    INTERVAL_MS,
    READ,
    metered_driver,
    metrics_port,
)

pytestmark = pytest.mark.timeout(300)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


@pytest.fixture
def harness(healthy_hazelcast: HazelcastCluster, tmp_path: Path) -> Iterator[DriverHarness]:
    """A metered job gated at :data:`READ` numbers, its driver killed after the test."""
    harness = metered_driver(healthy_hazelcast, tmp_path)
    try:
        yield harness
    finally:
        if harness.running():
            harness.kill()


def scrape(port: int) -> Samples:
    url = f"http://127.0.0.1:{port}{METRICS_PATH}"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float | None:
    return samples.get((name, tuple(sorted(labels.items()))))


def quiet_scrape(harness: DriverHarness, port: int) -> tuple[Samples, ExecutionRecord]:
    """A scrape and the record, taken where no snapshot ran: the record unchanged (a snapshot
    writes it twice) and the scrape the same over a moment after it."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        before = harness.record()
        first = scrape(port)
        time.sleep(0.3)
        second = scrape(port)
        if harness.record() == before and first == second:
            return second, before
    raise AssertionError(f"No quiet moment between snapshots:\n{harness.log_tail()}")


def test_a_real_drivers_scrape_agrees_with_its_record_and_output(
    harness: DriverHarness, healthy_hazelcast: HazelcastCluster
) -> None:
    harness.start()
    port = metrics_port(harness)
    # The endpoint is up before the restore, so its duration can be seen.
    assert value(scrape(port), DRIVER_RESTORE_DURATION.name) is not None

    assert harness.wait_for_log("Epoch done ", count=EPOCHS, timeout=180), harness.log_tail()
    # Then the gate holds the job: snapshots go on, with the whole output of the epochs.
    done = harness.log_text().count("Snapshot done ")
    assert harness.wait_for_log("Snapshot done ", count=done + 2, timeout=60), harness.log_tail()
    samples, record = quiet_scrape(harness, port)

    assert value(samples, DRIVER_SNAPSHOT_INTERVAL.name) == INTERVAL_MS / 1000
    stats = record.snapshot_stats
    assert stats is not None and stats.snapshot_id == record.snapshot_id
    assert record.last_snapshot_failure is None
    # A new job's snapshot ids start at 0, and every one was successful.
    assert record.ongoing_snapshot_id == record.snapshot_id
    snapshots = record.snapshot_id + 1
    assert value(samples, DRIVER_SNAPSHOTS.name) == snapshots
    assert harness.log_text().count("Snapshot done ") == snapshots
    assert value(samples, f"{DRIVER_SNAPSHOT_DURATION.name}_count") == snapshots
    failures = [v for (name, _), v in samples.items() if name == DRIVER_SNAPSHOT_FAILURES.name]
    assert failures and set(failures) == {0.0}
    assert value(samples, DRIVER_SNAPSHOT_SIZE.name) == stats.num_bytes > 0
    assert value(samples, DRIVER_SNAPSHOT_CHUNKS.name) == stats.num_chunks > 0
    assert value(samples, DRIVER_LAST_SNAPSHOT_TIME.name) == stats.start_time / 1000
    restore_seconds = value(samples, DRIVER_RESTORE_DURATION.name)
    assert restore_seconds is not None and restore_seconds > 0

    assert value(samples, f"{DRIVER_EPOCH_DURATION.name}_count") == EPOCHS
    assert harness.log_text().count("Epoch done ") == EPOCHS

    client = healthy_hazelcast.client()
    try:
        stored: dict[str, str] = dict(
            client.get_map(str(harness.args["map"])).blocking().entry_set()
        )
    finally:
        client.shutdown()
    numbers = sorted(int(json.loads(entry)["value"]) for entry in stored.values())
    assert numbers == list(range(READ))
    assert value(samples, DRIVER_ROWS_IN.name, source="numbers") == READ
    assert value(samples, DRIVER_ROWS_OUT.name, sink="map") == READ
    # Spark's file writer counts nothing, and no count is made up for it.
    assert value(samples, DRIVER_ROWS_OUT.name, sink="files") is None
