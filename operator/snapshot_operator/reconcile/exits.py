"""How an execution ends: what the driver's exit code asks for, failures and cancellations.

The operator learns how an execution ended only from the driver container's exit code
(:class:`DriverExit`) and the record the driver left in the status; an exit 0 is read with the
driver's exit report and termination message (:func:`driver_exit_code`), since a driver that
ended as asked exits 0 too. Everything that follows an ended execution is decided here:
complete, carry out the termination the driver served, restart at once without counting a
failure, wait for a newer execution, or fail, either for good or through the restart policy
(backoff, ``maxRestarts``, ``suspendOnFailure``).

What each code leads to is a table (:data:`EXITS`), not a chain of branches: codes that mean
the same thing (an indeterminate record write, an interrupted driver) share one outcome and
differ only in their Event and reason, and a new code is one row, checked by the tests.

Restarts at once are not failures, but they are counted (``status.forcedRestarts``) until a new
snapshot shows progress: a driver that keeps ending that way would otherwise restart for ever,
as fast as it can fail. Several in a row make the job Degraded; beyond a bound each further
one is a failure, so the restart policy's backoff and ``maxRestarts`` end the loop.
"""

from __future__ import annotations

import enum
import json
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.observation import DriverPod, PodPhase
from snapshot_operator.reconcile.plan import Plan
from snapshot_operator.reconcile.starting import start_or_wait
from snapshotjob_contract import (
    ActionAfter,
    ConditionReason,
    DriverExit,
    DriverExitStatus,
    ForcedRestartsStatus,
    Phase,
    SnapshotJobSpec,
    TerminationMode,
    TerminationStatus,
)
from snapshotjob_contract.exits import ENDED_AS_ASKED_PREFIX

CANCELLED = ConditionReason.CANCELLED
"""``lastFailure.reason`` of a cancelled job: Jet reports a cancelled job as failed."""

SUSPENDED_ON_FAILURE = "SuspendedOnFailure"
"""``termination.reason`` that holds a job suspended by suspendOnFailure (and, as
:attr:`ConditionReason.SUSPENDED_ON_FAILURE`, the reason its conditions give)."""

INDETERMINATE_RECORD_WRITE = "IndeterminateRecordWrite"
"""``termination.reason`` of a forced restart after :attr:`DriverExit.RESTART_FORCEFUL`."""

DRIVER_INTERRUPTED = "DriverInterrupted"
"""``termination.reason`` of a forced restart after :attr:`DriverExit.INTERRUPTED`."""

KILLED_EXIT_CODE = 137
"""A container's exit code after SIGKILL (128 + 9): the kubelet's at the end of the grace
period, or the kernel's OOM killer; the driver chose nothing."""

QUORUM_LOST = ConditionReason.QUORUM_LOST.value
"""``termination.reason`` of a forced restart after :attr:`DriverExit.QUORUM_LOST`; while it
is held (waiting for the store's quorum) Degraded gives it as its reason."""


class ExitOutcome(enum.Enum):
    """What an ended execution leads to; it fixes whether the exit counts as a failure."""

    STOP = enum.auto()
    """The job stops for good in the exit's phase (COMPLETED, or FAILED when no restart can
    help); a spec change starts it again."""
    CARRY_OUT_TERMINATION = enum.auto()
    """The driver served ``status.termination``: restart, suspend or cancel, as its mode says."""
    RESTART_AT_ONCE = enum.auto()
    """Nothing is wrong with the job: a new execution restores the last snapshot at once, even
    if ``suspend`` is set, not counted as a failure and without a backoff."""
    WAIT_FOR_NEWER_EXECUTION = enum.auto()
    """The driver saw a newer execution than the operator's view: nothing failed, and nothing
    may start on its account (that could make two drivers); Degraded until the status moves."""
    RESTART_POLICY = enum.auto()
    """A failure: counted in ``restarts`` and restarted after a backoff, or suspended
    (``suspendOnFailure``), or FAILED once ``maxRestarts`` is reached."""

    @property
    def counts_as_failure(self) -> bool:
        """Whether the exit counts in ``status.restarts``, against ``maxRestarts``."""
        return self is ExitOutcome.RESTART_POLICY

    @property
    def backoff(self) -> bool:
        """Whether the next execution waits for the restart backoff."""
        return self is ExitOutcome.RESTART_POLICY


@dataclass(frozen=True)
class ExitHandling:
    """What the operator does when the current driver exits with one code.

    Attributes:
        outcome: What the exit leads to.
        event: The Event that reports the exit; None when the outcome reports it (the
            restart policy, the carried-out termination, or Degraded for a fenced driver).
        message: The Event's, ``lastFailure``'s or Degraded's message, a ``str.format``
            template of ``code``, ``context`` (execution, attempt, Pod), ``dropped`` (the
            graceful request a restart drops), ``snapshot_id`` (the restore point) and
            ``detail`` (the container's reason if it says more than ``Error``, as
            `` containerReason=OOMKilled``, and the driver's termination message, or with
            ``FallbackToLogsOnError`` its log's last lines, as `` driverMessage="..."``; empty
            if there are neither).
        phase: The phase the job moves to, when the exit alone fixes it.
        failure: ``lastFailure.reason``, when the exit is a failure.
        restart_reason: ``termination.reason`` of the RESTART_FORCEFUL marker the status keeps
            while a restart at once waits for the store, so that even ``suspend`` cannot skip
            the restore.
    """

    outcome: ExitOutcome
    event: EventReason | None = None
    message: str = ""
    phase: Phase | None = None
    failure: ConditionReason | None = None
    restart_reason: str | None = None


_PLAIN_FAILURE = ExitHandling(
    ExitOutcome.RESTART_POLICY,
    message="Driver exited exitCode={code} {context}{detail}",
    failure=ConditionReason.DRIVER_FAILED,
)

EXITS: Mapping[DriverExit | None, ExitHandling] = MappingProxyType(
    {
        DriverExit.COMPLETED: ExitHandling(
            ExitOutcome.STOP,
            EventReason.COMPLETED,
            "Pipeline finished {context}",
            phase=Phase.COMPLETED,
        ),
        DriverExit.BAD_INPUT: ExitHandling(
            ExitOutcome.STOP,
            EventReason.EXECUTION_FAILED,
            "Driver cannot run the pipeline exitCode={code} {context}{detail}; see the driver's "
            "log, "
            "then fix the image or spec",
            phase=Phase.FAILED,
            failure=ConditionReason.BAD_INPUT,
        ),
        # The pipeline failed, or a test's failpoint crashed it: restartPolicy decides.
        DriverExit.FAILED: _PLAIN_FAILURE,
        DriverExit.FAILPOINT_CRASH: _PLAIN_FAILURE,
        DriverExit.TERMINATED: ExitHandling(ExitOutcome.CARRY_OUT_TERMINATION),
        DriverExit.SNAPSHOT_CORRUPTED: ExitHandling(
            ExitOutcome.STOP,
            EventReason.SNAPSHOT_CORRUPTED,
            "Restore found the restore point corrupted snapshotId={snapshot_id} "
            "{context}{detail}; the job cannot restart from it: create a new SnapshotJob with "
            "spec.initialSnapshotName set to an exported snapshot",
            phase=Phase.FAILED,
            failure=ConditionReason.SNAPSHOT_CORRUPTED,
        ),
        DriverExit.SNAPSHOT_INCOMPATIBLE: ExitHandling(
            ExitOutcome.STOP,
            EventReason.SNAPSHOT_INCOMPATIBLE,
            "Restore found the restore point incompatible with this pipeline "
            "snapshotId={snapshot_id} {context}{detail}; see the driver's log for both sides, then "
            "revert spec.pipeline or start a new SnapshotJob without the snapshot",
            phase=Phase.FAILED,
            failure=ConditionReason.SNAPSHOT_INCOMPATIBLE,
        ),
        DriverExit.SNAPSHOT_NOT_FOUND: ExitHandling(
            ExitOutcome.STOP,
            EventReason.SNAPSHOT_NOT_FOUND,
            "The initial snapshot does not exist {context}{detail}; set "
            "spec.initialSnapshotName to an export listed in status.exportedSnapshots of a job "
            "in this namespace",
            phase=Phase.FAILED,
            failure=ConditionReason.SNAPSHOT_NOT_FOUND,
        ),
        DriverExit.RESTORE_NEEDS_CONSENT: ExitHandling(
            ExitOutcome.STOP,
            EventReason.RESTORE_NEEDS_CONSENT,
            "The store lost the restore point and only an older durable copy exists "
            "{context}{detail}; to restore it, writing again the output committed since, set "
            "spec.durableRestore to the two snapshot ids the message names",
            phase=Phase.FAILED,
            failure=ConditionReason.RESTORE_NEEDS_CONSENT,
        ),
        # An outage is counted, so one that lasts ends in maxRestarts instead of a loop.
        DriverExit.TRANSIENT_FAILURE: ExitHandling(
            ExitOutcome.RESTART_POLICY,
            message="Driver stopped because a system it needs was unavailable exitCode={code} "
            "{context}{detail}",
            failure=ConditionReason.TRANSIENT_FAILURE,
        ),
        # A step outlived its timeout: counted, so a job that keeps stalling ends FAILED.
        DriverExit.STALLED: ExitHandling(
            ExitOutcome.RESTART_POLICY,
            message="Driver ended a step that outlived its timeout exitCode={code} "
            "{context}{detail}",
            failure=ConditionReason.DRIVER_STALLED,
        ),
        DriverExit.SOURCE_DATA_LOST: ExitHandling(
            ExitOutcome.STOP,
            EventReason.SOURCE_DATA_LOST,
            "Restore found Kafka offsets that retention deleted {context}{detail}; no restart "
            "brings them back: set spec.expiredOffsets to Earliest to go on without the "
            "records, or restore from another snapshot",
            phase=Phase.FAILED,
            failure=ConditionReason.SOURCE_DATA_LOST,
        ),
        # The state may hold prepared transactions that only a restore resolves (see
        # docs/concepts/protocol.md, Termination modes), so the pending request is dropped, not
        # served.
        DriverExit.RESTART_FORCEFUL: ExitHandling(
            ExitOutcome.RESTART_AT_ONCE,
            EventReason.FORCED_RESTART,
            "Driver could not tell whether the execution record was written, restarting at "
            "once exitCode={code} {context}{dropped}",
            restart_reason=INDETERMINATE_RECORD_WRITE,
        ),
        DriverExit.FENCED: ExitHandling(
            ExitOutcome.WAIT_FOR_NEWER_EXECUTION,
            message="Driver stopped because a newer execution owns the job exitCode={code} "
            "{context}; waiting for the status to show it (delete the driver Pod to start again)",
        ),
        # SIGTERM from outside (drain, eviction, a deleted Pod): nothing wrong with the job.
        DriverExit.INTERRUPTED: ExitHandling(
            ExitOutcome.RESTART_AT_ONCE,
            EventReason.DRIVER_INTERRUPTED,
            "Driver was interrupted (SIGTERM), restarting at once from the last snapshot "
            "exitCode={code} {context}{dropped}",
            restart_reason=DRIVER_INTERRUPTED,
        ),
        # A partition left the driver on the minority side: nothing wrong with the job, and
        # the start gate (BelowQuorum) holds the restart until the store has a quorum.
        DriverExit.QUORUM_LOST: ExitHandling(
            ExitOutcome.RESTART_AT_ONCE,
            EventReason.QUORUM_LOST,
            "Driver lost the store's quorum and stopped without a snapshot, restarting from "
            "the last snapshot once the store has a quorum exitCode={code} {context}"
            "{detail}{dropped}",
            restart_reason=QUORUM_LOST,
        ),
        None: _PLAIN_FAILURE,
    }
)
"""What the operator does for each exit code of the current driver; None: any other code
(e.g. 137 after a SIGKILL or an OOM kill), which is a failure like FAILED."""


def exit_handling(code: int | None, termination: TerminationStatus | None) -> ExitHandling:
    """Returns what to do when the current driver exits.

    Args:
        code: The driver container's exit code; None if the Pod failed without one.
        termination: The termination in effect, if any.
    """
    meaning = None if code is None else DriverExit.of(code)
    if meaning is DriverExit.TERMINATED and termination is None:
        # Nothing was asked of the driver, so it stopped on its own: a failure.
        return _PLAIN_FAILURE
    return EXITS[meaning]


def driver_exit_code(pod: DriverPod, report: DriverExitStatus | None) -> int | None:
    """Returns the code that tells how the current driver ended, as the driver meant it.

    The container's exit code, but :attr:`DriverExit.TERMINATED` for an exit 0 of a driver
    that ended as asked: it exits 0 rather than 64
    (:func:`~snapshotjob_contract.exits.process_exit_status`), and says so in its exit report
    or in its termination message. A driver of an earlier release exits 64, read as it is.
    None if the Pod failed without an exit code.

    Args:
        pod: The current execution's driver Pod, whose containers stopped.
        report: The current execution's driver's exit report (``status.reported_exit()``).
    """
    if pod.exit_code is not None:
        code = pod.exit_code
    elif pod.phase is PodPhase.SUCCEEDED:
        code = DriverExit.COMPLETED
    else:
        return None
    if code != DriverExit.COMPLETED:
        return code
    reported_terminated = report is not None and report.exit_code == DriverExit.TERMINATED
    message = pod.termination_message or ""
    if reported_terminated or message.startswith(ENDED_AS_ASKED_PREFIX):
        return DriverExit.TERMINATED
    return code


def cancelled(plan: Plan, message: str) -> None:
    """The job was cancelled: FAILED, as Jet reports a cancelled job."""
    plan.update(phase=Phase.FAILED, termination=None, export_request=None)
    plan.fail(CANCELLED, message)
    plan.event(EventReason.CANCELLED, message)


def suspended(plan: Plan, message: str) -> None:
    """The job stops for now, as asked (spec.suspend or a SUSPEND mode): SUSPENDED, announced."""
    plan.update(phase=Phase.SUSPENDED)
    plan.event(EventReason.SUSPENDED, message)


def execution_ended(plan: Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
    """The current driver's containers stopped: what its exit code asks for (:data:`EXITS`)."""
    status = plan.status
    execution = status.execution
    assert execution is not None
    termination = status.termination
    code = driver_exit_code(pod, status.reported_exit())
    handling = exit_handling(code, termination)
    context = f"executionId={execution.id} attempt={execution.attempt} pod={pod.name}"
    if handling.outcome is ExitOutcome.RESTART_AT_ONCE and _too_many_forced_restarts(plan):
        failed(
            plan,
            spec,
            ConditionReason.REPEATED_FORCED_RESTARTS,
            f"Driver ended in a forced restart again, counted as a failure exitCode={code} "
            f"{context} forcedRestarts={_forced(plan)} "
            f"forcedRestartLimit={plan.settings.forced_restart_limit}{failure_detail(pod)}",
            pod,
        )
        return
    message = handling.message.format(
        code=code,
        context=context,
        dropped=f" droppedRequest={termination.mode.value}" if termination else "",
        snapshot_id=status.record().snapshot_id,
        detail=failure_detail(pod),
    )
    if handling.event is not None:
        plan.event(handling.event, message)
    outcome = handling.outcome
    if outcome is ExitOutcome.STOP:
        assert handling.phase is not None
        plan.update(phase=handling.phase, termination=None, export_request=None)
        if handling.failure is not None:
            plan.fail(handling.failure, message, pod)
    elif outcome is ExitOutcome.RESTART_AT_ONCE:
        # Any pending graceful request is dropped: only the restore may follow.
        plan.update(termination=None, export_request=None)
        start_or_wait(plan, spec, restart_reason=handling.restart_reason)
    elif outcome is ExitOutcome.WAIT_FOR_NEWER_EXECUTION:
        # The driver saw another execution id in the status than the one observed here: this
        # view is older than the driver's. Nothing failed and nothing may start on its account.
        plan.fenced = message
        plan.requeue(plan.settings.store_retry_seconds)
    elif outcome is ExitOutcome.CARRY_OUT_TERMINATION:
        assert termination is not None
        _terminated_as_requested(plan, spec, termination, context)
    else:
        assert handling.failure is not None
        failed(plan, spec, handling.failure, message, pod)


def failure_detail(pod: DriverPod) -> str:
    """Returns what the ended driver container says about its end, for a failure's message.

    Both parts are key=value context: `` containerReason=OOMKilled`` when the kubelet's reason
    says more than the exit code, and `` driverMessage="..."`` (the driver's termination
    message, or the last lines of its log) as a JSON string; empty if there are neither.
    """
    detail = ""
    if pod.termination_reason:
        detail += f" containerReason={pod.termination_reason}"
    if pod.termination_message:
        detail += f" driverMessage={json.dumps(pod.termination_message, ensure_ascii=False)}"
    return detail


def _forced(plan: Plan) -> int:
    """Returns the forced restarts in a row the status counts (0 once a snapshot followed)."""
    forced = plan.status.forced_restarts
    if forced is None or forced.snapshot_id != plan.status.record().snapshot_id:
        return 0
    return forced.count


def _too_many_forced_restarts(plan: Plan) -> bool:
    """Counts the current driver's forced restart; whether it is beyond the bound."""
    count = _forced(plan) + 1
    plan.update(
        forced_restarts=ForcedRestartsStatus(
            count=count, snapshot_id=plan.status.record().snapshot_id
        )
    )
    return count > plan.settings.forced_restart_limit


def reset_forced_restarts(plan: Plan) -> None:
    """Forgets the forced restarts once the job made progress: a new snapshot, or completion."""
    if plan.status.forced_restarts is not None and (
        _forced(plan) == 0 or plan.status.phase is Phase.COMPLETED
    ):
        plan.update(forced_restarts=None)


def _terminated_as_requested(
    plan: Plan, spec: SnapshotJobSpec, termination: TerminationStatus, context: str
) -> None:
    """The driver served ``status.termination``: carry out what its mode does after stopping."""
    action = termination.mode.action_after
    plan.update(termination=None, export_request=None)
    # After a RESTART the terminal snapshot left the state clean: a job whose spec asks to be
    # suspended is suspended without another execution.
    if action is ActionAfter.SUSPEND or (action is ActionAfter.RESTART and spec.suspend):
        suspended(
            plan,
            f"Suspended with a terminal snapshot snapshotId={plan.status.record().snapshot_id} "
            f"{context}",
        )
    elif action is ActionAfter.RESTART:
        start_or_wait(plan, spec)
    else:
        export = f" exportName={termination.export_name}" if termination.export_name else ""
        cancelled(
            plan,
            f"Cancelled with a terminal snapshot mode={termination.mode.value}{export} {context}",
        )


def failed(
    plan: Plan,
    spec: SnapshotJobSpec,
    reason: ConditionReason,
    message: str,
    failed_pod: DriverPod | None = None,
) -> None:
    """An execution failed: suspend, give up, or restart after a backoff.

    Args:
        plan: The decision.
        spec: The job's spec.
        reason: ``lastFailure.reason``.
        message: ``lastFailure.message`` and the Event's message.
        failed_pod: The failed driver Pod, kept for its log (``lastFailure.driverPod``); None
            when no driver Pod failed (it was lost, or the operator ended it).
    """
    restarts = plan.status.restarts
    policy = spec.restart_policy
    plan.update(termination=None, export_request=None)
    plan.fail(reason, message, failed_pod)
    if spec.suspend_on_failure:
        # Held until the spec changes: spec.suspend is false, and must not resume the job.
        plan.update(
            phase=Phase.SUSPENDED,
            termination=plan.forceful_marker(
                TerminationMode.SUSPEND_FORCEFUL, SUSPENDED_ON_FAILURE
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
