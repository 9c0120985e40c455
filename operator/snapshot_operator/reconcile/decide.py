"""The operator's decision function: observe -> validate -> reconcile, with no I/O.

One call looks at one :class:`Observation` (the SnapshotJob, its driver Pods, the store's
health, the clock) and returns the actions that move the job one step towards its spec, as
data (:mod:`snapshot_operator.reconcile.actions`). It is level-based, as the Flink operator's
reconcilers: it keeps no memory between calls, everything it needs is in the status, so a
restarted operator (or a retried, half-applied action list) decides the same thing again.

The rules, and why:

* Never two drivers. A driver Pod is created only when no Pod of the job may still run; a
  Pod being deleted keeps running until its containers stop, so the decision waits for that.
  Every execution gets a new id (the fencing token), written to the status before its Pod is
  created, so a driver of an older execution can no longer move the execution record.
* Restore points come from the execution record only, which never points at an export-only
  snapshot (seed, invariant 2). ``initialSnapshotName`` is used only while the job has no
  snapshot of its own: an explicit user choice, never an automatic one.
* Graceful termination modes are requests to the driver (``status.termination``); forceful
  modes need no driver, the operator deletes the Pod. A graceful request not served within a
  deadline is escalated to the forceful mode of the same action, with an Event.
* A driver that exits with :attr:`DriverExit.RESTART_FORCEFUL` (an indeterminate record write,
  seed taking step 7a) restarts at once: not counted as a failure, and any pending graceful
  request is dropped, because the state may hold prepared transactions that only a restore
  resolves (seed, Assumptions). Until the new execution starts the status keeps a
  RESTART_FORCEFUL termination, so not even ``suspend`` skips that restore.
* A driver that exits with :attr:`DriverExit.INTERRUPTED` (SIGTERM: a node drain, an
  eviction, a deleted Pod) restarts at once from the last snapshot, in the same way: nothing
  is wrong with the job, so it is neither a failure nor subject to backoff.
* A driver that exits with :attr:`DriverExit.FENCED` saw a newer execution in the status
  than the one observed here. It is never a failure and never starts anything by itself (that
  could make two drivers); a fenced Pod of an older execution is simply ignored, a fenced
  current driver is reported (Degraded ``DriverFenced``) until the status moves on.
* Failures restart with exponential backoff up to ``maxRestarts``, then FAILED. With
  ``suspendOnFailure`` the job is suspended without a snapshot (SUSPEND_FORCEFUL) and held so
  until its spec changes; a FAILED or COMPLETED job also starts again only on a spec change.
  Exits that no restart can help (a corrupted restore point, a pipeline that cannot be run)
  fail the job at once.
* No execution starts while the store is not cluster-safe, has no more members than the job's
  backup count, or (split-brain protection) has fewer members than the record's quorum.
* Spec changes: ``suspend`` -> SUSPEND_GRACEFUL; a new ``exportSnapshot.name`` -> export-only
  snapshot, or CANCEL_GRACEFUL with a terminal exported snapshot (``cancelJob``), or a
  validated copy while suspended; any change of the execution fingerprint -> ``upgradeMode``.
  Only one request is pending at a time; others wait for it.
* A validated copy to an export that fails is retried with backoff a few times, then given
  up (back to SUSPENDED, Degraded ``ExportFailed``) until the export name changes; the
  executor records each failure in ``status.exportFailure`` so that this stays level-based.
* A spec the operator cannot apply (invalid, an export that would overwrite the job's own
  restore point, or a ``statePartitions`` other than the one the job's snapshot was taken
  with, unless the upgrade is stateless) is reported as the Degraded condition with an Event;
  the running execution is left alone.
* Condition messages hold nothing that changes with the clock alone, so a settled job's
  resyncs patch nothing.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import Any, NamedTuple

from snapshot_operator.api import (
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    DriverExit,
    ExecutionRecordStatus,
    ExecutionStatus,
    ExportFailureStatus,
    ExportRequestStatus,
    FailureStatus,
    Phase,
    ProcessingGuarantee,
    SnapshotJobSpec,
    SnapshotJobStatus,
    TerminationModeName,
    TerminationStatus,
    UpgradeMode,
)
from snapshot_operator.reconcile.actions import (
    Action,
    CopySnapshotToExport,
    CreateDriverPod,
    DeleteDriverPod,
    DeleteSnapshotMaps,
    EmitEvent,
    EventReason,
    PatchStatus,
    RemoveFinalizer,
    RequestExport,
    RequestTermination,
    Requeue,
)
from snapshot_operator.reconcile.observation import (
    DriverPod,
    InvalidSpec,
    Observation,
    PodPhase,
    Settings,
    StoreHealth,
)
from spark_runtime.protocol import (
    NO_SNAPSHOT,
    ActionAfter,
    ExecutionRecord,
    TerminationMode,
    export_map_name,
    snapshot_map_name,
)

LIVE_PHASES = frozenset({Phase.STARTING, Phase.RUNNING, Phase.COMPLETING})
"""Phases in which an execution exists and its driver Pod is supervised."""

_AFTER_EXECUTION_ENDED = frozenset(
    {
        Phase.STARTING,
        Phase.RUNNING,
        Phase.COMPLETING,
        Phase.RESTARTING,
        Phase.SUSPENDED,
        Phase.FAILED,
        Phase.COMPLETED,
    }
)

TRANSITIONS: Mapping[Phase, frozenset[Phase]] = MappingProxyType(
    {
        Phase.NOT_RUNNING: frozenset({Phase.STARTING, Phase.SUSPENDED}),
        Phase.STARTING: _AFTER_EXECUTION_ENDED,
        Phase.RUNNING: _AFTER_EXECUTION_ENDED,
        Phase.COMPLETING: _AFTER_EXECUTION_ENDED,
        Phase.RESTARTING: frozenset({Phase.STARTING, Phase.SUSPENDED}),
        Phase.SUSPENDED: frozenset(
            {Phase.STARTING, Phase.RESTARTING, Phase.SUSPENDED_EXPORTING_SNAPSHOT}
        ),
        Phase.SUSPENDED_EXPORTING_SNAPSHOT: frozenset({Phase.SUSPENDED, Phase.FAILED}),
        Phase.FAILED: frozenset({Phase.STARTING, Phase.RESTARTING, Phase.SUSPENDED}),
        Phase.COMPLETED: frozenset({Phase.STARTING, Phase.RESTARTING, Phase.SUSPENDED}),
    }
)
"""The phase changes one decision may make (staying in a phase is always allowed)."""

CANCELLED = ConditionReason.CANCELLED
"""``lastFailure.reason`` of a cancelled job: Jet reports a cancelled job as failed."""

SUSPENDED_ON_FAILURE = "SuspendedOnFailure"
"""``termination.reason`` that holds a job suspended by suspendOnFailure (and, as
:attr:`ConditionReason.SUSPENDED_ON_FAILURE`, the reason its conditions give)."""

JOB_WIDE = "job"
"""Stands for the execution id in request ids made while the job has no execution."""

INDETERMINATE_RECORD_WRITE = "IndeterminateRecordWrite"
"""``termination.reason`` of a forced restart after :attr:`DriverExit.RESTART_FORCEFUL`."""

DRIVER_INTERRUPTED = "DriverInterrupted"
"""``termination.reason`` of a forced restart after :attr:`DriverExit.INTERRUPTED`."""

_UPGRADE_MODES: Mapping[UpgradeMode, TerminationModeName] = MappingProxyType(
    {
        UpgradeMode.SNAPSHOT: TerminationModeName.RESTART_GRACEFUL,
        UpgradeMode.LAST_SNAPSHOT: TerminationModeName.RESTART_FORCEFUL,
        UpgradeMode.STATELESS: TerminationModeName.RESTART_FORCEFUL,
    }
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

_MAX_POD_NAME = 63


def driver_pod_name(job_name: str, attempt: int) -> str:
    """Returns the driver Pod's name of an execution; at most 63 characters, a DNS label.

    Spark names the driver's Service after the Pod, and Service names are DNS labels.
    """
    suffix = f"-driver-{attempt}"
    if len(job_name) + len(suffix) <= _MAX_POD_NAME:
        return job_name + suffix
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    keep = _MAX_POD_NAME - len(suffix) - len(digest) - 1
    return f"{job_name[:keep].rstrip('-')}-{digest}{suffix}"


def execution_id(job_uid: str, attempt: int, started_at: datetime) -> str:
    """Returns the fencing token of an execution (at most 63 characters, a label value).

    The job's uid and the attempt make it unique while the status keeps its attempt count;
    the start time keeps it unique even if the status was lost and attempts count from 1 again,
    so a driver of a forgotten execution can never pass for the current one.
    """
    millis = int(started_at.timestamp() * 1000)
    return f"{job_uid}-{attempt}-{millis:x}"


def decide(observation: Observation, settings: Settings | None = None) -> tuple[Action, ...]:
    """Returns the actions that move the observed job one step towards its spec.

    Args:
        observation: The job, its driver Pods, the store's health and the time.
        settings: Operator-wide timings; the defaults if omitted.

    Returns:
        The actions in the order they must be performed. The status patch, if any, comes
        first; a ``Requeue`` comes last.
    """
    plan = _Plan(observation, settings or Settings())
    if observation.deleting:
        return _delete(plan)
    spec = observation.spec
    if isinstance(spec, InvalidSpec):
        plan.invalid_spec = spec.message
        plan.requeue(plan.settings.resync_seconds)
        return plan.actions(None)
    partitions = _state_partitions_problem(spec, plan.status)
    if partitions is not None:
        # As an invalid spec: restoring the job's snapshot with it would fail.
        plan.invalid_spec = partitions
        plan.requeue(plan.settings.resync_seconds)
        return plan.actions(None)
    plan.store_problem = _store_problem(spec, plan.status, observation.store)
    plan.export_problem = _export_problem(spec, plan.status)
    if plan.status.phase in LIVE_PHASES:
        _supervise(plan, spec)
    else:
        _between_executions(plan, spec)
    return plan.actions(spec)


class _Problem(NamedTuple):
    reason: ConditionReason
    message: str


class _Plan:
    """The status and actions one decision builds up (a private, short-lived builder)."""

    def __init__(self, observation: Observation, settings: Settings) -> None:
        self.obs = observation
        self.settings = settings
        self.now = observation.now
        self.status = observation.status
        self.changed: set[str] = set()
        self.requests: list[RequestTermination | RequestExport] = []
        self.effects: list[Action] = []
        self.events: list[EmitEvent] = []
        self.requeue_after: float | None = None
        self.invalid_spec: str | None = None
        self.store_problem: _Problem | None = None
        self.export_problem: _Problem | None = None
        self.fenced: str | None = None

    def update(self, **fields: Any) -> None:
        self.status = self.status.model_copy(update=fields)
        self.changed.update(fields)

    def event(self, reason: EventReason, message: str) -> None:
        self.events.append(EmitEvent(reason, message))

    def requeue(self, seconds: float) -> None:
        seconds = max(seconds, 1.0)
        self.requeue_after = (
            seconds if self.requeue_after is None else min(self.requeue_after, seconds)
        )

    def delete_pod(self, pod: DriverPod) -> None:
        if not pod.deleting and DeleteDriverPod(pod.name) not in self.effects:
            self.effects.append(DeleteDriverPod(pod.name))

    def request_termination(self, termination: TerminationStatus) -> None:
        # The request is its own status write, so it is not repeated in the patch.
        self.status = self.status.model_copy(update={"termination": termination})
        self.changed.discard("termination")
        self.requests.append(
            RequestTermination(
                termination.mode,
                termination.request_id,
                termination.export_name,
                termination.reason,
            )
        )

    def request_export(self, request: ExportRequestStatus) -> None:
        self.status = self.status.model_copy(update={"export_request": request})
        self.changed.discard("export_request")
        self.requests.append(RequestExport(request.name, request.request_id))

    def pods_that_may_run(self) -> list[DriverPod]:
        return [pod for pod in self.obs.pods if pod.may_run]

    def actions(self, spec: SnapshotJobSpec | None) -> tuple[Action, ...]:
        self._update_last_snapshot_time()
        self.update(observed_generation=self.obs.generation)
        self.update(conditions=self._conditions(spec))
        old = self.obs.status.model_dump(mode="json", exclude_none=True)
        new = self.status.model_dump(mode="json", exclude_none=True)
        aliases = {SnapshotJobStatus.model_fields[name].alias or name for name in self.changed}
        patch = {key: new.get(key) for key in sorted(aliases) if old.get(key) != new.get(key)}
        actions: list[Action] = [PatchStatus(patch)] if patch else []
        actions += self.requests
        actions += self.effects
        actions += self.events
        resync = self.settings.resync_seconds
        due = resync if self.requeue_after is None else min(self.requeue_after, resync)
        actions.append(Requeue(due))
        return tuple(actions)

    def _update_last_snapshot_time(self) -> None:
        record = self.status.record()
        stats = record.snapshot_stats
        if record.snapshot_id == NO_SNAPSHOT:
            taken = None
        elif stats is not None and stats.snapshot_id == record.snapshot_id:
            taken = datetime.fromtimestamp(stats.end_time / 1000, tz=self.now.tzinfo)
        else:
            taken = self.status.last_snapshot_time
        if taken != self.status.last_snapshot_time:
            self.update(last_snapshot_time=taken)

    def _conditions(self, spec: SnapshotJobSpec | None) -> list[Condition]:
        computed = {
            ConditionType.READY: self._ready(spec),
            ConditionType.PROGRESSING: self._progressing(),
            ConditionType.DEGRADED: self._degraded(spec),
            ConditionType.SNAPSHOT_HEALTHY: self._snapshot_healthy(spec),
            ConditionType.STORE_READY: self._store_ready(),
        }
        conditions = []
        for condition_type, (status, reason, message) in computed.items():
            old = self.obs.status.condition(condition_type)
            if old is None or old.reason != reason:
                self._event_on_problem(condition_type, reason, message)
            since = old.last_transition_time if old and old.status is status else self.now
            conditions.append(
                Condition(
                    type=condition_type,
                    status=status,
                    reason=reason,
                    message=message,
                    last_transition_time=since,
                    observed_generation=self.obs.generation,
                )
            )
        return conditions

    def _event_on_problem(self, condition_type: ConditionType, reason: str, message: str) -> None:
        if condition_type is ConditionType.DEGRADED and reason == ConditionReason.INVALID_SPEC:
            self.event(EventReason.INVALID_SPEC, message)
        elif condition_type is ConditionType.DEGRADED and reason == ConditionReason.EXPORT_REJECTED:
            self.event(EventReason.EXPORT_REJECTED, message)
        elif condition_type is ConditionType.DEGRADED and reason == ConditionReason.DRIVER_FENCED:
            self.event(EventReason.DRIVER_FENCED, message)
        elif condition_type is ConditionType.STORE_READY and reason != ConditionReason.CLUSTER_SAFE:
            self.event(EventReason.STORE_NOT_READY, message)

    def _ready(self, spec: SnapshotJobSpec | None) -> tuple[ConditionStatus, str, str]:
        phase = self.status.phase
        execution = self.status.execution
        if spec is None:
            return (
                ConditionStatus.FALSE,
                ConditionReason.INVALID_SPEC,
                "Spec is invalid, see Degraded",
            )
        if (
            phase is Phase.RUNNING
            and self.status.termination is None
            and execution is not None
            and execution.spec_hash == spec.execution_fingerprint()
        ):
            return (
                ConditionStatus.TRUE,
                ConditionReason.RUNNING,
                f"Job runs executionId={execution.id}",
            )
        failure = self.status.last_failure
        if _suspended_on_failure(self.status) and failure is not None:
            return ConditionStatus.FALSE, ConditionReason.SUSPENDED_ON_FAILURE, failure.message
        if phase is Phase.SUSPENDED and spec.suspend:
            return ConditionStatus.TRUE, ConditionReason.SUSPENDED, "Job is suspended as requested"
        if phase is Phase.COMPLETED:
            return ConditionStatus.TRUE, ConditionReason.COMPLETED, "Pipeline finished"
        if phase is Phase.FAILED and failure is not None:
            return ConditionStatus.FALSE, failure.reason, failure.message
        return ConditionStatus.FALSE, _PHASE_REASONS[phase], f"Job is {phase.value}"

    def _progressing(self) -> tuple[ConditionStatus, str, str]:
        phase = self.status.phase
        if phase in (Phase.STARTING, Phase.COMPLETING, Phase.RESTARTING, Phase.NOT_RUNNING):
            return ConditionStatus.TRUE, _PHASE_REASONS[phase], f"Job is {phase.value}"
        if phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT:
            return (
                ConditionStatus.TRUE,
                ConditionReason.EXPORTING_SNAPSHOT,
                "Copying the restore point",
            )
        request = self.status.export_request
        if request is not None:
            return (
                ConditionStatus.TRUE,
                ConditionReason.EXPORT_IN_PROGRESS,
                f"Exporting name={request.name}",
            )
        return ConditionStatus.FALSE, ConditionReason.SETTLED, f"Job is {phase.value}"

    def _degraded(self, spec: SnapshotJobSpec | None) -> tuple[ConditionStatus, str, str]:
        if self.invalid_spec is not None:
            return (
                ConditionStatus.TRUE,
                ConditionReason.INVALID_SPEC,
                f"Spec is invalid: {self.invalid_spec}",
            )
        if self.fenced is not None:
            return ConditionStatus.TRUE, ConditionReason.DRIVER_FENCED, self.fenced
        if self.export_problem is not None:
            return ConditionStatus.TRUE, self.export_problem.reason, self.export_problem.message
        export_failed = _export_failure_message(spec, self.status, self.settings)
        if export_failed is not None:
            return ConditionStatus.TRUE, ConditionReason.EXPORT_FAILED, export_failed
        failure = self.status.last_failure
        phase = self.status.phase
        if phase is Phase.FAILED and failure is not None and failure.reason != CANCELLED:
            return ConditionStatus.TRUE, failure.reason, failure.message
        if _suspended_on_failure(self.status) and failure is not None:
            return ConditionStatus.TRUE, ConditionReason.SUSPENDED_ON_FAILURE, failure.message
        if phase is Phase.RESTARTING and self.status.restarts > 0 and failure is not None:
            return ConditionStatus.TRUE, ConditionReason.RESTARTING_AFTER_FAILURE, failure.message
        return ConditionStatus.FALSE, ConditionReason.AS_EXPECTED, "No failure to report"

    def _snapshot_healthy(self, spec: SnapshotJobSpec | None) -> tuple[ConditionStatus, str, str]:
        if spec is not None and spec.processing_guarantee is ProcessingGuarantee.NONE:
            return (
                ConditionStatus.UNKNOWN,
                ConditionReason.SNAPSHOTS_DISABLED,
                "processingGuarantee is NONE",
            )
        record = self.status.record()
        if record.last_snapshot_failure is not None:
            return (
                ConditionStatus.FALSE,
                ConditionReason.SNAPSHOT_FAILED,
                f"Last snapshot failed snapshotId={record.ongoing_snapshot_id}: "
                f"{record.last_snapshot_failure}",
            )
        taken = self.status.last_snapshot_time
        if taken is None:
            return (
                ConditionStatus.UNKNOWN,
                ConditionReason.NO_SNAPSHOT_YET,
                "The job has no snapshot yet",
            )
        # No age in the messages: they must not change between snapshots, or every reconcile
        # would patch the status (the age is the lastSnapshotTime printer column).
        taken_at = _rfc3339(taken)
        age = (self.now - taken).total_seconds()
        if spec is not None and self.status.phase is Phase.RUNNING:
            bound = (
                spec.snapshot_interval_seconds * self.settings.stale_snapshot_intervals
                + self.settings.stale_snapshot_slack_seconds
            )
            if age > bound:
                return (
                    ConditionStatus.FALSE,
                    ConditionReason.SNAPSHOT_STALE,
                    f"Restore point is older than boundSeconds={bound} "
                    f"snapshotId={record.snapshot_id} takenAt={taken_at}",
                )
        return (
            ConditionStatus.TRUE,
            ConditionReason.SNAPSHOT_RECENT,
            f"Restore point snapshotId={record.snapshot_id} takenAt={taken_at}",
        )

    def _store_ready(self) -> tuple[ConditionStatus, str, str]:
        store = self.obs.store
        if store is None:
            return (
                ConditionStatus.UNKNOWN,
                ConditionReason.STORE_UNREACHABLE,
                "Store health could not be read",
            )
        if self.store_problem is not None:
            return ConditionStatus.FALSE, self.store_problem.reason, self.store_problem.message
        members = store.member_count
        return (
            ConditionStatus.TRUE,
            ConditionReason.CLUSTER_SAFE,
            f"Store is cluster-safe members={members}",
        )


def _store_problem(
    spec: SnapshotJobSpec, status: SnapshotJobStatus, store: StoreHealth | None
) -> _Problem | None:
    """Returns why no execution may start now, or None if the store allows it."""
    if store is None:
        return _Problem(ConditionReason.STORE_UNREACHABLE, "Store health could not be read")
    if not store.cluster_safe:
        return _Problem(
            ConditionReason.NOT_CLUSTER_SAFE,
            f"Store is not cluster-safe members={store.member_count}",
        )
    backups = spec.hazelcast.backup_count
    if store.member_count <= backups:
        return _Problem(
            ConditionReason.TOO_FEW_MEMBERS,
            f"Store cannot hold the job's backups members={store.member_count} "
            f"backupCount={backups}",
        )
    quorum = status.record().quorum_size
    if spec.split_brain_protection and store.member_count < quorum:
        return _Problem(
            ConditionReason.BELOW_QUORUM,
            f"Store has fewer members than the quorum members={store.member_count} "
            f"quorumSize={quorum}",
        )
    return None


def _new_export_name(spec: SnapshotJobSpec, status: SnapshotJobStatus) -> str | None:
    """Returns the export the spec asks for and the job has not made yet, if any."""
    export = spec.export_snapshot
    if export is None or export.name is None or status.exported(export.name) is not None:
        return None
    return export.name


def _export_problem(spec: SnapshotJobSpec, status: SnapshotJobStatus) -> _Problem | None:
    """Returns why the requested export must not be taken (only the operator can tell)."""
    name = _new_export_name(spec, status)
    if name is None:
        return None
    record = status.record()
    if spec.processing_guarantee is ProcessingGuarantee.NONE:
        message = f"Export cannot be taken name={name}: processingGuarantee NONE takes no snapshots"
    elif name == record.exported_snapshot_name:
        message = (
            f"Export would overwrite the job's restore point name={name} "
            f"snapshotId={record.snapshot_id}, choose another name"
        )
    elif record.snapshot_id == NO_SNAPSHOT and name == spec.initial_snapshot_name:
        message = (
            f"Export would overwrite the snapshot the job starts from name={name}, "
            "choose another name"
        )
    else:
        return None
    return _Problem(ConditionReason.EXPORT_REJECTED, message)


def _export_to_take(plan: _Plan, spec: SnapshotJobSpec) -> str | None:
    return None if plan.export_problem else _new_export_name(spec, plan.status)


def _supervise(plan: _Plan, spec: SnapshotJobSpec) -> None:
    """A live phase: follow the current driver Pod and serve spec changes through it."""
    status = plan.status
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
    if execution is None or pod is None:
        if status.phase is Phase.STARTING:
            plan.event(
                EventReason.DRIVER_POD_MISSING,
                f"Driver Pod of the starting execution is missing, starting a new execution "
                f"executionId={current_id}",
            )
            _start_or_wait(plan, spec, forced=False)
        else:
            _failed(
                plan,
                spec,
                ConditionReason.DRIVER_POD_LOST,
                f"Driver Pod disappeared executionId={current_id}",
            )
        return
    if pod.phase.is_terminal:
        _execution_ended(plan, spec, pod)
        return
    if pod.deleting:
        # Stopping forcefully: wait until its containers have stopped.
        plan.requeue(plan.settings.store_retry_seconds)
        return
    if status.termination is not None:
        plan.update(phase=Phase.COMPLETING)
        _watch_termination(plan, spec, pod)
        return
    plan.update(phase=Phase.RUNNING if pod.phase is PodPhase.RUNNING else Phase.STARTING)
    ran_for = (plan.now - execution.started_at).total_seconds()
    if status.restarts and ran_for >= spec.restart_policy.max_backoff_seconds:
        plan.update(restarts=0)
    _watch_export_request(plan)
    _serve_spec_change(plan, spec, pod)


def _serve_spec_change(plan: _Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
    """Turns the first pending spec change into a request to the live execution."""
    execution = plan.status.execution
    assert execution is not None
    export_name = _export_to_take(plan, spec)
    if spec.suspend:
        _terminate(plan, spec, pod, TerminationModeName.SUSPEND_GRACEFUL, "SuspendRequested")
    elif export_name is not None and spec.export_snapshot and spec.export_snapshot.cancel_job:
        _terminate(
            plan,
            spec,
            pod,
            TerminationModeName.CANCEL_GRACEFUL,
            "ExportAndCancelRequested",
            export_name=export_name,
        )
    elif execution.spec_hash != spec.execution_fingerprint():
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
    plan: _Plan,
    spec: SnapshotJobSpec,
    pod: DriverPod,
    mode_name: TerminationModeName,
    reason: str,
    export_name: str | None = None,
) -> None:
    """Stops the live execution: asks the driver (graceful) or deletes its Pod (forceful)."""
    execution = plan.status.execution
    assert execution is not None
    mode = mode_name.mode
    if mode.terminal_snapshot and spec.processing_guarantee is ProcessingGuarantee.NONE:
        # Nothing to snapshot: the graceful mode is the forceful one.
        mode = mode.without_terminal_snapshot()
    if not mode.terminal_snapshot:
        _stop_forcefully(plan, spec, pod, mode, reason)
        return
    plan.update(phase=Phase.COMPLETING)
    plan.request_termination(
        TerminationStatus(
            mode=TerminationModeName(mode.name),
            request_id=f"{execution.id}/{mode.name}",
            requested_at=plan.now,
            export_name=export_name,
            reason=reason,
        )
    )
    plan.event(
        EventReason.TERMINATION_REQUESTED,
        f"Asked the driver to stop mode={mode.name} reason={reason} executionId={execution.id}"
        + (f" exportName={export_name}" if export_name else ""),
    )
    plan.requeue(plan.settings.graceful_timeout_seconds)


def _watch_termination(plan: _Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
    """Escalates a graceful request the driver has not served in time."""
    termination = plan.status.termination
    assert termination is not None
    mode = termination.mode.mode
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


def _watch_export_request(plan: _Plan) -> None:
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
    plan: _Plan, spec: SnapshotJobSpec, pod: DriverPod, mode: TerminationMode, reason: str
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
        plan.update(phase=Phase.SUSPENDED)
        plan.event(
            EventReason.SUSPENDED,
            f"Suspended without a snapshot mode={mode.name} reason={reason} "
            f"executionId={execution.id}",
        )
    else:
        _cancelled(plan, f"Cancelled without a snapshot mode={mode.name} reason={reason}")


def _cancelled(plan: _Plan, message: str) -> None:
    plan.update(
        phase=Phase.FAILED,
        termination=None,
        export_request=None,
        last_failure=FailureStatus(reason=CANCELLED, message=message, time=plan.now),
    )
    plan.event(EventReason.CANCELLED, message)


def _execution_ended(plan: _Plan, spec: SnapshotJobSpec, pod: DriverPod) -> None:
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
        _start_or_wait(plan, spec, forced=INDETERMINATE_RECORD_WRITE)
    elif meaning is DriverExit.INTERRUPTED:
        # SIGTERM from outside (drain, eviction, a deleted Pod): nothing wrong with the job.
        dropped = f" droppedRequest={termination.mode.value}" if termination else ""
        plan.event(
            EventReason.DRIVER_INTERRUPTED,
            f"Driver was interrupted (SIGTERM), restarting at once from the last snapshot "
            f"exitCode={code} {context}{dropped}",
        )
        plan.update(termination=None, export_request=None)
        _start_or_wait(plan, spec, forced=DRIVER_INTERRUPTED)
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
        _failed(
            plan, spec, ConditionReason.DRIVER_FAILED, f"Driver exited exitCode={code} {context}"
        )


def _terminated_as_requested(
    plan: _Plan, spec: SnapshotJobSpec, termination: TerminationStatus, context: str
) -> None:
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
        _start_or_wait(plan, spec, forced=False)
    elif action is ActionAfter.SUSPEND:
        plan.update(phase=Phase.SUSPENDED)
        plan.event(
            EventReason.SUSPENDED,
            f"Suspended with a terminal snapshot snapshotId={plan.status.record().snapshot_id} "
            f"{context}",
        )
    else:
        export = f" exportName={termination.export_name}" if termination.export_name else ""
        _cancelled(
            plan,
            f"Cancelled with a terminal snapshot mode={termination.mode.value}{export} {context}",
        )


def _failed(plan: _Plan, spec: SnapshotJobSpec, reason: ConditionReason, message: str) -> None:
    """An execution failed: suspend, give up, or restart after a backoff."""
    restarts = plan.status.restarts
    policy = spec.restart_policy
    plan.update(
        termination=None,
        export_request=None,
        last_failure=FailureStatus(reason=reason, message=message, time=plan.now),
    )
    if spec.suspend_on_failure:
        execution = plan.status.execution
        # Held until the spec changes: spec.suspend is false, and must not resume the job.
        plan.update(
            phase=Phase.SUSPENDED,
            termination=TerminationStatus(
                mode=TerminationModeName.SUSPEND_FORCEFUL,
                request_id=f"{execution.id if execution else JOB_WIDE}/SUSPEND_FORCEFUL",
                requested_at=plan.now,
                reason=SUSPENDED_ON_FAILURE,
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


def _between_executions(plan: _Plan, spec: SnapshotJobSpec) -> None:
    """No execution should run: suspend, export by copy, wait for a backoff, or start one."""
    status = plan.status
    running = plan.pods_that_may_run()
    for pod in running:
        plan.delete_pod(pod)
    termination = status.termination
    forced = termination is not None and termination.mode is TerminationModeName.RESTART_FORCEFUL
    phase = status.phase
    if phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT:
        _continue_copy(plan, spec, blocked=bool(running))
        return
    spec_changed = (
        status.observed_generation is not None and plan.obs.generation > status.observed_generation
    )
    if phase in (Phase.FAILED, Phase.COMPLETED) and not spec_changed:
        return
    held = _suspended_on_failure(status)
    if held and spec_changed:
        plan.update(termination=None)
        held = False
    if (spec.suspend or held) and not forced:
        if phase is not Phase.SUSPENDED:
            plan.update(phase=Phase.SUSPENDED, termination=None)
            plan.event(
                EventReason.SUSPENDED,
                f"Suspended while no execution ran snapshotId={status.record().snapshot_id}",
            )
            # An export, if asked for, is copied by the next decision, from SUSPENDED.
            plan.requeue(plan.settings.store_retry_seconds)
        else:
            _export_while_suspended(plan, spec, blocked=bool(running))
        return
    if phase in (Phase.SUSPENDED, Phase.FAILED, Phase.COMPLETED):
        # The user resumed or changed the job: failures before that do not count.
        plan.update(restarts=0)
    failure = status.last_failure
    if phase is Phase.RESTARTING and not forced and plan.status.restarts and failure is not None:
        due = failure.time + timedelta(seconds=spec.restart_policy.backoff(plan.status.restarts))
        if plan.now < due:
            plan.requeue((due - plan.now).total_seconds())
            return
    _start_or_wait(plan, spec, forced=forced)


def _suspended_on_failure(status: SnapshotJobStatus) -> bool:
    """Whether the job is held suspended by suspendOnFailure (until its spec changes)."""
    termination = status.termination
    return (
        status.phase in (Phase.SUSPENDED, Phase.SUSPENDED_EXPORTING_SNAPSHOT)
        and termination is not None
        and termination.mode is TerminationModeName.SUSPEND_FORCEFUL
    )


def _export_while_suspended(plan: _Plan, spec: SnapshotJobSpec, *, blocked: bool) -> None:
    name = _export_to_take(plan, spec)
    if name is None:
        return
    record = plan.status.record()
    if record.snapshot_id == NO_SNAPSHOT:
        plan.export_problem = _Problem(
            ConditionReason.EXPORT_REJECTED,
            f"Export cannot be copied name={name}: the job has no snapshot",
        )
        return
    if blocked:
        # A driver may still be stopping and move the restore point: copy once it has stopped.
        plan.requeue(plan.settings.store_retry_seconds)
        return
    failure = plan.status.export_failure
    if failure is not None and failure.name == name:
        if failure.attempts >= plan.settings.export_copy_attempts:
            return  # Given up until the name changes; Degraded says so.
    elif failure is not None:
        plan.update(export_failure=None)
    plan.update(phase=Phase.SUSPENDED_EXPORTING_SNAPSHOT)
    plan.event(
        EventReason.EXPORT_COPY_STARTED,
        f"Copying the restore point to an export name={name} snapshotId={record.snapshot_id}",
    )
    _copy(plan, record, name)


def _copy(plan: _Plan, record: ExecutionRecord, name: str) -> None:
    job = plan.obs.job
    if record.exported_snapshot_name is not None:
        source = export_map_name(job.namespace, record.exported_snapshot_name)
    else:
        source = snapshot_map_name(job.uid, record.data_map_index)
    plan.effects.append(
        CopySnapshotToExport(
            source_map=source,
            snapshot_id=record.snapshot_id,
            export_name=name,
            export_map=export_map_name(job.namespace, name),
        )
    )
    plan.requeue(plan.settings.store_retry_seconds)


def _continue_copy(plan: _Plan, spec: SnapshotJobSpec, *, blocked: bool) -> None:
    export = spec.export_snapshot
    done = export.name if export is not None and export.name is not None else None
    exported = plan.status.exported(done) if done is not None else None
    if exported is not None and export is not None:
        if plan.status.export_failure is not None:
            plan.update(export_failure=None)
        plan.event(
            EventReason.SNAPSHOT_EXPORTED,
            f"Exported snapshot name={exported.name} snapshotId={exported.snapshot_id} "
            f"numBytes={exported.num_bytes} terminal=false",
        )
        if export.cancel_job:
            _cancelled(plan, f"Cancelled after exporting exportName={exported.name}")
        else:
            plan.update(phase=Phase.SUSPENDED)
        return
    name = _export_to_take(plan, spec)
    record = plan.status.record()
    if name is None or record.snapshot_id == NO_SNAPSHOT or blocked:
        plan.update(phase=Phase.SUSPENDED)
        return
    failure = plan.status.export_failure
    if failure is not None and failure.name == name and not _retry_copy(plan, failure):
        return
    _copy(plan, record, name)


def _retry_copy(plan: _Plan, failure: ExportFailureStatus) -> bool:
    """After a failed copy: whether to copy again now (else it waits, or gives up)."""
    limit = plan.settings.export_copy_attempts
    context = f"name={failure.name} attempts={failure.attempts} maxAttempts={limit}"
    if failure.attempts >= limit:
        plan.update(phase=Phase.SUSPENDED)
        plan.event(
            EventReason.EXPORT_FAILED,
            f"Copy to the export failed, giving up until exportSnapshot.name changes {context} "
            f"error={failure.message}",
        )
        return False
    delay = plan.settings.export_retry_seconds * 2 ** (failure.attempts - 1)
    due = failure.time + timedelta(seconds=delay)
    if plan.now < due:
        plan.requeue((due - plan.now).total_seconds())
        return False
    plan.event(
        EventReason.EXPORT_FAILED,
        f"Copy to the export failed, copying again {context} error={failure.message}",
    )
    return True


def _export_failure_message(
    spec: SnapshotJobSpec | None, status: SnapshotJobStatus, settings: Settings
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


def _state_partitions_problem(spec: SnapshotJobSpec, status: SnapshotJobStatus) -> str | None:
    """Returns why the spec's statePartitions cannot be applied, or None if it can.

    Keyed state is hash-partitioned into that many partitions and snapshotted so; a restore
    with another number would fail. Only a stateless upgrade, which drops the job's state,
    may change it while the job has a snapshot. (A CEL transition rule cannot see whether the
    job has a snapshot, so the operator checks it.)
    """
    execution = status.execution
    if (
        spec.upgrade_mode is UpgradeMode.STATELESS
        or execution is None
        or execution.state_partitions is None
        or execution.state_partitions == spec.state_partitions
        or status.record().snapshot_id == NO_SNAPSHOT
    ):
        return None
    return (
        f"spec.statePartitions cannot change while the job has a snapshot "
        f"statePartitions={spec.state_partitions} "
        f"snapshotStatePartitions={execution.state_partitions} "
        f"snapshotId={status.record().snapshot_id}: set it back, or use upgradeMode stateless "
        "to start without the job's state"
    )


def _rfc3339(moment: datetime) -> str:
    """Returns the time as RFC 3339 in UTC, to the second (as Kubernetes prints times)."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _start_or_wait(plan: _Plan, spec: SnapshotJobSpec, *, forced: bool | str) -> None:
    """Starts a new execution if no driver may run and the store allows it, else waits.

    Args:
        plan: The decision.
        spec: The job's spec.
        forced: Whether the restart is a forced one (no backoff, not skipped by suspend); a
            string is the reason the RESTART_FORCEFUL marker records while waiting.
    """
    status = plan.status
    if plan.store_problem is not None or plan.pods_that_may_run():
        # NOT_RUNNING only until the first start; afterwards the job is between executions.
        waiting = Phase.NOT_RUNNING if status.phase is Phase.NOT_RUNNING else Phase.RESTARTING
        plan.update(phase=waiting)
        if forced and status.termination is None:
            execution = status.execution
            plan.update(
                termination=TerminationStatus(
                    mode=TerminationModeName.RESTART_FORCEFUL,
                    request_id=f"{execution.id if execution else JOB_WIDE}/RESTART_FORCEFUL",
                    requested_at=plan.now,
                    reason=forced if isinstance(forced, str) else INDETERMINATE_RECORD_WRITE,
                )
            )
        plan.requeue(plan.settings.store_retry_seconds)
        return
    _start(plan, spec)


def _start(plan: _Plan, spec: SnapshotJobSpec) -> None:
    obs = plan.obs
    status = plan.status
    previous = status.execution
    attempt = previous.attempt + 1 if previous is not None else 1
    new_id = execution_id(obs.job.uid, attempt, plan.now)
    fingerprint = spec.execution_fingerprint()
    stored = status.record()
    record = stored
    if (
        spec.upgrade_mode is UpgradeMode.STATELESS
        and previous is not None
        and previous.spec_hash != fingerprint
        and record.snapshot_id != NO_SNAPSHOT
    ):
        # A fresh start: drop the restore point but never reuse a snapshot id (invariant 3).
        record = ExecutionRecord(
            ongoing_snapshot_id=record.ongoing_snapshot_id, quorum_size=record.quorum_size
        )
        plan.update(last_snapshot_time=None)
        plan.event(
            EventReason.UPGRADING,
            f"Spec changed with upgradeMode=stateless, starting without the job's state "
            f"droppedSnapshotId={stored.snapshot_id}",
        )
    if spec.split_brain_protection and obs.store is not None:
        record = record.with_quorum_size(obs.store.member_count // 2 + 1)
    if record != stored:
        stamp = int(plan.now.timestamp() * 1000)
        plan.update(execution_record=ExecutionRecordStatus.of(record.stamped(stamp)))
    initial = spec.initial_snapshot_name if record.snapshot_id == NO_SNAPSHOT else None
    pod_name = driver_pod_name(obs.job.name, attempt)
    plan.update(
        phase=Phase.STARTING,
        execution=ExecutionStatus(
            id=new_id,
            driver_pod=pod_name,
            started_at=plan.now,
            attempt=attempt,
            spec_hash=fingerprint,
            state_partitions=spec.state_partitions,
        ),
        termination=None,
        export_request=None,
    )
    for pod in obs.pods:
        plan.delete_pod(pod)
    plan.effects.append(CreateDriverPod(pod_name, new_id, attempt, initial))
    if initial is not None:
        restore = f"initialSnapshotName={initial}"
    elif record.snapshot_id != NO_SNAPSHOT:
        restore = f"snapshotId={record.snapshot_id}"
    else:
        restore = "emptyState"
    plan.event(
        EventReason.EXECUTION_STARTED,
        f"Started an execution executionId={new_id} attempt={attempt} pod={pod_name} "
        f"restoreFrom={restore}",
    )


def _delete(plan: _Plan) -> tuple[Action, ...]:
    """The job is being deleted: CANCEL_FORCEFUL, then destroy its automatic snapshot maps."""
    running = plan.pods_that_may_run()
    actions: list[Action] = []
    for pod in running:
        if not pod.deleting:
            actions.append(DeleteDriverPod(pod.name))
            actions.append(
                EmitEvent(
                    EventReason.CANCELLED,
                    f"Job is being deleted, cancelling its execution without a snapshot "
                    f"mode=CANCEL_FORCEFUL pod={pod.name}",
                )
            )
    if running:
        actions.append(Requeue(plan.settings.store_retry_seconds))
        return tuple(actions)
    actions += [DeleteDriverPod(pod.name) for pod in plan.obs.pods if not pod.deleting]
    uid = plan.obs.job.uid
    maps = (snapshot_map_name(uid, 0), snapshot_map_name(uid, 1))
    actions.append(DeleteSnapshotMaps(maps))
    actions.append(
        EmitEvent(
            EventReason.SNAPSHOT_MAPS_DELETED,
            f"Destroyed the job's automatic snapshot maps maps={','.join(maps)}, exports are kept",
        )
    )
    actions.append(RemoveFinalizer())
    return tuple(actions)
