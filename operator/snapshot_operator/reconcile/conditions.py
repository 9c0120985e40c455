"""The standard conditions a decision reports, computed from the status it arrived at.

Conditions are derived, never decided: each is a function of the plan's final status and the
problems the decision found, so they can be recomputed by every reconcile and say the same
thing for the same state. Two rules keep a settled job quiet: a condition's
``lastTransitionTime`` moves only when its status does, and no message holds anything that
changes with the clock alone, so resyncs of a settled job patch nothing. A condition that turns
to a problem the user has to act on also emits an Event, once, when its reason changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from types import MappingProxyType
from typing import NamedTuple

from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.observation import DecisionSettings
from snapshot_operator.reconcile.phases import suspended_on_failure
from snapshot_operator.reconcile.plan import Plan
from snapshot_operator.reconcile.starting import start_failure_message
from snapshotjob_contract import (
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    Phase,
    ProcessingGuarantee,
    SnapshotJobSpec,
    SnapshotJobStatus,
)

_PHASE_REASONS: Mapping[Phase, ConditionReason] = MappingProxyType(
    {
        Phase.NOT_RUNNING: ConditionReason.NOT_STARTED,
        Phase.STARTING: ConditionReason.STARTING,
        Phase.RUNNING: ConditionReason.RUNNING,
        Phase.SUSPENDED: ConditionReason.SUSPENDED,
        Phase.SUSPENDED_EXPORTING_SNAPSHOT: ConditionReason.EXPORTING_SNAPSHOT,
        Phase.COMPLETING: ConditionReason.COMPLETING,
        Phase.FAILED: ConditionReason.FAILED,
        Phase.COMPLETED: ConditionReason.COMPLETED,
        Phase.RESTARTING: ConditionReason.RESTARTING,
    }
)

_DEGRADED_EVENTS: Mapping[ConditionReason, EventReason] = MappingProxyType(
    {
        ConditionReason.INVALID_SPEC: EventReason.INVALID_SPEC,
        ConditionReason.EXPORT_REJECTED: EventReason.EXPORT_REJECTED,
        ConditionReason.DRIVER_FENCED: EventReason.DRIVER_FENCED,
        ConditionReason.CREATE_FAILED: EventReason.CREATE_FAILED,
        ConditionReason.REPEATED_FORCED_RESTARTS: EventReason.REPEATED_FORCED_RESTARTS,
        ConditionReason.DRIVER_UNSCHEDULABLE: EventReason.DRIVER_UNSCHEDULABLE,
        ConditionReason.DRIVER_NOT_STARTING: EventReason.DRIVER_NOT_STARTING,
        ConditionReason.EXECUTORS_NOT_STARTING: EventReason.EXECUTORS_NOT_STARTING,
        ConditionReason.SNAPSHOT_STALE: EventReason.SNAPSHOT_STALE,
    }
)
"""Degraded reasons that need the user, and the Event that tells them when one appears."""


class _State(NamedTuple):
    status: ConditionStatus
    # A str, not only a ConditionReason: a FAILED job repeats status.lastFailure.reason, which
    # this operator writes from ConditionReason but reads back as the status holds it.
    reason: str
    message: str


def conditions(plan: Plan, spec: SnapshotJobSpec | None) -> list[Condition]:
    """Returns the job's conditions for the plan's status, and emits their Events.

    Args:
        plan: The decision, with its status and the problems it found.
        spec: The job's spec; None if it is invalid.

    Returns:
        One condition of every type, in the order of :class:`ConditionType`.
    """
    computed = {
        ConditionType.READY: _ready(plan, spec),
        ConditionType.PROGRESSING: _progressing(plan),
        ConditionType.DEGRADED: _degraded(plan, spec),
        ConditionType.SNAPSHOT_HEALTHY: _snapshot_healthy(plan, spec),
        ConditionType.STORE_READY: _store_ready(plan),
        ConditionType.RECONCILING: _progressing(plan),
        ConditionType.STALLED: _stalled(plan),
    }
    result = []
    for condition_type, (status, reason, message) in computed.items():
        old = plan.obs.status.condition(condition_type)
        if old is None or old.reason != reason:
            _event_on_problem(plan, condition_type, reason, message)
        since = old.last_transition_time if old and old.status is status else plan.now
        result.append(
            Condition(
                type=condition_type,
                status=status,
                reason=reason,
                message=message,
                last_transition_time=since,
                observed_generation=plan.obs.generation,
            )
        )
    return result


def _event_on_problem(plan: Plan, condition_type: ConditionType, reason: str, message: str) -> None:
    if condition_type is ConditionType.DEGRADED and reason in _DEGRADED_EVENTS:
        plan.event(_DEGRADED_EVENTS[ConditionReason(reason)], message)
    elif condition_type is ConditionType.STORE_READY and reason != ConditionReason.CLUSTER_SAFE:
        plan.event(EventReason.STORE_NOT_READY, message)


def _ready(plan: Plan, spec: SnapshotJobSpec | None) -> _State:
    status = plan.status
    phase = status.phase
    execution = status.execution
    if spec is None:
        return _State(
            ConditionStatus.FALSE, ConditionReason.INVALID_SPEC, "Spec is invalid, see Degraded"
        )
    if (
        phase is Phase.RUNNING
        and status.termination is None
        and execution is not None
        and execution.spec_hash == spec.execution_fingerprint()
    ):
        return _State(
            ConditionStatus.TRUE, ConditionReason.RUNNING, f"Job runs executionId={execution.id}"
        )
    failure = status.last_failure
    if suspended_on_failure(status) and failure is not None:
        return _State(ConditionStatus.FALSE, ConditionReason.SUSPENDED_ON_FAILURE, failure.message)
    if phase is Phase.SUSPENDED and spec.suspend:
        return _State(
            ConditionStatus.TRUE, ConditionReason.SUSPENDED, "Job is suspended as requested"
        )
    if phase is Phase.COMPLETED:
        return _State(ConditionStatus.TRUE, ConditionReason.COMPLETED, "Pipeline finished")
    if phase is Phase.FAILED and failure is not None:
        return _State(ConditionStatus.FALSE, failure.reason, failure.message)
    if plan.waiting_for_pipeline:
        return _State(ConditionStatus.FALSE, *_waiting_for_pipeline(plan))
    return _State(ConditionStatus.FALSE, _PHASE_REASONS[phase], f"Job is {phase.value}")


def _waiting_for_pipeline(plan: Plan) -> tuple[ConditionReason, str]:
    """The reason and message while the driver runs and its pipeline has not started yet."""
    execution = plan.status.execution
    return (
        ConditionReason.WAITING_FOR_PIPELINE,
        f"Driver runs, waiting for it to report a running pipeline "
        f"executionId={execution.id if execution else None} "
        f"timeoutSeconds={plan.settings.pipeline_start_timeout_seconds}",
    )


def _progressing(plan: Plan) -> _State:
    phase = plan.status.phase
    if plan.waiting_for_pipeline and phase is Phase.STARTING:
        return _State(ConditionStatus.TRUE, *_waiting_for_pipeline(plan))
    if phase in (Phase.STARTING, Phase.COMPLETING, Phase.RESTARTING, Phase.NOT_RUNNING):
        return _State(ConditionStatus.TRUE, _PHASE_REASONS[phase], f"Job is {phase.value}")
    if phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT:
        return _State(
            ConditionStatus.TRUE, ConditionReason.EXPORTING_SNAPSHOT, "Copying the restore point"
        )
    if plan.checking_upgrade:
        check = plan.status.upgrade_check
        pod = check.pod_name if check is not None else "-"
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.CHECKING_UPGRADE,
            f"Checking that the changed spec's pipeline can restore the restore point pod={pod}",
        )
    request = plan.status.export_request
    if request is not None:
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.EXPORT_IN_PROGRESS,
            f"Exporting name={request.name}",
        )
    return _State(ConditionStatus.FALSE, ConditionReason.SETTLED, f"Job is {phase.value}")


def _stalled(plan: Plan) -> _State:
    """Stalled for kstatus: True where only the user can move the job on."""
    status = plan.status
    failure = status.last_failure
    if plan.invalid_spec is not None:
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.INVALID_SPEC,
            f"Spec is invalid: {plan.invalid_spec}",
        )
    if status.phase is Phase.FAILED and failure is not None:
        return _State(ConditionStatus.TRUE, failure.reason, failure.message)
    if suspended_on_failure(status) and failure is not None:
        return _State(ConditionStatus.TRUE, ConditionReason.SUSPENDED_ON_FAILURE, failure.message)
    phase = status.phase
    return _State(ConditionStatus.FALSE, _PHASE_REASONS[phase], f"Job is {phase.value}")


def _degraded(plan: Plan, spec: SnapshotJobSpec | None) -> _State:
    if plan.invalid_spec is not None:
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.INVALID_SPEC,
            f"Spec is invalid: {plan.invalid_spec}",
        )
    if plan.fenced is not None:
        return _State(ConditionStatus.TRUE, ConditionReason.DRIVER_FENCED, plan.fenced)
    status = plan.status
    start_failure = status.start_failure
    execution = status.execution
    # Before the export problems: the retry waits until this reason is reported, so nothing
    # the decision can find while a start failed may take its place.
    if (
        status.phase is Phase.STARTING
        and start_failure is not None
        and execution is not None
        and start_failure.execution_id == execution.id
    ):
        limit = plan.settings.start_attempts
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.CREATE_FAILED,
            f"{start_failure_message(start_failure, limit)}; retrying",
        )
    if plan.start_problem is not None:
        limit = plan.settings.pipeline_start_timeout_seconds
        return _State(
            ConditionStatus.TRUE,
            plan.start_problem.reason,
            f"{plan.start_problem.message}; the execution ends as a failure unless its "
            f"pipeline starts within timeoutSeconds={limit}",
        )
    if plan.stalled is not None:
        return _State(ConditionStatus.TRUE, *plan.stalled)
    if plan.upgrade_refused is not None:
        return _State(ConditionStatus.TRUE, *plan.upgrade_refused)
    if plan.export_problem is not None:
        return _State(ConditionStatus.TRUE, *plan.export_problem)
    export_failed = _export_failure_message(spec, status, plan.settings)
    if export_failed is not None:
        return _State(ConditionStatus.TRUE, ConditionReason.EXPORT_FAILED, export_failed)
    failure = status.last_failure
    phase = status.phase
    # A cancelled job is FAILED only because Jet says so: nothing to repair.
    if (
        phase is Phase.FAILED
        and failure is not None
        and failure.reason != ConditionReason.CANCELLED
    ):
        return _State(ConditionStatus.TRUE, failure.reason, failure.message)
    if suspended_on_failure(status) and failure is not None:
        return _State(ConditionStatus.TRUE, ConditionReason.SUSPENDED_ON_FAILURE, failure.message)
    termination = status.termination
    if (
        phase is Phase.RESTARTING
        and termination is not None
        and termination.reason == ConditionReason.QUORUM_LOST
    ):
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.QUORUM_LOST,
            "Driver lost the store's quorum (a network partition) and stopped without a "
            "snapshot; the job restarts from its last snapshot once the store has a quorum",
        )
    forced = status.forced_restarts
    if forced is not None and forced.count >= plan.settings.forced_restarts_degraded:
        limit = plan.settings.forced_restart_limit
        return _State(
            ConditionStatus.TRUE,
            ConditionReason.REPEATED_FORCED_RESTARTS,
            f"Executions ended in forced restarts in a row forcedRestarts={forced.count} "
            f"forcedRestartLimit={limit} snapshotId={forced.snapshot_id}: restarted at once up "
            "to the limit, then counted as failures; see the driver's log and Events",
        )
    if phase is Phase.RESTARTING and status.restarts > 0 and failure is not None:
        return _State(
            ConditionStatus.TRUE, ConditionReason.RESTARTING_AFTER_FAILURE, failure.message
        )
    return _State(ConditionStatus.FALSE, ConditionReason.AS_EXPECTED, "No failure to report")


def _snapshot_healthy(plan: Plan, spec: SnapshotJobSpec | None) -> _State:
    if spec is not None and spec.processing_guarantee is ProcessingGuarantee.NONE:
        return _State(
            ConditionStatus.UNKNOWN,
            ConditionReason.SNAPSHOTS_DISABLED,
            "processingGuarantee is NONE",
        )
    record = plan.status.record()
    if record.last_snapshot_failure is not None:
        return _State(
            ConditionStatus.FALSE,
            ConditionReason.SNAPSHOT_FAILED,
            f"Last snapshot failed snapshotId={record.ongoing_snapshot_id}: "
            f"{record.last_snapshot_failure}",
        )
    taken = plan.status.last_snapshot_time
    if taken is None:
        return _State(
            ConditionStatus.UNKNOWN, ConditionReason.NO_SNAPSHOT_YET, "The job has no snapshot yet"
        )
    # No age in the messages: they must not change between snapshots, or every reconcile
    # would patch the status (the age is the lastSnapshotTime printer column).
    taken_at = _rfc3339(taken)
    age = (plan.now - taken).total_seconds()
    if spec is not None and plan.status.phase is Phase.RUNNING:
        bound = (
            spec.snapshot_interval_seconds * plan.settings.stale_snapshot_intervals
            + plan.settings.stale_snapshot_slack_seconds
        )
        if age > bound:
            return _State(
                ConditionStatus.FALSE,
                ConditionReason.SNAPSHOT_STALE,
                f"Restore point is older than boundSeconds={bound} "
                f"snapshotId={record.snapshot_id} takenAt={taken_at}",
            )
    return _State(
        ConditionStatus.TRUE,
        ConditionReason.SNAPSHOT_RECENT,
        f"Restore point snapshotId={record.snapshot_id} takenAt={taken_at}",
    )


def _store_ready(plan: Plan) -> _State:
    store = plan.obs.store
    if store is None:
        return _State(
            ConditionStatus.UNKNOWN,
            ConditionReason.STORE_UNREACHABLE,
            "Store health could not be read",
        )
    if plan.store_problem is not None:
        return _State(ConditionStatus.FALSE, *plan.store_problem)
    return _State(
        ConditionStatus.TRUE,
        ConditionReason.CLUSTER_SAFE,
        f"Store is cluster-safe members={store.member_count}",
    )


def _export_failure_message(
    spec: SnapshotJobSpec | None, status: SnapshotJobStatus, settings: DecisionSettings
) -> str | None:
    """Returns the Degraded message of a failed copy to the export the spec asks for, if any."""
    failure = status.export_failure
    export = spec.export_snapshot if spec is not None else None
    if (
        failure is None
        or export is None
        or export.name != failure.name
        or status.exported(failure.name) is not None
    ):
        return None
    limit = settings.export_copy_attempts
    outcome = (
        "gave up, set a new exportSnapshot.name to try again"
        if failure.attempts >= limit
        else "retrying"
    )
    return (
        f"Copy to the export failed name={failure.name} attempts={failure.attempts} "
        f"maxAttempts={limit}, {outcome}: {failure.message}"
    )


def _rfc3339(moment: datetime) -> str:
    """Returns the time as RFC 3339 in UTC, to the second (as Kubernetes prints times)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
