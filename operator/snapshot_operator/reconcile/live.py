"""The live execution: supervising the current driver Pod and serving spec changes through it.

While an execution exists (:data:`LIVE_PHASES`) the operator changes nothing by itself: it
follows the current driver Pod, removes Pods of older executions, and turns the first pending
spec change into one request to the driver (``status.termination`` or ``status.exportRequest``).
Graceful requests are the driver's to serve, with a terminal snapshot; one not served within
the deadline is escalated to the forceful mode of the same action, which needs no driver.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from datetime import timedelta
from types import MappingProxyType

from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.exits import (
    KILLED_EXIT_CODE,
    cancelled,
    execution_ended,
    failed,
    suspended,
)
from snapshot_operator.reconcile.gates import export_to_take
from snapshot_operator.reconcile.observation import DriverPod, PodPhase
from snapshot_operator.reconcile.pipeline_start import announce_pipeline, watch_pipeline_start
from snapshot_operator.reconcile.plan import Plan
from snapshot_operator.reconcile.stalls import snapshotted_since_start, watch_for_stall
from snapshot_operator.reconcile.starting import retry_start, start_or_wait
from snapshot_operator.reconcile.upgrade_check import upgrade_checked
from snapshotjob_contract import (
    ActionAfter,
    ConditionReason,
    ExportRequestStatus,
    Phase,
    ProcessingGuarantee,
    SnapshotJobSpec,
    StartFailureStatus,
    TerminationMode,
    UpgradeMode,
)

_UPGRADE_MODES: Mapping[UpgradeMode, TerminationMode] = MappingProxyType(
    {
        UpgradeMode.SNAPSHOT: TerminationMode.RESTART_GRACEFUL,
        UpgradeMode.LAST_SNAPSHOT: TerminationMode.RESTART_FORCEFUL,
        UpgradeMode.STATELESS: TerminationMode.RESTART_FORCEFUL,
    }
)
"""How each upgradeMode stops the running execution to roll out a new spec."""


def supervise(plan: Plan, spec: SnapshotJobSpec) -> None:
    """A live phase: follow the current driver Pod and serve spec changes through it."""
    status = plan.status
    if status.phase is Phase.RUNNING and not status.pipeline_runs():
        # A status an operator without status.pipelineStarted wrote: nothing says the
        # pipeline of the current execution runs, and RUNNING is said only when something does.
        plan.update(phase=Phase.STARTING)
    execution = status.execution
    current_id = execution.id if execution is not None else None
    pod = None
    for candidate in plan.obs.pods:
        if candidate.execution_id == current_id and pod is None:
            pod = candidate
        elif candidate.may_run:
            plan.delete_pod(candidate)
            if not candidate.deleting:
                plan.event(
                    EventReason.STALE_DRIVER_DELETED,
                    f"Deleted a driver Pod of an older execution pod={candidate.name} "
                    f"executionId={candidate.execution_id}",
                )
    failure = status.start_failure
    if (
        status.phase is Phase.STARTING
        and execution is not None
        and pod is None
        and failure is not None
        and failure.execution_id == execution.id
    ):
        # Its Pod was never created: create it again, not a new execution.
        _start_failed(plan, spec, failure)
        return
    if execution is None or pod is None:
        if status.phase is Phase.STARTING:
            plan.event(
                EventReason.DRIVER_POD_MISSING,
                f"Driver Pod of the starting execution is missing, starting a new execution "
                f"executionId={current_id}",
            )
            start_or_wait(plan, spec)
        elif (exit_report := status.reported_exit()) is not None and execution is not None:
            # Deleted as soon as it stopped (an eviction, a deleted Pod): its own report says
            # how it ended, so an interrupted driver is not taken for a lost one.
            execution_ended(
                plan,
                spec,
                DriverPod(
                    name=execution.driver_pod,
                    execution_id=execution.id,
                    phase=PodPhase.SUCCEEDED if exit_report.exit_code == 0 else PodPhase.FAILED,
                    exit_code=exit_report.exit_code,
                    termination_message=exit_report.message,
                ),
            )
        else:
            failed(
                plan,
                spec,
                ConditionReason.DRIVER_POD_LOST,
                f"Driver Pod disappeared executionId={current_id}",
            )
        return
    if failure is not None:
        # The Pod exists: whatever refused it before has let it through.
        plan.update(start_failure=None)
    if pod.phase.is_terminal:
        execution_ended(plan, spec, _reported_if_killed(plan, pod))
        return
    if pod.name in plan.lost_drivers:
        # Deleted at once (lost_nodes): the next decision finds it gone.
        return
    if pod.deleting:
        # Stopping forcefully: wait until its containers have stopped.
        plan.requeue(plan.settings.store_retry_seconds)
        return
    if status.termination is not None:
        plan.update(phase=Phase.COMPLETING)
        _watch_termination(plan, spec, pod)
        return
    runs = status.pipeline_runs()
    if not runs and watch_pipeline_start(plan, spec, pod):
        return
    # RUNNING only once the driver reported its pipeline running, not when its Pod runs.
    plan.update(phase=Phase.RUNNING if runs and pod.phase is PodPhase.RUNNING else Phase.STARTING)
    announce_pipeline(plan)
    reported = status.pipeline_started
    if runs and reported is not None:
        # The pipeline's run, from the driver's report: not a long wait for executors, which
        # would reset the restarts that bound it.
        ran_for = (plan.now - max(reported.time, execution.started_at)).total_seconds()
    else:
        ran_for = 0.0
    if ran_for >= spec.restart_policy.max_backoff_seconds and (
        spec.processing_guarantee is ProcessingGuarantee.NONE or snapshotted_since_start(plan)
    ):
        # A long run with a snapshot of its own is progress, as is one of a job that takes
        # none; a stalled run is not (it runs until its stall bound).
        if status.restarts:
            plan.update(restarts=0)
        if status.forced_restarts is not None:
            plan.update(forced_restarts=None)
    if runs and watch_for_stall(plan, spec, pod):
        return
    _watch_export_request(plan)
    _serve_spec_change(plan, spec, pod)


def _reported_if_killed(plan: Plan, pod: DriverPod) -> DriverPod:
    """The ended driver as its own exit report tells it, if the kubelet killed it after that.

    A driver whose stop signal finds it in a step that cannot end (an epoch waiting for
    executors evicted with it) reports how it ends before the grace period runs out, and is
    then killed (137). Seen between the kill and the Pod's deletion, the Pod's code is the
    kubelet's, not the driver's: the report says what the execution needs (a restart at once
    from the last snapshot), as it does once the Pod is gone.
    """
    report = plan.status.reported_exit()
    if pod.exit_code != KILLED_EXIT_CODE or report is None:
        return pod
    return replace(
        pod,
        exit_code=report.exit_code,
        termination_message=report.message or pod.termination_message,
    )


def _start_failed(plan: Plan, spec: SnapshotJobSpec, failure: StartFailureStatus) -> None:
    """The API server did not create the starting execution's objects (Degraded says so).

    The execution keeps its id: no driver ever ran with it, and a new id per attempt would be a
    status write per attempt. It is created again after the restart backoff, up to
    ``start_attempts`` times; a spec change starts a new execution with the new spec, and
    ``suspend`` suspends the job, as nothing runs.
    """
    execution = plan.status.execution
    assert execution is not None
    if spec.suspend:
        plan.update(start_failure=None)
        suspended(
            plan,
            f"Suspended before the driver could be created executionId={execution.id} "
            f"object={failure.object}",
        )
    elif execution.spec_hash != spec.execution_fingerprint():
        start_or_wait(plan, spec)
    else:
        retry_start(plan, spec, failure)


def _serve_spec_change(plan: Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
    """Turns the first pending spec change into a request to the live execution."""
    execution = plan.status.execution
    assert execution is not None
    export_name = export_to_take(plan, spec)
    if spec.suspend:
        _terminate(plan, spec, pod, TerminationMode.SUSPEND_GRACEFUL, "SuspendRequested")
    elif export_name is not None and spec.export_snapshot and spec.export_snapshot.cancel_job:
        _terminate(
            plan,
            spec,
            pod,
            TerminationMode.CANCEL_GRACEFUL,
            "ExportAndCancelRequested",
            export_name=export_name,
        )
    elif execution.spec_hash != spec.execution_fingerprint():
        if not upgrade_checked(plan, spec):
            # Checking, or refused: the running execution keeps running.
            return
        mode = _UPGRADE_MODES[spec.upgrade_mode]
        plan.event(
            EventReason.UPGRADING,
            f"Spec changed, rolling it out upgradeMode={spec.upgrade_mode.value} mode={mode.value} "
            f"executionId={execution.id}",
        )
        _terminate(plan, spec, pod, mode, "SpecChanged")
    elif (
        export_name is not None
        and plan.status.export_request is None
        and pod.phase is PodPhase.RUNNING
    ):
        plan.request_export(
            ExportRequestStatus(
                name=export_name,
                request_id=f"{execution.id}/export/{export_name}/{int(plan.now.timestamp())}",
                requested_at=plan.now,
            )
        )
        plan.event(
            EventReason.EXPORT_REQUESTED,
            f"Asked the driver for an export-only snapshot name={export_name} "
            f"executionId={execution.id}",
        )


def _terminate(
    plan: Plan,
    spec: SnapshotJobSpec,
    pod: DriverPod,
    mode: TerminationMode,
    reason: str,
    export_name: str | None = None,
) -> None:
    """Stops the live execution: asks the driver (graceful) or deletes its Pod (forceful)."""
    execution = plan.status.execution
    assert execution is not None
    if mode.terminal_snapshot and spec.processing_guarantee is ProcessingGuarantee.NONE:
        # Nothing to snapshot: the graceful mode is the forceful one.
        mode = mode.without_terminal_snapshot()
    if not mode.terminal_snapshot:
        _stop_forcefully(plan, spec, pod, mode, reason)
        return
    plan.ask_to_stop(mode, reason, export_name)
    plan.event(
        EventReason.TERMINATION_REQUESTED,
        f"Asked the driver to stop mode={mode.name} reason={reason} executionId={execution.id}"
        + (f" exportName={export_name}" if export_name else ""),
    )
    plan.requeue(plan.settings.graceful_timeout_seconds)


def _watch_termination(plan: Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
    """Escalates a graceful request the driver has not served in time."""
    termination = plan.status.termination
    assert termination is not None
    mode = termination.mode
    deadline = termination.requested_at + timedelta(seconds=plan.settings.graceful_timeout_seconds)
    if not mode.terminal_snapshot or plan.now >= deadline:
        forceful = mode.without_terminal_snapshot()
        if mode.terminal_snapshot:
            plan.event(
                EventReason.TERMINATION_ESCALATED,
                f"Driver did not stop within timeoutSeconds="
                f"{plan.settings.graceful_timeout_seconds}, stopping it without a snapshot "
                f"requestedMode={mode.name} mode={forceful.name} podName={pod.name}",
            )
        _stop_forcefully(plan, spec, pod, forceful, termination.reason)
        return
    plan.requeue((deadline - plan.now).total_seconds())


def _watch_export_request(plan: Plan) -> None:
    """Clears an export-only request once the export exists, or when it timed out."""
    request = plan.status.export_request
    if request is None:
        return
    exported = plan.status.exported(request.name)
    deadline = request.requested_at + timedelta(seconds=plan.settings.graceful_timeout_seconds)
    if exported is not None:
        plan.update(export_request=None)
        plan.event(
            EventReason.SNAPSHOT_EXPORTED,
            f"Exported snapshot name={exported.name} snapshotId={exported.snapshot_id} "
            f"numBytes={exported.num_bytes} terminal={str(exported.terminal).lower()}",
        )
    elif plan.now >= deadline:
        plan.update(export_request=None)
        plan.event(
            EventReason.EXPORT_TIMED_OUT,
            f"Driver did not export within timeoutSeconds={plan.settings.graceful_timeout_seconds}"
            f", asking again name={request.name}",
        )
    else:
        plan.requeue((deadline - plan.now).total_seconds())


def _stop_forcefully(
    plan: Plan, spec: SnapshotJobSpec, pod: DriverPod, mode: TerminationMode, reason: str
) -> None:
    """Deletes the live execution's Pod and moves to what the mode does after stopping."""
    execution = plan.status.execution
    assert execution is not None
    plan.delete_pod(pod)
    plan.update(termination=None, export_request=None)
    if mode.action_after is ActionAfter.RESTART:
        # The Pod is still stopping: the new execution starts once it has.
        plan.update(phase=Phase.RESTARTING)
        plan.requeue(plan.settings.store_retry_seconds)
    elif mode.action_after is ActionAfter.SUSPEND:
        suspended(
            plan,
            f"Suspended without a snapshot mode={mode.name} reason={reason} "
            f"executionId={execution.id}",
        )
    else:
        cancelled(plan, f"Cancelled without a snapshot mode={mode.name} reason={reason}")
