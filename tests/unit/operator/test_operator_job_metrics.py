"""The operator's per-job series: a job's phase and restore point, kept across executions.

Reconciles run on the in-memory gateways of :mod:`tests.unit.operator.fake_gateways`, as in
``test_operator_metrics.py``; the series are read back from the registry as a scrape would
see them. What the chart's alerts make of them is ``tests/integration/alert_rules_test.yaml``.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from snapshot_operator.executing import Services, reconcile_once
from snapshot_operator.metrics import OperatorMetrics, last_snapshot_after
from snapshot_operator.reconcile import PatchStatus, observe
from snapshot_operator.settings import OperatorSettings
from snapshotjob_contract.observability import (
    OPERATOR_JOB_LAST_SNAPSHOT_TIME,
    OPERATOR_JOB_PHASE,
    OPERATOR_JOB_SNAPSHOT_CHUNKS,
    OPERATOR_JOB_SNAPSHOT_INTERVAL,
    OPERATOR_JOB_SNAPSHOT_SIZE,
    OPERATOR_JOBS,
)
from snapshotjob_contract.record import ExecutionRecord, SnapshotStats
from snapshotjob_contract.status import ExecutionRecordStatus
from tests.unit.operator.fake_gateways import FakeKubernetes, FakeStore
from tests.unit.operator.specs import VALID_SPEC

pytestmark = pytest.mark.unit

JOB = {"namespace": "default", "snapshotjob": "wordcount"}
TAKEN_MS = 1_767_225_600_000
"""When the restore point of these tests ended: 2026-01-01T00:00:00Z."""


@pytest.fixture
def kube() -> FakeKubernetes:
    return FakeKubernetes({**VALID_SPEC, "snapshotIntervalSeconds": 30})


@pytest.fixture
def services(kube: FakeKubernetes) -> Services:
    settings = OperatorSettings(
        namespaces=("default",), store_members=("hz-0:5701",), store_cluster_name="store"
    )
    return Services(kube=kube, store=FakeStore(), settings=settings)


def run(services: Services) -> None:
    reconcile_once(services, "default", "wordcount")


def samples(metrics: OperatorMetrics, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """Every sample of a metric: its labels (sorted) -> its value."""
    return {
        tuple(sorted(sample.labels.items())): sample.value
        for family in metrics.registry.collect()
        for sample in family.samples
        if sample.name == name
    }


def job_value(metrics: OperatorMetrics, name: str) -> float | None:
    return metrics.registry.get_sample_value(name, JOB)


def record(snapshot_id: int, stats_id: int, *, num_bytes: int = 4096) -> dict[str, object]:
    """A driver's execution record in the status: restore point ``snapshot_id``, figures of
    the attempt ``stats_id`` (the restore point's, or a later one that failed)."""
    stats = SnapshotStats(
        snapshot_id=stats_id,
        start_time=TAKEN_MS - 400 + (stats_id - snapshot_id) * 30_000,
        end_time=TAKEN_MS + (stats_id - snapshot_id) * 30_000,
        num_bytes=num_bytes,
        num_keys=10,
        num_chunks=7,
    )
    failure = None if stats_id == snapshot_id else "1st phase failed: broken sink"
    executed = ExecutionRecord(
        snapshot_id=snapshot_id,
        data_map_index=1,
        ongoing_snapshot_id=stats_id,
        snapshot_stats=stats,
        last_snapshot_failure=failure,
    )
    return ExecutionRecordStatus.of(executed).to_json()


def test_a_job_has_one_phase_series_that_follows_it_and_leaves_with_it(
    kube: FakeKubernetes, services: Services
) -> None:
    metrics = services.metrics
    run(services)
    assert samples(metrics, OPERATOR_JOB_PHASE.name) == {
        (("namespace", "default"), ("phase", "STARTING"), ("snapshotjob", "wordcount")): 1
    }
    (pod,) = kube.pods
    kube.set_pod(pod, "Failed", exit_code=1)
    run(services)
    assert kube.status["phase"] == "RESTARTING"
    # The old phase's series ends: an alert on one phase sees the job leave it.
    assert samples(metrics, OPERATOR_JOB_PHASE.name) == {
        (("namespace", "default"), ("phase", "RESTARTING"), ("snapshotjob", "wordcount")): 1
    }
    assert metrics.registry.get_sample_value(OPERATOR_JOBS.name, {"phase": "RESTARTING"}) == 1

    kube.job = None
    run(services)
    for metric in (OPERATOR_JOB_PHASE, OPERATOR_JOB_SNAPSHOT_INTERVAL):
        assert samples(metrics, metric.name) == {}, metric.name


def test_the_restore_point_is_served_from_the_status_and_outlives_executions(
    kube: FakeKubernetes, services: Services
) -> None:
    metrics = services.metrics
    run(services)
    # A new job: its interval, and no restore point to show an age for.
    assert job_value(metrics, OPERATOR_JOB_SNAPSHOT_INTERVAL.name) == 30
    for metric in (OPERATOR_JOB_LAST_SNAPSHOT_TIME, OPERATOR_JOB_SNAPSHOT_SIZE):
        assert samples(metrics, metric.name) == {}, metric.name

    kube.status["executionRecord"] = record(3, 3)
    run(services)
    assert kube.status["lastSnapshotTime"].startswith("2026-01-01T00:00:00")
    assert job_value(metrics, OPERATOR_JOB_LAST_SNAPSHOT_TIME.name) == TAKEN_MS / 1000
    assert job_value(metrics, OPERATOR_JOB_SNAPSHOT_SIZE.name) == 4096
    assert job_value(metrics, OPERATOR_JOB_SNAPSHOT_CHUNKS.name) == 7

    # The execution fails and is restarted, without a new snapshot: the restore point's time
    # stays, so its age goes on growing across the executions.
    (pod,) = kube.pods
    kube.set_pod(pod, "Failed", exit_code=1)
    run(services)
    assert kube.status["phase"] == "RESTARTING"
    assert job_value(metrics, OPERATOR_JOB_LAST_SNAPSHOT_TIME.name) == TAKEN_MS / 1000

    # A later attempt failed: the record's figures are its, the restore point's stay.
    kube.status["executionRecord"] = record(3, 4, num_bytes=99)
    run(services)
    assert job_value(metrics, OPERATOR_JOB_LAST_SNAPSHOT_TIME.name) == TAKEN_MS / 1000
    assert job_value(metrics, OPERATOR_JOB_SNAPSHOT_SIZE.name) == 4096


def test_without_the_observation_only_the_phase_is_served() -> None:
    metrics = OperatorMetrics()
    metrics.reconciled(
        "shop",
        "orders",
        seconds=0.01,
        previous_phase=None,
        actions=[PatchStatus({"phase": "FAILED"})],
    )
    assert samples(metrics, OPERATOR_JOB_PHASE.name) == {
        (("namespace", "shop"), ("phase", "FAILED"), ("snapshotjob", "orders")): 1
    }
    assert samples(metrics, OPERATOR_JOB_LAST_SNAPSHOT_TIME.name) == {}
    metrics.job_gone("shop", "orders")
    assert samples(metrics, OPERATOR_JOB_PHASE.name) == {}


def test_the_last_snapshot_time_follows_the_decided_patches(kube: FakeKubernetes) -> None:
    kube.status["lastSnapshotTime"] = "2026-01-01T00:00:00Z"
    job = kube.read_job("default", "wordcount")
    assert job is not None
    observation = observe(job, [], None, datetime(2026, 1, 1, 0, 5, tzinfo=UTC))
    read = datetime(2026, 1, 1, tzinfo=UTC)
    assert last_snapshot_after(observation, []) == read
    later = PatchStatus({"lastSnapshotTime": "2026-01-01T00:01:00Z"})
    assert last_snapshot_after(observation, [later]) == datetime(2026, 1, 1, 0, 1, tzinfo=UTC)
    assert (
        last_snapshot_after(observation, [later, PatchStatus({"lastSnapshotTime": None})]) is None
    )
