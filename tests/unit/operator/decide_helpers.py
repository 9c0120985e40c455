"""Builders for the decision tests: jobs in a known state, their snapshots, and action filters.

The ``test_decide_*`` modules (and the Argo CD health check's and the job copies' tests) build
the observations they decide on with these: a job whose current execution (attempt 2) runs in
one Pod (:func:`running_job`, decided on once by :func:`decide_running`), a suspended job with
a restore point (:func:`suspended_job`), minimal specs (:func:`spec_of`), execution records
with one snapshot (:func:`a_snapshot`, :func:`snapshot_at`) and graceful termination requests
(:func:`graceful`). Arbitrary observations come from the hypothesis strategies of ``world.py``.
"""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any, TypeVar

from hypothesis import HealthCheck, settings

from snapshot_operator.reconcile import (
    Action,
    CreateDriverPod,
    DecisionSettings,
    DriverPod,
    EmitEvent,
    EventReason,
    Observation,
    PodPhase,
    StoreHealth,
    decide,
    driver_pod_name,
    execution_id,
)
from snapshotjob_contract import (
    Condition,
    ConditionType,
    ExecutionRecord,
    ExecutionRecordStatus,
    ExecutionStatus,
    Phase,
    PipelineStartedStatus,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
    TerminationMode,
    TerminationStatus,
)
from snapshotjob_contract.status import UpgradeCheckStatus
from tests.unit.operator.world import JOB, NOW, ago

HEALTHY = StoreHealth(cluster_safe=True, member_count=3)
"""A store that allows any execution: cluster-safe, three members."""
SETTINGS = DecisionSettings()
"""The decision's default settings, which :func:`decide` uses unless given others."""
A = TypeVar("A")

many = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])
"""The hypothesis settings of the property tests over arbitrary observations."""


def of_type(actions: tuple[Action, ...], kind: type[A]) -> list[A]:
    """The actions of one type, in order.

    Args:
        actions: What a decision returned.
        kind: The action type to keep.

    Returns:
        The actions of that type.
    """
    return [action for action in actions if isinstance(action, kind)]


def creates(actions: tuple[Action, ...]) -> list[CreateDriverPod]:
    """The driver Pods the actions create.

    Args:
        actions: What a decision returned.

    Returns:
        The ``CreateDriverPod`` actions, in order.
    """
    return of_type(actions, CreateDriverPod)


def reasons(actions: tuple[Action, ...]) -> set[EventReason]:
    """The reasons of the Events the actions emit.

    Args:
        actions: What a decision returned.

    Returns:
        The set of Event reasons.
    """
    return {action.reason for action in actions if isinstance(action, EmitEvent)}


def spec_of(fields: dict[str, Any] | None = None) -> SnapshotJobSpec:
    """A minimal spec with the given fields.

    Args:
        fields: camelCase spec fields on top of an image and a pipeline module.

    Returns:
        The validated spec.
    """
    return SnapshotJobSpec.model_validate(
        {"image": "i", "pipeline": {"module": "m"}, **(fields or {})}
    )


def condition(status: SnapshotJobStatus, condition_type: ConditionType) -> Condition:
    """The status's condition of one type, which must be reported.

    Args:
        status: The status a decision arrived at.
        condition_type: The condition's type.

    Returns:
        The condition.
    """
    found = status.condition(condition_type)
    assert found is not None, f"{condition_type} not reported"
    return found


def running_job(
    spec: SnapshotJobSpec,
    *,
    phase: Phase = Phase.RUNNING,
    pod_phase: PodPhase = PodPhase.RUNNING,
    exit_code: int | None = None,
    termination: TerminationStatus | None = None,
    record: ExecutionRecord | None = None,
    restarts: int = 0,
    spec_hash: str | None = None,
    store: StoreHealth | None = HEALTHY,
    pipeline_started: bool | None = None,
) -> Observation:
    """A job whose current execution (attempt 2) runs in one Pod.

    Unless ``pipeline_started`` says otherwise, a job past STARTING also plays the driver's
    report that its pipeline runs (``status.pipelineStarted`` naming the execution): without
    it the operator keeps the job STARTING.

    Args:
        spec: The job's spec.
        phase: The job's phase.
        pod_phase: The driver Pod's phase.
        exit_code: The driver container's exit code, once it ended.
        termination: A pending termination request in the status.
        record: The execution record in the status; None for none.
        restarts: ``status.restarts``.
        spec_hash: The execution's spec fingerprint; the spec's own by default (no change).
        store: The store's health; None for an unreachable store.
        pipeline_started: Whether the driver reported its pipeline running; by phase if None.

    Returns:
        The observation, at :data:`~tests.unit.operator.world.NOW`.
    """
    execution = ExecutionStatus(
        id=execution_id(JOB.uid, 2, NOW),
        driver_pod=driver_pod_name(JOB.name, 2),
        started_at=ago(30),
        attempt=2,
        spec_hash=spec_hash or spec.execution_fingerprint(),
    )
    status = SnapshotJobStatus(
        phase=phase,
        observed_generation=1,
        execution=execution,
        termination=termination,
        restarts=restarts,
        execution_record=None if record is None else ExecutionRecordStatus.of(record),
    )
    if pipeline_started is None:
        pipeline_started = phase in (Phase.RUNNING, Phase.COMPLETING)
    if pipeline_started:
        report = PipelineStartedStatus(execution_id=execution.id, time=ago(20))
        status = status.model_copy(update={"pipeline_started": report})
    pod = DriverPod(execution.driver_pod, execution.id, pod_phase, exit_code)
    return Observation(JOB, 1, spec, status, NOW, (pod,), store)


def suspended_job(spec: SnapshotJobSpec, record: ExecutionRecord) -> Observation:
    """A SUSPENDED job without a Pod whose last execution (attempt 2) left ``record``.

    Args:
        spec: The job's spec.
        record: The execution record in the status.

    Returns:
        The observation, at :data:`~tests.unit.operator.world.NOW`, with a healthy store.
    """
    execution = ExecutionStatus(
        id=execution_id(JOB.uid, 2, NOW),
        driver_pod=driver_pod_name(JOB.name, 2),
        started_at=ago(3600),
        attempt=2,
        spec_hash=spec.execution_fingerprint(),
    )
    job_status = SnapshotJobStatus(
        phase=Phase.SUSPENDED,
        observed_generation=1,
        execution=execution,
        execution_record=ExecutionRecordStatus.of(record),
    )
    return Observation(JOB, 1, spec, job_status, NOW, (), HEALTHY)


def a_snapshot(
    kind: SnapshotKind = SnapshotKind.AUTOMATIC, name: str | None = None
) -> ExecutionRecord:
    """An execution record with one successful snapshot (id 0).

    Args:
        kind: The snapshot's kind.
        name: The export's name, for the kinds that export.

    Returns:
        The record.
    """
    record = ExecutionRecord().start_new_snapshot(now=1_000)
    return record.snapshot_done(
        kind,
        export_name=name,
        num_bytes=10,
        num_keys=1,
        num_chunks=1,
        failure=None,
        now=2_000,
        backup_count=1,
    )


def snapshot_at(end_time: datetime, failure: str | None = None) -> ExecutionRecord:
    """A record whose restore point ended at ``end_time``.

    Args:
        end_time: When the restore point's snapshot ended.
        failure: A later attempt's failure; None for no later attempt.

    Returns:
        The record.
    """
    millis = int(end_time.timestamp() * 1000)
    record = ExecutionRecord()
    outcomes = [None] if failure is None else [None, failure]
    for outcome in outcomes:
        record = record.start_new_snapshot(now=millis - 500).snapshot_done(
            SnapshotKind.AUTOMATIC,
            export_name=None,
            num_bytes=10,
            num_keys=1,
            num_chunks=1,
            failure=outcome,
            now=millis,
            backup_count=1,
        )
    return record


def graceful(mode: TerminationMode, seconds_ago: int = 5) -> TerminationStatus:
    """A termination request of the current execution (attempt 2), as the operator writes it.

    Args:
        mode: The requested mode.
        seconds_ago: How long before :data:`~tests.unit.operator.world.NOW` it was requested.

    Returns:
        The request.
    """
    return TerminationStatus(
        mode=mode,
        request_id=f"{execution_id(JOB.uid, 2, NOW)}/{mode.value}",
        requested_at=ago(seconds_ago),
        reason="SuspendRequested",
    )


def decide_running(spec: SnapshotJobSpec, **kwargs: Any) -> tuple[Observation, tuple[Action, ...]]:
    """Decides once on a :func:`running_job`.

    Args:
        spec: The job's spec.
        **kwargs: What else :func:`running_job` takes.

    Returns:
        The observation and the actions decided on it.
    """
    observation = running_job(spec, **kwargs)
    return observation, decide(observation)


def upgrade_check_passed(observation: Observation) -> Observation:
    """The observation with the upgrade check of its spec passed, as the operator records it
    once the check's Pod exited 0 (:mod:`snapshot_operator.reconcile.upgrade_check`)."""
    spec = observation.spec
    assert isinstance(spec, SnapshotJobSpec)
    check = UpgradeCheckStatus(
        spec_hash=spec.execution_fingerprint(),
        pod_name="job-check",
        snapshot_id=max(observation.status.record().snapshot_id, 0),
        started_at=observation.now,
        passed=True,
    )
    status = observation.status.model_copy(update={"upgrade_check": check})
    return dataclasses.replace(observation, status=status)
