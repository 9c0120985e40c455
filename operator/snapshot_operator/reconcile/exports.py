"""A job's SnapshotJobExport objects: their status, creation and retention. Pure.

The job's own decision (:func:`snapshot_operator.reconcile.decide`) knows one way of asking for
an export, ``spec.exportSnapshot.name``. The export objects reuse it rather than add a second
path: :func:`decide_exports` names the one export the job should take next, and the executor
hands it to the job's decision as if the spec asked for it (:func:`with_requested_export`)
whenever the spec asks for nothing new. Everything else about an export object is derived
here from the job's status, level-based like the job's decision:

- its phase: Completed once ``status.exportedSnapshots`` lists it, InProgress while the driver
  or the operator takes it, Failed when a gate refuses it or its copy failed too often,
  Pending otherwise (with the reason);
- objects for exports the job took without one (``spec.exportSnapshot``, terminal or not) and
  for periodic exports when they are due;
- retention: completed exports of the operator's origins beyond the job's ``maxCount`` or
  ``maxAgeSeconds``, except those in use.

Retention and what a deletion does live in :mod:`snapshot_operator.reconcile.export_retention`,
the data in :mod:`snapshot_operator.reconcile.export_model`; both are re-exported here, the
module the executor and the tests import.
"""

from __future__ import annotations

__all__ = [
    "DISPOSE_ATTEMPTS",
    "CreateExport",
    "DeleteExport",
    "Disposal",
    "EmitExportEvent",
    "ExportAction",
    "ExportObject",
    "ExportsDecision",
    "ExportsObservation",
    "PatchExportStatus",
    "completed_export_identity",
    "completed_status",
    "decide_deletion",
    "decide_exports",
    "names_in_use",
    "own_names_in_use",
    "parse_export",
    "periodic_export_name",
    "with_requested_export",
]

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from snapshot_operator.reconcile.export_model import (
    CreateExport,
    DeleteExport,
    EmitExportEvent,
    ExportAction,
    ExportObject,
    ExportsDecision,
    ExportsObservation,
    PatchExportStatus,
    parse_export,
)
from snapshot_operator.reconcile.export_retention import (
    DISPOSE_ATTEMPTS,
    Disposal,
    decide_deletion,
    names_in_use,
    own_names_in_use,
    retire,
)
from snapshot_operator.reconcile.gates import export_refusal, new_export_name
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionStatus,
    ExportedSnapshot,
    Phase,
    SnapshotJobStatus,
)
from snapshotjob_contract.exports import (
    ExportCondition,
    ExportOrigin,
    ExportPhase,
    ExportReason,
    SnapshotJobExportSpec,
    SnapshotJobExportStatus,
)

_TAKING_PHASES = frozenset({Phase.RUNNING, Phase.SUSPENDED, Phase.SUSPENDED_EXPORTING_SNAPSHOT})
"""Job phases in which an asked-for export is taken (by the driver, or copied if suspended)."""


@dataclass(frozen=True)
class _State:
    phase: ExportPhase
    reason: ExportReason
    message: str
    exported: ExportedSnapshot | None = None


def decide_exports(observation: ExportsObservation) -> ExportsDecision:
    """Returns the status of every export object of the job, and what to create or retire."""
    actions: list[ExportAction] = []
    # Exports being deleted still follow their job (one being taken must reach Completed for
    # its deletion to go on) but are not asked for, created or retired.
    every = sorted(observation.exports, key=lambda e: (e.created_at, e.name))
    live = [e for e in every if not e.deleting]
    states = {e.name: _derive(e, observation) for e in every}
    waiting = [
        e.name
        for e in every
        if states[e.name].phase is ExportPhase.PENDING
        and (not e.deleting or e.status.phase is ExportPhase.IN_PROGRESS)
    ]
    requested = _requested(observation, waiting)
    for export in every:
        state = states[export.name]
        if export.name == requested and _being_taken(export.name, observation):
            state = _State(
                ExportPhase.IN_PROGRESS,
                ExportReason.EXPORT_IN_PROGRESS,
                f"Job takes the export job={observation.job_name} "
                f"jobPhase={observation.status.phase.value}",
            )
        actions.extend(_transition(export, state, observation))
    actions.extend(_create_for_untracked(observation))
    periodic, due = _periodic(observation)
    actions.extend(periodic)
    completed = [
        (e, _completed_at(e, states[e.name]))
        for e in live
        if states[e.name].phase is ExportPhase.COMPLETED
    ]
    actions.extend(retire(observation, completed))
    return ExportsDecision(tuple(actions), requested, due)


def _derive(export: ExportObject, observation: ExportsObservation) -> _State:
    """An export's state from the job's status, before the queue is looked at."""
    current = export.status
    if current.phase in (ExportPhase.COMPLETED, ExportPhase.FAILED):
        ready = current.ready()
        known = {reason.value for reason in ExportReason}
        reason = ExportReason(ready.reason) if ready and ready.reason in known else None
        return _State(
            current.phase,
            reason or ExportReason.EXPORT_COMPLETED,
            ready.message if ready else "",
        )
    name, job = export.name, observation.job_name
    if observation.job_uid is None:
        return _State(
            ExportPhase.PENDING,
            ExportReason.JOB_NOT_FOUND,
            f"SnapshotJob not found job={job}: create it, or delete this export",
        )
    status = observation.status
    exported = status.exported(name)
    if exported is not None:
        return _State(
            ExportPhase.COMPLETED,
            ExportReason.EXPORT_COMPLETED,
            f"Exported snapshotId={exported.snapshot_id} numBytes={exported.num_bytes} "
            f"terminal={str(exported.terminal).lower()} job={job}",
            exported,
        )
    failure = status.export_failure
    if (
        failure is not None
        and failure.name == name
        and failure.attempts >= observation.copy_attempts
    ):
        return _State(
            ExportPhase.FAILED,
            ExportReason.EXPORT_COPY_FAILED,
            f"Copy to the export failed attempts={failure.attempts} job={job} "
            f"error={failure.message}",
        )
    spec = observation.spec
    if spec is None:
        return _State(
            ExportPhase.PENDING,
            ExportReason.WAITING_FOR_JOB,
            f"Job spec is invalid job={job}: the job's InvalidSpec condition says why",
        )
    refusal = export_refusal(name, spec, status)
    if (
        refusal is None
        and status.phase is Phase.SUSPENDED
        and status.record().snapshot_id == NO_SNAPSHOT
    ):
        refusal = f"Export cannot be copied name={name}: the job has no snapshot"
    if refusal is not None:
        return _State(ExportPhase.FAILED, ExportReason.EXPORT_REFUSED, refusal)
    if status.phase not in _TAKING_PHASES:
        return _State(
            ExportPhase.PENDING,
            ExportReason.WAITING_FOR_JOB,
            f"Waiting for the job to run or be suspended job={job} jobPhase={status.phase.value}",
        )
    own = new_export_name(spec, status)
    if own is not None:
        # Taken after it; if the job refuses it, its Degraded condition says why.
        return _State(
            ExportPhase.PENDING,
            ExportReason.QUEUED,
            f"Queued behind the job's spec.exportSnapshot.name={own} job={job}",
        )
    return _State(ExportPhase.PENDING, ExportReason.QUEUED, f"Queued job={job}")


def _requested(observation: ExportsObservation, waiting: Sequence[str]) -> str | None:
    """The export the job should take next: the one it is taking, else the oldest waiting."""
    spec = observation.spec
    if spec is None or observation.job_uid is None or not waiting:
        return None
    if observation.status.phase not in _TAKING_PHASES:
        return None  # Nothing to hand the job's decision while it can take no export.
    if new_export_name(spec, observation.status) is not None:
        return None  # spec.exportSnapshot first: the user asked for it in the job itself.
    taking = [name for name in waiting if _being_taken(name, observation)]
    return taking[0] if taking else waiting[0]


def _being_taken(name: str, observation: ExportsObservation) -> bool:
    status = observation.status
    request = status.export_request
    termination = status.termination
    return (
        (request is not None and request.name == name)
        or (termination is not None and termination.export_name == name)
        or status.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    )


def _transition(
    export: ExportObject, state: _State, observation: ExportsObservation
) -> list[ExportAction]:
    status = _status(export.status, state, observation)
    if status == export.status:
        return []
    actions: list[ExportAction] = [PatchExportStatus(export.name, status.to_json())]
    previous = export.status.ready()
    if previous is None or previous.reason != state.reason.value:
        warning = state.phase is ExportPhase.FAILED or state.reason is ExportReason.JOB_NOT_FOUND
        if state.reason is not ExportReason.QUEUED:
            actions.append(EmitExportEvent(export.name, state.reason, state.message, warning))
    return actions


def _status(
    current: SnapshotJobExportStatus, state: _State, observation: ExportsObservation
) -> SnapshotJobExportStatus:
    previous = current.ready()
    ready = ConditionStatus.TRUE if state.phase is ExportPhase.COMPLETED else ConditionStatus.FALSE
    since = (
        previous.last_transition_time
        if previous is not None and previous.status is ready
        else observation.now
    )
    condition = ExportCondition(
        status=ready, reason=state.reason.value, message=state.message, last_transition_time=since
    )
    update: dict[str, Any] = {"phase": state.phase, "conditions": [condition]}
    if observation.job_uid is not None and current.job_uid is None:
        update["job_uid"] = observation.job_uid
    exported = state.exported
    if exported is not None:
        update |= {
            "snapshot_id": exported.snapshot_id,
            "num_bytes": exported.num_bytes,
            "terminal": exported.terminal,
            "completed_at": exported.created_at,
            "durable_location": exported.durable_location,
        }
    return current.model_copy(update=update)


def completed_status(
    exported: ExportedSnapshot, job_name: str, job_uid: str, now: datetime
) -> SnapshotJobExportStatus:
    """The status of an export object created for an export the job already took."""
    state = _State(
        ExportPhase.COMPLETED,
        ExportReason.EXPORT_COMPLETED,
        f"Exported snapshotId={exported.snapshot_id} numBytes={exported.num_bytes} "
        f"terminal={str(exported.terminal).lower()} job={job_name}",
        exported,
    )
    observation = ExportsObservation(
        job_name=job_name,
        job_uid=job_uid,
        spec=None,
        status=SnapshotJobStatus(),
        exports=(),
        now=now,
    )
    return _status(SnapshotJobExportStatus(), state, observation)


def _create_for_untracked(observation: ExportsObservation) -> list[ExportAction]:
    """Objects for the exports the job took without one: spec.exportSnapshot, terminal or not."""
    if observation.job_uid is None:
        return []
    known = {e.name for e in observation.exports} | observation.other_export_names
    dispose = observation.spec.export_policy.dispose_on_delete if observation.spec else True
    actions: list[ExportAction] = []
    for exported in observation.status.exported_snapshots:
        if exported.name in known:
            continue
        spec = SnapshotJobExportSpec(
            job_name=observation.job_name,
            origin=ExportOrigin.EXPORT_SNAPSHOT,
            dispose_on_delete=dispose,
        )
        status = completed_status(
            exported, observation.job_name, observation.job_uid, observation.now
        )
        actions.append(CreateExport(exported.name, spec, status))
    return actions


def periodic_export_name(job_name: str, now: datetime) -> str:
    """``<job>-<unix time>``, shortened and cleaned to a DNS label."""
    base = re.sub(r"[^a-z0-9-]", "-", job_name.lower())[:52].strip("-") or "export"
    return f"{base}-{int(now.timestamp())}"


def _periodic(observation: ExportsObservation) -> tuple[list[ExportAction], float | None]:
    """A periodic export's object when one is due, else when the next falls due."""
    spec = observation.spec
    status = observation.status
    interval = spec.export_policy.periodic_seconds if spec is not None else None
    if interval is None or observation.job_uid is None or status.phase is not Phase.RUNNING:
        return [], None
    periodic = [e for e in observation.exports if e.spec.origin is ExportOrigin.PERIODIC]
    if any(
        e.status.phase in (ExportPhase.PENDING, ExportPhase.IN_PROGRESS) and not e.deleting
        for e in periodic
    ):
        return [], None  # One at a time: a slow export does not pile up more.
    execution = status.execution
    started = execution.started_at if execution is not None else observation.now
    last = max((e.created_at for e in periodic), default=started)
    due = last + timedelta(seconds=interval)
    if observation.now < due:
        return [], (due - observation.now).total_seconds()
    name = periodic_export_name(observation.job_name, observation.now)
    if name in observation.other_export_names or any(e.name == name for e in observation.exports):
        return [], 1.0
    dispose = spec.export_policy.dispose_on_delete if spec is not None else True
    create = CreateExport(
        name,
        SnapshotJobExportSpec(
            job_name=observation.job_name, origin=ExportOrigin.PERIODIC, dispose_on_delete=dispose
        ),
        SnapshotJobExportStatus(),
    )
    return [create], float(interval)


def _completed_at(export: ExportObject, state: _State) -> datetime:
    if state.exported is not None:
        return state.exported.created_at
    return export.status.completed_at or export.created_at


def with_requested_export(
    raw_spec: Mapping[str, Any] | None, raw_status: Mapping[str, Any] | None, requested: str | None
) -> Any:
    """The job's spec as its decision should see it: asking for ``requested`` if given.

    The spec's own ``exportSnapshot`` wins while the job has not taken it: the spec is read
    again here, so an export the user asked for in the job since :func:`decide_exports` ran is
    not hidden. ``exportSnapshot`` is not part of the execution's fingerprint, so the job is
    not rolled out by the substitution.
    """
    if requested is None or raw_spec is None:
        return raw_spec
    own = (raw_spec.get("exportSnapshot") or {}).get("name")
    taken = {entry.get("name") for entry in (raw_status or {}).get("exportedSnapshots") or ()}
    if own is not None and own not in taken:
        return raw_spec
    return {**raw_spec, "exportSnapshot": {"name": requested}}


def completed_export_identity(
    raws: Sequence[Mapping[str, Any]], name: str | None
) -> tuple[str, int] | None:
    """``(job uid, snapshot id)`` of the completed SnapshotJobExport called ``name``, if any.

    The identity a new driver's restore checks, so that a reused export name never restores
    another export's data (snapshot_protocol.export_names).

    Args:
        raws: The namespace's SnapshotJobExport objects as read.
        name: The export a start restores from; None for a start from nothing.
    """
    if name is None:
        return None
    for raw in raws:
        export = parse_export(raw)
        if export is None or export.name != name:
            continue
        status = export.status
        if (
            status.phase is ExportPhase.COMPLETED
            and status.job_uid is not None
            and status.snapshot_id is not None
        ):
            return status.job_uid, status.snapshot_id
    return None
