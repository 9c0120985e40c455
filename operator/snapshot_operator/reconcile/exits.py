"""How an execution ends: what the driver's exit code asks for, failures and cancellations.

The operator learns how an execution ended only from the driver container's exit code
(:class:`DriverExit`) and the record the driver left in the status. Everything that follows
an ended execution is decided here: complete, carry out the termination the driver served,
restart at once without counting a failure, wait for a newer execution, or fail, either for
good or through the restart policy (backoff, ``maxRestarts``, ``suspendOnFailure``).
"""

from __future__ import annotations

from snapshot_operator.api import (
    ConditionReason,
    DriverExit,
    FailureStatus,
    Phase,
    SnapshotJobSpec,
    TerminationModeName,
    TerminationStatus,
)
from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.observation import DriverPod, PodPhase
from snapshot_operator.reconcile.plan import Plan
from snapshot_operator.reconcile.starting import INDETERMINATE_RECORD_WRITE, start_or_wait
from spark_runtime.protocol import ActionAfter

CANCELLED = ConditionReason.CANCELLED
"""``lastFailure.reason`` of a cancelled job: Jet reports a cancelled job as failed."""

SUSPENDED_ON_FAILURE = "SuspendedOnFailure"
"""``termination.reason`` that holds a job suspended by suspendOnFailure (and, as
:attr:`ConditionReason.SUSPENDED_ON_FAILURE`, the reason its conditions give)."""

DRIVER_INTERRUPTED = "DriverInterrupted"
"""``termination.reason`` of a forced restart after :attr:`DriverExit.INTERRUPTED`."""


def cancelled(plan: Plan, message: str) -> None:
    """The job was cancelled: FAILED, as Jet reports a cancelled job."""
    plan.update(
        phase=Phase.FAILED,
        termination=None,
        export_request=None,
        last_failure=FailureStatus(reason=CANCELLED, message=message, time=plan.now),
    )
    plan.event(EventReason.CANCELLED, message)


def execution_ended(plan: Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
    """The current driver's containers stopped: what its exit code asks for."""
    status = plan.status
    execution = status.execution
    assert execution is not None
    termination = status.termination
    code = (
        pod.exit_code
        if pod.exit_code is not None
        else (DriverExit.COMPLETED if pod.phase is PodPhase.SUCCEEDED else None)
    )
    meaning = None if code is None else DriverExit.of(code)
    context = f"executionId={execution.id} attempt={execution.attempt} pod={pod.name}"
    if meaning is DriverExit.COMPLETED:
        plan.update(phase=Phase.COMPLETED, termination=None, export_request=None)
        plan.event(EventReason.COMPLETED, f"Pipeline finished {context}")
    elif meaning is DriverExit.RESTART_FORCEFUL:
        dropped = f" droppedRequest={termination.mode.value}" if termination else ""
        plan.event(
            EventReason.FORCED_RESTART,
            f"Driver could not tell whether the execution record was written, restarting at "
            f"once exitCode={code} {context}{dropped}",
        )
        plan.update(termination=None, export_request=None)
        start_or_wait(plan, spec, forced=INDETERMINATE_RECORD_WRITE)
    elif meaning is DriverExit.INTERRUPTED:
        # SIGTERM from outside (drain, eviction, a deleted Pod): nothing wrong with the job.
        dropped = f" droppedRequest={termination.mode.value}" if termination else ""
        plan.event(
            EventReason.DRIVER_INTERRUPTED,
            f"Driver was interrupted (SIGTERM), restarting at once from the last snapshot "
            f"exitCode={code} {context}{dropped}",
        )
        plan.update(termination=None, export_request=None)
        start_or_wait(plan, spec, forced=DRIVER_INTERRUPTED)
    elif meaning is DriverExit.FENCED:
        # The driver saw another execution id in the status than the one observed here: this
        # view is older than the driver's. Nothing failed and nothing may start on its account.
        plan.fenced = (
            f"Driver stopped because a newer execution owns the job exitCode={code} {context}; "
            "waiting for the status to show it (delete the driver Pod to start again)"
        )
        plan.requeue(plan.settings.store_retry_seconds)
    elif meaning is DriverExit.TERMINATED and termination is not None:
        _terminated_as_requested(plan, spec, termination, context)
    elif meaning is DriverExit.BAD_INPUT:
        message = (
            f"Driver cannot run the pipeline exitCode={code} {context}; see the driver's log, "
            "then fix the image or spec"
        )
        plan.update(
            phase=Phase.FAILED,
            termination=None,
            export_request=None,
            last_failure=FailureStatus(
                reason=ConditionReason.BAD_INPUT, message=message, time=plan.now
            ),
        )
        plan.event(EventReason.EXECUTION_FAILED, message)
    elif meaning is DriverExit.SNAPSHOT_CORRUPTED:
        snapshot_id = status.record().snapshot_id
        message = (
            f"Restore found the restore point corrupted snapshotId={snapshot_id} {context}; "
            "the job cannot restart from it: create a new SnapshotJob with "
            "spec.initialSnapshotName set to an exported snapshot"
        )
        plan.update(
            phase=Phase.FAILED,
            termination=None,
            export_request=None,
            last_failure=FailureStatus(
                reason=ConditionReason.SNAPSHOT_CORRUPTED, message=message, time=plan.now
            ),
        )
        plan.event(EventReason.SNAPSHOT_CORRUPTED, message)
    else:
        failed(
            plan, spec, ConditionReason.DRIVER_FAILED, f"Driver exited exitCode={code} {context}"
        )


def _terminated_as_requested(
    plan: Plan, spec: SnapshotJobSpec, termination: TerminationStatus, context: str
) -> None:
    """The driver served ``status.termination``: carry out what its mode does after stopping."""
    action = termination.mode.mode.action_after
    plan.update(termination=None, export_request=None)
    if action is ActionAfter.RESTART and spec.suspend:
        # The terminal snapshot left the state clean: suspend without another execution.
        plan.update(phase=Phase.SUSPENDED)
        plan.event(
            EventReason.SUSPENDED,
            f"Suspended with a terminal snapshot snapshotId={plan.status.record().snapshot_id} "
            f"{context}",
        )
    elif action is ActionAfter.RESTART:
        start_or_wait(plan, spec, forced=False)
    elif action is ActionAfter.SUSPEND:
        plan.update(phase=Phase.SUSPENDED)
        plan.event(
            EventReason.SUSPENDED,
            f"Suspended with a terminal snapshot snapshotId={plan.status.record().snapshot_id} "
            f"{context}",
        )
    else:
        export = f" exportName={termination.export_name}" if termination.export_name else ""
        cancelled(
            plan,
            f"Cancelled with a terminal snapshot mode={termination.mode.value}{export} {context}",
        )


def failed(plan: Plan, spec: SnapshotJobSpec, reason: ConditionReason, message: str) -> None:
    """An execution failed: suspend, give up, or restart after a backoff."""
    restarts = plan.status.restarts
    policy = spec.restart_policy
    plan.update(
        termination=None,
        export_request=None,
        last_failure=FailureStatus(reason=reason, message=message, time=plan.now),
    )
    if spec.suspend_on_failure:
        # Held until the spec changes: spec.suspend is false, and must not resume the job.
        plan.update(
            phase=Phase.SUSPENDED,
            termination=plan.forceful_marker(
                TerminationModeName.SUSPEND_FORCEFUL, SUSPENDED_ON_FAILURE
            ),
        )
        plan.event(
            EventReason.SUSPENDED_ON_FAILURE,
            f"{message}; suspended without a snapshot (suspendOnFailure), change the spec to "
            "resume",
        )
    elif restarts >= policy.max_restarts:
        plan.update(phase=Phase.FAILED)
        plan.event(
            EventReason.RESTART_LIMIT_REACHED,
            f"{message}; giving up restarts={restarts} maxRestarts={policy.max_restarts}",
        )
    else:
        delay = policy.backoff(restarts + 1)
        plan.update(phase=Phase.RESTARTING, restarts=restarts + 1)
        plan.event(
            EventReason.EXECUTION_FAILED,
            f"{message}; restarting backoffSeconds={delay} restarts={restarts + 1}",
        )
        plan.requeue(delay)
