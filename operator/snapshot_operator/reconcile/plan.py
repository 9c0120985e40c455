"""The builder one decision collects its status changes and actions in.

Each part of the decision (the live execution, the time between executions, the conditions)
writes into one :class:`Plan`, and only the plan turns that into the ordered action list. That
keeps the ordering rules the executor relies on in one place: the status patch first, then
requests to the driver, then Pod and store effects, then Events, and a ``Requeue`` last.
(Deletion, which writes no status, lists its few actions itself.) A plan lives for one
decision and is never shared.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, NamedTuple

from snapshot_operator.reconcile.actions import (
    Action,
    DeleteDriverPod,
    EmitEvent,
    EventReason,
    PatchStatus,
    RequestExport,
    RequestTermination,
    Requeue,
)
from snapshot_operator.reconcile.observation import DecisionSettings, DriverPod, Observation
from snapshot_operator.reconcile.phases import check_phase_change
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionReason,
    ExportRequestStatus,
    FailureStatus,
    Phase,
    SnapshotJobStatus,
    TerminationMode,
    TerminationStatus,
)

JOB_WIDE = "job"
"""Stands for the execution id in request ids made while the job has no execution."""


class Problem(NamedTuple):
    """Why something the spec asks for cannot be done now: a condition's reason and message."""

    reason: ConditionReason
    message: str


class Plan:
    """The status and actions one decision builds up (a short-lived builder).

    Attributes:
        obs: What the decision is based on.
        settings: Operator-wide timings.
        now: The observation's time.
        status: The status as the decision has changed it so far.
        invalid_spec: Why the spec cannot be applied, for Degraded; None if it can.
        store_problem: Why the store holds back a start, for StoreReady; None if it does not.
        export_problem: Why the requested export cannot be taken, for Degraded.
        fenced: The Degraded message while the current driver reports a newer execution.
        start_problem: Why the starting execution's driver or executors cannot start, for
            Degraded; None if nothing says so.
        waiting_for_pipeline: The current driver runs but has not reported its pipeline
            running yet, for Progressing.
        stalled: Why the running execution looks stalled (no snapshot for longer than the
            staleness bound), for Degraded; None if it does not
            (:mod:`~snapshot_operator.reconcile.stalls`).
        checking_upgrade: An upgrade check runs before a spec change is rolled out, for
            Progressing (:mod:`~snapshot_operator.reconcile.upgrade_check`).
        upgrade_refused: Why a spec change is not rolled out (its check failed), for Degraded.
        lost_drivers: Driver Pods this decision deletes at once because their node stopped
            reporting (:mod:`~snapshot_operator.reconcile.lost_nodes`).
    """

    def __init__(self, observation: Observation, settings: DecisionSettings) -> None:
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
        self.store_problem: Problem | None = None
        self.export_problem: Problem | None = None
        self.fenced: str | None = None
        self.start_problem: Problem | None = None
        self.waiting_for_pipeline = False
        self.stalled: Problem | None = None
        self.checking_upgrade = False
        self.upgrade_refused: Problem | None = None
        self.lost_drivers: frozenset[str] = frozenset()

    def update(self, **fields: Any) -> None:
        """Changes status fields (snake_case names); they go into the status patch."""
        self.status = self.status.model_copy(update=fields)
        self.changed.update(fields)

    def event(self, reason: EventReason, message: str) -> None:
        """Emits an Event on the job."""
        self.events.append(EmitEvent(reason, message))

    def requeue(self, seconds: float) -> None:
        """Asks to decide again within ``seconds`` (the soonest of all such asks wins)."""
        seconds = max(seconds, 1.0)
        self.requeue_after = (
            seconds if self.requeue_after is None else min(self.requeue_after, seconds)
        )

    def delete_pod(self, pod: DriverPod) -> None:
        """Deletes a driver Pod, once, unless it is being deleted already (or at once)."""
        if (
            not pod.deleting
            and pod.name not in self.lost_drivers
            and DeleteDriverPod(pod.name) not in self.effects
        ):
            self.effects.append(DeleteDriverPod(pod.name))

    def delete_pod_at_once(self, pod: DriverPod) -> None:
        """Deletes a driver Pod without a grace period, once, even if it is being deleted."""
        if DeleteDriverPod(pod.name, at_once=True) not in self.effects:
            self.effects.append(DeleteDriverPod(pod.name, at_once=True))

    def fail(self, reason: str, message: str, failed_pod: DriverPod | None = None) -> None:
        """Records the last failure, and which failed driver Pod is kept for its log.

        Only the most recent failed driver Pod is kept: when another one fails, the one kept
        before is deleted. A failure without a failed Pod (a lost Pod, a start timeout, a
        refused create) keeps naming the one kept before, as long as it exists.

        Args:
            reason: ``lastFailure.reason``, CamelCase.
            message: ``lastFailure.message``.
            failed_pod: The driver Pod whose failure this is, kept; None if no Pod failed.
        """
        previous = self.status.last_failure
        kept = previous.driver_pod if previous is not None else None
        kept_pod = next((pod for pod in self.obs.pods if pod.name == kept), None)
        if failed_pod is not None:
            if kept_pod is not None and kept_pod.name != failed_pod.name:
                self.delete_pod(kept_pod)
            kept = failed_pod.name
        elif kept_pod is None:
            kept = None
        self.update(
            last_failure=FailureStatus(
                reason=reason, message=message, time=self.now, driver_pod=kept
            )
        )

    def kept_driver_pod(self) -> str | None:
        """Returns the failed driver Pod kept for its log (``lastFailure.driverPod``), if any."""
        failure = self.status.last_failure
        return failure.driver_pod if failure is not None else None

    def request_termination(self, termination: TerminationStatus) -> None:
        """Asks the current driver to stop, as ``status.termination``."""
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

    def ask_to_stop(self, mode: TerminationMode, reason: str, export_name: str | None) -> None:
        """Asks the current execution's driver to stop with a terminal snapshot (``mode``,
        graceful), moving the job to COMPLETING; its request id is the execution's and the
        mode's, so asking again is the same request."""
        execution = self.status.execution
        assert execution is not None
        self.update(phase=Phase.COMPLETING)
        self.request_termination(
            TerminationStatus(
                mode=mode,
                request_id=f"{execution.id}/{mode.name}",
                requested_at=self.now,
                export_name=export_name,
                reason=reason,
            )
        )

    def request_export(self, request: ExportRequestStatus) -> None:
        """Asks the running driver for an export-only snapshot, as ``status.exportRequest``."""
        self.status = self.status.model_copy(update={"export_request": request})
        self.changed.discard("export_request")
        self.requests.append(RequestExport(request.name, request.request_id))

    def forceful_marker(self, mode: TerminationMode, reason: str) -> TerminationStatus:
        """Returns a forceful termination kept in the status only as a marker of what follows.

        Args:
            mode: RESTART_FORCEFUL (a restore must follow) or SUSPEND_FORCEFUL (held suspended).
            reason: Why, in CamelCase.
        """
        execution = self.status.execution
        return TerminationStatus(
            mode=mode,
            request_id=f"{execution.id if execution else JOB_WIDE}/{mode.value}",
            requested_at=self.now,
            reason=reason,
        )

    def pods_that_may_run(self) -> list[DriverPod]:
        """Returns the job's driver Pods whose containers may still run."""
        return [pod for pod in self.obs.pods if pod.may_run]

    def update_last_snapshot_time(self) -> None:
        """Sets ``lastSnapshotTime`` from the execution record's restore point."""
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

    def actions(self) -> tuple[Action, ...]:
        """Returns the decision's actions, in the order the executor must perform them.

        Raises:
            IllegalPhaseChange: The decision moved the job to a phase that
                :data:`~snapshot_operator.reconcile.phases.TRANSITIONS` does not allow from the
                observed one; nothing is returned, so nothing of it is performed.
        """
        check_phase_change(self.obs.status.phase, self.status.phase)
        old = self.obs.status.model_dump(mode="json", exclude_none=True)
        new = self.status.model_dump(mode="json", exclude_none=True)
        aliases = {SnapshotJobStatus.model_fields[name].alias or name for name in self.changed}
        patch = {
            key: _merge_value(old.get(key), new.get(key))
            for key in sorted(aliases)
            if old.get(key) != new.get(key)
        }
        actions: list[Action] = [PatchStatus(patch)] if patch else []
        actions += self.requests
        actions += self.effects
        actions += self.events
        resync = self.settings.resync_seconds
        due = resync if self.requeue_after is None else min(self.requeue_after, resync)
        actions.append(Requeue(due))
        return tuple(actions)


def _merge_value(old: Any, new: Any) -> Any:
    """Returns ``new`` as a merge patch over ``old``: fields it no longer has become null.

    A JSON merge patch merges objects field by field, so a field left out of a new value would
    survive from the old one (e.g. ``lastFailure.driverPod`` of an earlier failure).
    """
    if not isinstance(old, dict) or not isinstance(new, dict):
        return new
    merged: dict[str, Any] = {key: None for key in old if key not in new}
    merged.update({key: _merge_value(old.get(key), value) for key, value in new.items()})
    return merged
