"""The data of the export decision: export objects as read, the observation, the actions.

Shared by the decision of a job's export objects (:mod:`snapshot_operator.reconcile.exports`)
and by their retention and deletion (:mod:`snapshot_operator.reconcile.export_retention`).
Pure, like the rest of the decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import pydantic

from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus
from snapshotjob_contract.exports import (
    ExportReason,
    SnapshotJobExportSpec,
    SnapshotJobExportStatus,
)


@dataclass(frozen=True)
class ExportObject:
    """A SnapshotJobExport as the decision reads it.

    Attributes:
        name: The object's (and the export's) name.
        uid: The object's uid.
        created_at: Its creationTimestamp.
        spec: Its spec.
        status: Its status.
        deleting: Whether it has a deletion timestamp.
    """

    name: str
    uid: str
    created_at: datetime
    spec: SnapshotJobExportSpec
    status: SnapshotJobExportStatus
    deleting: bool = False


def parse_export(raw: Mapping[str, Any]) -> ExportObject | None:
    """Returns an export object, or None if its spec is not an export's (nothing to act on)."""
    metadata = raw.get("metadata") or {}
    try:
        spec = SnapshotJobExportSpec.model_validate(raw.get("spec") or {})
        status = SnapshotJobExportStatus.model_validate(raw.get("status") or {})
        created = pydantic.TypeAdapter(pydantic.AwareDatetime).validate_python(
            metadata.get("creationTimestamp")
        )
    except pydantic.ValidationError:
        return None
    return ExportObject(
        name=str(metadata.get("name")),
        uid=str(metadata.get("uid")),
        created_at=created,
        spec=spec,
        status=status,
        deleting=bool(metadata.get("deletionTimestamp")),
    )


@dataclass(frozen=True)
class ExportsObservation:
    """Everything the export decision of one job is based on.

    Attributes:
        job_name: The job's name.
        job_uid: The job's uid; None if the job does not exist.
        spec: The job's spec; None if the job does not exist or its spec is invalid.
        status: The job's status (empty if the job does not exist).
        exports: The export objects naming this job.
        other_export_names: Names of export objects of other jobs in the namespace, which
            an object for this job cannot take.
        in_use: Export names some job in the namespace names, with who names them.
        now: The current time.
        copy_attempts: Failed copies after which the job gives an export up.
    """

    job_name: str
    job_uid: str | None
    spec: SnapshotJobSpec | None
    status: SnapshotJobStatus
    exports: tuple[ExportObject, ...]
    now: datetime
    other_export_names: frozenset[str] = frozenset()
    in_use: Mapping[str, str] = field(default_factory=dict)
    copy_attempts: int = 3


@dataclass(frozen=True)
class PatchExportStatus:
    """Replace an export object's status."""

    name: str
    status: dict[str, Any]


@dataclass(frozen=True)
class CreateExport:
    """Create an export object, then write its status."""

    name: str
    spec: SnapshotJobExportSpec
    status: SnapshotJobExportStatus


@dataclass(frozen=True)
class DeleteExport:
    """Delete an export object (its uid a precondition): the job's retention retired it."""

    name: str
    uid: str


@dataclass(frozen=True)
class EmitExportEvent:
    """Emit an Event regarding an export object (by name; the executor knows the uid)."""

    name: str
    reason: ExportReason
    message: str
    warning: bool = False


ExportAction = PatchExportStatus | CreateExport | DeleteExport | EmitExportEvent


@dataclass(frozen=True)
class ExportsDecision:
    """What to do with a job's export objects.

    Attributes:
        actions: In order.
        requested: The export the job should take next, or None.
        due_in_seconds: When a periodic export falls due, if one will.
    """

    actions: tuple[ExportAction, ...]
    requested: str | None
    due_in_seconds: float | None = None
