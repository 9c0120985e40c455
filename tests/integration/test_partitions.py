"""Jobs under real network partitions: split stores, drivers cut off, slow and lossy links.

Real components: three Hazelcast members, each in a network host of its own
(:mod:`testbed.netns`: network namespaces on a bridge, cut and healed with iptables), with
split-brain protection at a majority (``minimum-cluster-size`` 2, the chart's default), and
real PySpark drivers in local mode as processes in their own hosts
(``python -m spark_runtime run --split-brain-protection``). The execution record is a record
file each execution claims, except in the API server test, where the driver runs in
Kubernetes mode against the session's real API server (reached through a forwarder on the
network's root address, :mod:`testbed.tcp_proxy`). Either way the test plays the operator:
it starts the next execution, on the side of a partition the operator's start gate would
allow (the operator's gate itself, ``BelowQuorum``, is tested in
``tests/unit/operator/test_decide_starting.py``, ``test_decide_exits.py`` and
``test_operator.py``).

The pipeline (:mod:`tests.integration.driver_pipeline`) sums a gated sequence by key into
files and appends every number it reads to an events sink: each test ends with every event
exactly once (none missing, none repeated) and exact sums.
"""

from __future__ import annotations

import json
import logging
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml

from snapshotjob_contract import DriverExit
from testbed.controlplane import KubeAPI
from testbed.driver_process import REPO, DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.netns import ROOT, Network
from testbed.processes import start_in_own_session, wait_until
from testbed.snapshotjob_crd import create_job, install_crd
from testbed.tcp_proxy import TcpForwarder
from tests.fixtures.netns import NetworkFactory
from tests.integration.kube_driver_helpers import (
    allow,
    claim_execution,
    committed_events,
    execution_record,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]
log = logging.getLogger(__name__)

KEYS = 3
MEMBER_HOSTS = ("h0", "h1", "h2")
SPLIT_DETECTION_S = 10
"""The members' ``max.no.heartbeat.seconds``: how soon each side of a cut sees it is split."""
QUORUM_LOSS_BOUND_S = 90
"""How soon a driver on the minority side must stop: the members' split detection (10 s),
the client's heartbeat timeout for the connections behind the cut (15 s), then the next
epoch boundary; with room for a busy 2-core machine."""
CUT_OFF_BOUND_S = 50
"""How soon a driver that reaches no member must stop: the client drops the silent
connections 15 to 20 s after the cut, the store operation in flight fails by its invocation
timeout (20 s) at about the same time, and no snapshot is started after that; without
split-brain protection ``--store-lost-seconds`` (10 s here) follows. Measured 21 and 33 s;
before snapshots were postponed while no member is reachable, 47 and 57 s."""


@pytest.fixture
def partitioned(network_factory: NetworkFactory, tmp_path: Path) -> Iterator[Network]:
    """Three member hosts and two driver hosts, ``d0`` and ``d1``."""
    yield network_factory([*MEMBER_HOSTS, "d0", "d1"])


@pytest.fixture
def store(partitioned: Network, tmp_path: Path) -> Iterator[HazelcastCluster]:
    """Three members in their hosts, refusing the snapshot maps below 2 members."""
    cluster = HazelcastCluster(
        tmp_path,
        size=3,
        heap="256m",
        hosts=[partitioned[h] for h in MEMBER_HOSTS],
        max_no_heartbeat_seconds=SPLIT_DETECTION_S,
        split_brain_protection=2,
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


ROWS_PER_EPOCH = 150
"""Rows a job reads per epoch. An epoch and its snapshot take 2 to 4 s on a 2-core machine
whatever their size (a few hundred rows), so the gates (600, 1200, ...) are a few epochs
apart each: enough epochs and snapshots between two faults, without a minute of epochs each
(at 50 rows per epoch the four tests took 15 minutes)."""

SPARK_IN_HOST = {"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"}
"""Spark's driver binds to the host's own loopback inside a network host."""


def _pipeline_args(work: Path, end: int) -> dict[str, object]:
    """The pipeline's arguments: gated by ``work/limit``, sums and events under ``work``."""
    return {
        "limit_file": str(work / "limit"),
        "out": str(work / "out"),
        "events_out": str(work / "events"),
        "end": end,
        "keys": KEYS,
        "rows_per_epoch": ROWS_PER_EPOCH,
    }


class Job:
    """One local-mode job whose executions the test starts in network hosts."""

    def __init__(
        self, network: Network, cluster: HazelcastCluster, work: Path, end: int, *extra: str
    ) -> None:
        self.network = network
        self.work = work
        self.end = end
        work.mkdir(parents=True, exist_ok=True)
        self.harness = DriverHarness(
            workdir=work,
            members=[m.address for m in cluster.nodes],
            cluster_name=cluster.cluster_name,
            job_uid=f"part-{uuid.uuid4().hex[:8]}",
            pipeline="tests.integration.driver_pipeline",
            args=_pipeline_args(work, end),
            snapshot_interval_ms=1000,
        )
        conf = [arg for key, value in SPARK_IN_HOST.items() for arg in ("--conf", f"{key}={value}")]
        self.base_args = [*conf, *extra]

    def start_in(self, host: str, *extra: str) -> None:
        """Starts the next execution in ``host`` (the test plays the operator), with the
        job's driver options and ``extra``."""
        self.harness.extra_args = [*self.base_args, *extra]
        self.harness.wrap = self.network[host].argv
        self.harness.start()

    def allow(self, limit: int) -> None:
        """Lets the job read up to ``limit``."""
        allow(self.work, limit)

    def snapshots_done(self) -> int:
        """Successful snapshots of the current execution."""
        return self.harness.log_text().count("Snapshot done ")

    def wait_for_snapshot_after(self, done: int, timeout: float = 120) -> None:
        """Waits for a successful snapshot beyond the first ``done`` ones."""
        assert self.harness.wait_for_log("Snapshot done ", done + 1, timeout), (
            self.harness.log_tail()
        )

    def wait_for_read(self, upto: int, timeout: float = 180) -> None:
        """Waits until a snapshot committed every event below ``upto``."""
        wait_until(
            lambda: len(self.events()) >= upto or not self.harness.running(),
            timeout,
            f"events below {upto} committed",
            interval=0.5,
        )
        assert len(self.events()) >= upto, self.harness.log_tail()

    def events(self) -> list[int]:
        """Every committed event, in published order (a repeat shows twice)."""
        return committed_events(self.work)

    def check_exact(self) -> None:
        """Every event 0 .. end-1 exactly once, and the last sums of every key exact."""
        check_exact(self.work, self.end)

    def stop(self) -> None:
        """Kills the current execution if it still runs."""
        if self.harness.running():
            self.harness.kill()


def check_exact(work: Path, end: int) -> None:
    """Every event 0 .. end-1 exactly once, and the last sums of every key exact."""
    events = committed_events(work)
    assert len(events) == len(set(events)), "an event was committed twice"
    assert sorted(events) == list(range(end)), (
        f"missing={sorted(set(range(end)) - set(events))[:20]}"
    )
    latest: dict[int, tuple[int, int]] = {}
    for part in sorted((work / "out").glob("files-*/part-*.json")):
        for line in part.read_text().splitlines():
            row = json.loads(line)
            key, count, total = int(row["key"]), int(row["count"]), int(row["total"])
            if key not in latest or count > latest[key][0]:
                latest[key] = (count, total)
    assert latest == {
        key: (len(range(key, end, KEYS)), sum(range(key, end, KEYS))) for key in range(KEYS)
    }


def _restored_from(text: str) -> int:
    match = re.search(r"Restored snapshotId=(-?\d+)", text)
    assert match is not None, text[-3000:]
    return int(match.group(1))


def test_members_split_with_the_driver_on_the_majority_then_on_the_minority_side(
    partitioned: Network, store: HazelcastCluster, tmp_path: Path
) -> None:
    """1 | 2 splits: the majority side goes on; the minority side's driver stops (exit 79).

    The job runs with its driver in ``d0``. First ``h0`` is cut from everyone else: the
    driver keeps both other members and must go on taking snapshots. After a heal, ``d0`` is
    cut off together with ``h0``: its driver must stop within a bound, taking no snapshot
    there, while a new execution started in ``d1`` on the majority side restores the last
    snapshot and runs to the end before the partition heals.
    """
    job = Job(partitioned, store, tmp_path / "job", 3000, "--split-brain-protection")
    try:
        job.allow(600)
        job.start_in("d0")
        job.wait_for_read(600)

        partitioned.cut(["h0"], ["h1", "h2", "d0", "d1"])
        wait_until(
            lambda: [(store.health(i) or {}).get("clusterSize") for i in range(3)] == [1, 2, 2],
            90,
            "the store to split 1 | 2",
            interval=0.5,
        )
        done = job.snapshots_done()
        job.allow(1200)
        job.wait_for_read(1200)
        job.wait_for_snapshot_after(done)
        assert job.harness.running(), "the majority side's driver goes on"
        assert job.harness.record().quorum_size == 2, "raised by the driver from 3 members"

        partitioned.heal()
        store.wait_cluster_safe(expected_size=3, timeout=180)
        job.allow(1800)
        job.wait_for_read(1800)

        done = job.snapshots_done()
        partitioned.cut(["h0", "d0"], ["h1", "h2", "d1"])
        cut_at = time.monotonic()
        job.allow(2400)
        code = job.harness.wait(QUORUM_LOSS_BOUND_S)
        stopped_s = time.monotonic() - cut_at
        log.info("Driver on the minority side stopped seconds=%.1f code=%d", stopped_s, code)
        minority_log = job.harness.log_text()
        assert code == DriverExit.QUORUM_LOST, minority_log[-3000:]
        assert "Lost the store's quorum reachableMembers=1 quorumSize=2" in minority_log
        # One snapshot whose data was all written before the cut may still complete.
        assert job.snapshots_done() <= done + 1, "no snapshot on the minority side"
        after = job.harness.record()

        # The operator's part: the next execution where the store has a quorum.
        job.allow(job.end)
        job.start_in("d1")
        assert job.harness.wait(300) == DriverExit.COMPLETED, job.harness.log_tail()
        assert _restored_from(job.harness.log_text()) == after.snapshot_id
        partitioned.heal()
        job.check_exact()
    finally:
        job.stop()


def test_a_driver_cut_off_from_every_member_stops_with_a_message(
    partitioned: Network, store: HazelcastCluster, tmp_path: Path
) -> None:
    """Isolated drivers stop within CUT_OFF_BOUND_S: 79 with split-brain protection, else 69.

    With protection the driver stops once its client has dropped the silent connections;
    without it, after ``--store-lost-seconds`` with no member, starting no snapshot while it
    waits (a snapshot's first store operation would block it until its invocation timeout).
    Neither takes a snapshot. The two jobs run side by side, one in each
    driver host, and are cut off together: the cases are independent, and waiting out both
    bounds at once halves the test's time. Then a last execution completes the first job
    exactly; the second one's committed events are checked as they are (each once, none
    missing below the highest).
    """
    cases = [
        (
            Job(partitioned, store, tmp_path / "protected", 600, "--split-brain-protection"),
            "d0",
            DriverExit.QUORUM_LOST,
            "reachableMembers=0 quorumSize=2",
        ),
        (
            Job(partitioned, store, tmp_path / "unprotected", 600, "--store-lost-seconds", "10"),
            "d1",
            DriverExit.TRANSIENT_FAILURE,
            "the driver has reached no store member for 10 s",
        ),
    ]
    try:
        for job, host, _, _ in cases:
            job.allow(300)
            job.start_in(host)
        for job, _, _, _ in cases:
            job.wait_for_read(300)
        for _, host, _, _ in cases:
            partitioned.isolate(host)
        cut_at = time.monotonic()
        for job, host, expected, message in cases:
            code = job.harness.wait(max(1.0, CUT_OFF_BOUND_S - (time.monotonic() - cut_at)))
            log.info(
                "Isolated driver stopped host=%s seconds=%.1f code=%d",
                host,
                time.monotonic() - cut_at,
                code,
            )
            text = job.harness.log_text()
            assert code == expected, text[-3000:]
            assert message in text, text[-3000:]
        partitioned.heal()

        (job, host, _, _), (other, _, _, _) = cases
        job.allow(job.end)
        job.start_in(host)
        assert job.harness.wait(300) == DriverExit.COMPLETED, job.harness.log_tail()
        job.check_exact()
        committed = other.events()
        assert sorted(committed) == list(range(len(committed))) and len(committed) >= 300
    finally:
        for job, _, _, _ in cases:
            job.stop()


SNAPSHOT_BOUND_S = 30.0
"""The longest a snapshot of this job may take over a link with 200 ms delay and 5 % loss."""


def test_snapshots_complete_over_a_slow_and_lossy_link(
    partitioned: Network, store: HazelcastCluster, tmp_path: Path
) -> None:
    """200 ms added delay and 5 % loss on everything the driver sends.

    The job (a few kB of state per snapshot) must still take snapshots, each within
    :data:`SNAPSHOT_BOUND_S`, and complete with exact output; a snapshot that fails must fail
    cleanly (logged, retried), never end the job. Its input is let in a step at a time, each
    step after a snapshot over the impaired link: how many snapshots fit into the rest of the
    input does not depend on how fast its epochs run.
    """
    job = Job(partitioned, store, tmp_path / "job", 1050, "--split-brain-protection")
    try:
        job.allow(300)
        job.start_in("d0")
        job.wait_for_read(300)
        partitioned.impair("d0", delay_ms=200, loss_percent=5)
        done = job.snapshots_done()
        for step, limit in enumerate((450, 600, 750)):
            job.allow(limit)
            job.wait_for_snapshot_after(done + step, timeout=SNAPSHOT_BOUND_S * 4)
        job.allow(job.end)
        assert job.harness.wait(600) == DriverExit.COMPLETED, job.harness.log_tail()
        text = job.harness.log_text()
        seconds = [
            float(m.group(1))
            for m in re.finditer(r"Snapshot done snapshotId=\d+ map=\S+ seconds=([\d.]+)", text)
        ][done:]
        failed = text.count("Snapshot failed ")
        log.info(
            "Snapshots over 200 ms delay and 5 %% loss count=%d max_s=%.2f mean_s=%.2f failed=%d",
            len(seconds),
            max(seconds),
            sum(seconds) / len(seconds),
            failed,
        )
        assert len(seconds) >= 3, "snapshots went on over the impaired link"
        assert max(seconds) <= SNAPSHOT_BOUND_S
        job.check_exact()
    finally:
        job.stop()


def _kubeconfig_through(kube_api: KubeAPI, forwarder: TcpForwarder, path: Path) -> Path:
    """The admin kubeconfig, pointed at the forwarder; the certificate still names 127.0.0.1."""
    config = yaml.safe_load(kube_api.kubeconfig.read_text())
    for cluster in config["clusters"]:
        cluster["cluster"]["server"] = "https://{}:{}".format(*forwarder.address)
        cluster["cluster"]["tls-server-name"] = "127.0.0.1"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.mark.kube
def test_a_driver_cut_off_from_the_api_server_is_replaced_and_fenced(
    partitioned: Network, store: HazelcastCluster, kube_api: KubeAPI, tmp_path: Path
) -> None:
    """The driver loses the API server (the execution record) but keeps the store.

    Driver A runs in Kubernetes mode in ``d0`` and reaches the API server through a forwarder
    on the network's root address. Cut from it, A cannot write the record: every snapshot
    fails at its step 2, before any data, and nothing more is committed. The test plays the
    operator replacing a driver whose Pod is known gone: it claims the job for execution B
    and starts B in ``d1``, which restores the last snapshot and completes. After the heal,
    A's first record write finds B's execution id and A stops (exit 77) without a trace in
    the output: every event exactly once.
    """
    api = kube_api.api_client()
    install_crd(api)
    forwarder = TcpForwarder(
        partitioned.root_ip, ("127.0.0.1", int(urlsplit(kube_api.server).port or 443))
    ).start()
    work = tmp_path / "job"
    work.mkdir()
    end = 1500
    spec = {
        "image": "snapshotjob/runtime:dev",
        "pipeline": {
            "module": "tests.integration.driver_pipeline",
            "args": _pipeline_args(work, end),
        },
        "processingGuarantee": "EXACTLY_ONCE",
        "snapshotIntervalSeconds": 1,
        "statePartitions": 2,
        "splitBrainProtection": True,
        "spark": {
            "master": "local[2]",
            "conf": SPARK_IN_HOST,
        },
        "hazelcast": {
            "address": ",".join(m.address for m in store.nodes),
            "clusterName": store.cluster_name,
        },
    }
    first = f"a-{uuid.uuid4().hex[:8]}"
    name: str = create_job(api, spec=spec, execution_id=first)["metadata"]["name"]
    env = {
        **os.environ,
        "KUBECONFIG": str(_kubeconfig_through(kube_api, forwarder, tmp_path / "kubeconfig")),
        "PYSPARK_PYTHON": sys.executable,
        "SJ_FAILPOINTS": "",
    }
    env.pop("KUBERNETES_SERVICE_HOST", None)
    drivers: list[subprocess.Popen[bytes]] = []

    def start(host: str, execution_id: str) -> tuple[subprocess.Popen[bytes], Path]:
        log_path = tmp_path / f"driver-{execution_id}.log"
        argv = [sys.executable, "-m", "spark_runtime", "run", "--kubernetes"]
        argv += ["--namespace", "default", "--name", name, "--execution-id", execution_id]
        with log_path.open("wb") as out:
            process = start_in_own_session(
                f"driver-{execution_id}",
                partitioned[host].argv(argv),
                out,
                env=env,
                cwd=REPO,
                tie_to_parent=False,
            )
        drivers.append(process)
        return process, log_path

    try:
        allow(work, 300)
        a, a_log = start("d0", first)
        wait_until(lambda: len(committed_events(work)) >= 300, 180, "A's first events")
        partitioned.cut(["d0"], [ROOT])
        allow(work, 600)
        wait_until(
            # One is enough to show it: each waits out the record write's timeouts (about 40 s).
            lambda: a_log.read_text(errors="replace").count("Snapshot failed to start") >= 1,
            120,
            "A's snapshot failing without the API server",
        )
        assert a.poll() is None, "A goes on processing without snapshots"
        committed = committed_events(work)
        restore_point = int(execution_record(api, name)["snapshotId"])

        # The operator's part: A's Pod is known gone, a new execution takes the job.
        second = f"b-{uuid.uuid4().hex[:8]}"
        claim_execution(api, name, second, 2)
        allow(work, end)
        b, b_log = start("d1", second)
        assert b.wait(300) == DriverExit.COMPLETED, b_log.read_text()[-3000:]
        assert _restored_from(b_log.read_text()) == restore_point
        assert set(committed) <= set(committed_events(work))

        partitioned.heal()
        code = a.wait(120)
        log.info("Driver cut from the API server ended after the heal code=%d", code)
        assert code == DriverExit.FENCED, a_log.read_text()[-3000:]
        check_exact(work, end)
        assert int(execution_record(api, name)["snapshotId"]) > restore_point
    finally:
        for process in drivers:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        forwarder.close()
        api.close()
