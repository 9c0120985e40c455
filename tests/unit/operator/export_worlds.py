"""Builders for the export decision's tests: a job, its status, its export objects, a decision.

Shared by ``test_export_decision.py`` (statuses, queue, creation) and ``test_export_retention.py``
(retention, deletion). Every export belongs to the job ``wordcount``; times are relative to
``NOW``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from snapshot_operator.reconcile.exports import (
    EmitExportEvent,
    ExportObject,
    ExportsDecision,
    ExportsObservation,
    PatchExportStatus,
)
from snapshotjob_contract import (
    ConditionStatus,
    ExecutionStatus,
    ExportedSnapshot,
    Phase,
    SnapshotJobSpec,
    SnapshotJobStatus,
)
from snapshotjob_contract.exports import (
    ExportCondition,
    ExportOrigin,
    ExportPhase,
    SnapshotJobExportSpec,
    SnapshotJobExportStatus,
)
from tests.unit.operator.specs import VALID_SPEC

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
JOB = "wordcount"
JOB_UID = "6f1c2d3e"
A = TypeVar("A")


def ago(seconds: float) -> datetime:
    """Returns the time that many seconds before NOW."""
    return NOW - timedelta(seconds=seconds)


def job_spec(**changes: Any) -> SnapshotJobSpec:
    """Returns VALID_SPEC with top-level (camelCase) fields changed."""
    return SnapshotJobSpec.model_validate({**VALID_SPEC, **changes})


def job_status(
    phase: Phase = Phase.RUNNING, started_ago: float = 3600, **fields: Any
) -> SnapshotJobStatus:
    """Returns a job status in that phase, its execution started that long ago."""
    execution = ExecutionStatus(
        id="e-1", driver_pod=f"{JOB}-driver", started_at=ago(started_ago), attempt=1, spec_hash="h"
    )
    return SnapshotJobStatus(phase=phase, execution=execution, **fields)


def taken(name: str, age: float = 600, terminal: bool = False) -> ExportedSnapshot:
    """Returns an entry of status.exportedSnapshots that completed that long ago."""
    location = f"s3://snapshots/team/{name}/7"
    fields: dict[str, Any] = {"snapshot_id": 7, "num_bytes": 4096, "durable_location": location}
    return ExportedSnapshot(name=name, created_at=ago(age), terminal=terminal, **fields)


STORED_REASONS = dict(
    zip(
        ExportPhase, ("Queued", "ExportInProgress", "ExportCompleted", "ExportRefused"), strict=True
    )
)
"""A Ready reason per phase (Pending, InProgress, Completed, Failed) as a decision wrote it."""


def stored(phase: ExportPhase, completed_ago: float = 600) -> SnapshotJobExportStatus:
    """Returns an export's status as a previous decision wrote it."""
    done = phase is ExportPhase.COMPLETED
    ready = ConditionStatus.TRUE if done else ConditionStatus.FALSE
    reason = STORED_REASONS[phase]
    condition = ExportCondition(status=ready, reason=reason, last_transition_time=ago(900))
    completed = ago(completed_ago) if done else None
    return SnapshotJobExportStatus(
        phase=phase, conditions=[condition], job_uid=JOB_UID, completed_at=completed
    )


def export(
    name: str,
    origin: ExportOrigin = ExportOrigin.USER,
    created_ago: float = 900,
    status: SnapshotJobExportStatus | None = None,
    deleting: bool = False,
    dispose: bool = False,
) -> ExportObject:
    """Returns an export object of the job."""
    spec = SnapshotJobExportSpec(job_name=JOB, origin=origin, dispose_on_delete=dispose)
    return ExportObject(
        name, f"uid-{name}", ago(created_ago), spec, status or SnapshotJobExportStatus(), deleting
    )


DEFAULT_SPEC = job_spec()


def observe(
    *exports: ExportObject,
    spec: SnapshotJobSpec | None = DEFAULT_SPEC,
    status: SnapshotJobStatus | None = None,
    **fields: Any,
) -> ExportsObservation:
    """Returns an observation of a running job with VALID_SPEC unless told otherwise."""
    return ExportsObservation(
        job_name=JOB,
        job_uid=fields.pop("job_uid", JOB_UID),
        spec=spec,
        status=status if status is not None else job_status(),
        exports=exports,
        now=NOW,
        **fields,
    )


def of(decision: ExportsDecision, kind: type[A]) -> list[A]:
    """Returns the decision's actions of that kind, in order."""
    return [action for action in decision.actions if isinstance(action, kind)]


def state(decision: ExportsDecision, name: str) -> tuple[str, str]:
    """Returns the phase and Ready reason of that export's single status patch."""
    [patch] = [p.status for p in of(decision, PatchExportStatus) if p.name == name]
    return patch["phase"], patch["conditions"][0]["reason"]


def event(decision: ExportsDecision, name: str) -> EmitExportEvent:
    """Returns the single event regarding that export."""
    [only] = [e for e in of(decision, EmitExportEvent) if e.name == name]
    return only
