"""The operator's metrics endpoint, scraped over HTTP from a real operator process.

The operator runs as in ``test_operator.py`` (a subprocess against the session's real API
server and Hazelcast cluster, with ``--metrics-port``), and the test plays the kubelet and the
driver as that module does: the driver's own endpoint is scraped with a real driver in
``test_driver_metrics.py``. Values are checked against what the API server shows, not only
that the series exist.
"""

from __future__ import annotations

import socket
import time
import urllib.request
from collections.abc import Callable

import pytest
from prometheus_client.parser import text_string_to_metric_families

from snapshotjob_contract.conditions import Phase
from snapshotjob_contract.observability import (
    METRICS_PATH,
    OPERATOR_EXECUTIONS_STARTED,
    OPERATOR_JOB_LAST_SNAPSHOT_TIME,
    OPERATOR_JOB_PHASE,
    OPERATOR_JOB_SNAPSHOT_CHUNKS,
    OPERATOR_JOB_SNAPSHOT_INTERVAL,
    OPERATOR_JOB_SNAPSHOT_SIZE,
    OPERATOR_JOBS,
    OPERATOR_METRICS,
    OPERATOR_RECONCILE_DURATION,
    OPERATOR_RESTARTS,
    OPERATOR_STORE_CLUSTER_SAFE,
    OPERATOR_STORE_MEMBERS_REACHABLE,
)
from testbed.hazelcast import HazelcastCluster
from testbed.operator_harness import WAIT, OperatorHarness
from tests.integration.operator_fixtures import crd, harness, namespace, operator, operator_env

pytestmark = [pytest.mark.integration, pytest.mark.kube]

__all__ = ["crd", "harness", "namespace", "operator", "operator_env"]

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


PORT = free_port()
PHASES = [phase.value for phase in Phase]


@pytest.fixture
def operator_args() -> tuple[str, ...]:
    """The metrics endpoint on a free loopback port."""
    return ("--metrics-port", str(PORT))


def scrape() -> Samples:
    url = f"http://127.0.0.1:{PORT}{METRICS_PATH}"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def wait_scrape(check: Callable[[Samples], bool], what: str) -> Samples:
    deadline = time.monotonic() + WAIT
    samples: Samples = {}
    while time.monotonic() < deadline:
        try:
            samples = scrape()
        except OSError:
            samples = {}
        if samples and check(samples):
            return samples
        time.sleep(0.3)
    raise AssertionError(f"Metrics never showed {what}: {sorted(samples.items())[:40]}")


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_the_scrape_shows_jobs_starts_restarts_and_the_store(
    harness: OperatorHarness, healthy_hazelcast: HazelcastCluster
) -> None:
    policy = {"maxRestarts": 3, "backoffSeconds": 1, "maxBackoffSeconds": 1}
    _, running = harness.start_running("metered", restartPolicy=policy)
    jobs = OPERATOR_JOBS.name
    samples = wait_scrape(lambda s: value(s, jobs, phase="RUNNING") == 1, "the RUNNING job")
    names = {name for name, _ in samples}
    for metric in OPERATOR_METRICS:
        if metric.name == "snapshotjob_operator_kubernetes_api_errors_total":
            continue  # A series appears with the first error only.
        if metric is OPERATOR_RESTARTS:
            continue  # Likewise with the first restart, below.
        if metric in (
            OPERATOR_JOB_LAST_SNAPSHOT_TIME,
            OPERATOR_JOB_SNAPSHOT_SIZE,
            OPERATOR_JOB_SNAPSHOT_CHUNKS,
        ):
            continue  # A job's restore point has series from its first snapshot on.
        suffix = "_count" if metric is OPERATOR_RECONCILE_DURATION else ""
        assert metric.name + suffix in names, metric.name
    assert value(samples, OPERATOR_EXECUTIONS_STARTED.name) == 1
    assert value(samples, jobs, phase="STARTING") == 0
    job = {"namespace": harness.namespace, "snapshotjob": "metered"}
    assert value(samples, OPERATOR_JOB_PHASE.name, **job, phase="RUNNING") == 1
    assert value(samples, OPERATOR_JOB_SNAPSHOT_INTERVAL.name, **job) == 10
    cluster = healthy_hazelcast.cluster_name
    members = len(healthy_hazelcast.nodes)
    assert value(samples, OPERATOR_STORE_MEMBERS_REACHABLE.name, cluster=cluster) == members
    assert value(samples, OPERATOR_STORE_CLUSTER_SAFE.name, cluster=cluster) == 1
    assert value(samples, f"{OPERATOR_RECONCILE_DURATION.name}_count") >= 2

    harness.exit_pod(running["execution"]["driverPod"], 1)
    restarted = harness.wait_status(
        "metered",
        lambda s: s.get("execution", {}).get("attempt") == 2,
        "the second execution",
    )
    samples = wait_scrape(
        lambda s: value(s, OPERATOR_EXECUTIONS_STARTED.name) == 2, "the second start"
    )
    assert restarted["restarts"] == 1
    assert value(samples, OPERATOR_RESTARTS.name, reason="ExecutionFailed") == 1
    assert value(samples, jobs, phase="STARTING") == 1

    # A deleted job is no longer counted in any phase (it was, at its last phase, once).
    harness.delete_job("metered")
    deadline = time.monotonic() + WAIT
    while harness.job("metered") is not None:
        assert time.monotonic() < deadline, harness.operator.process.log_tail(40)
        time.sleep(0.2)
    gone = wait_scrape(
        lambda s: all(value(s, jobs, phase=phase) == 0 for phase in PHASES),
        "no job in any phase after the deletion",
    )
    assert not [name for name, _ in gone if name == OPERATOR_JOB_PHASE.name], "its series too"
