"""The SnapshotJobExport resource: one exported snapshot as a Kubernetes object.

An export used to exist only as an entry of its job's ``status.exportedSnapshots``: it could not
be asked for from GitOps without editing the job, listed across jobs, kept apart from the job's
lifetime, retired by age or count, or disposed of by deleting something. A SnapshotJobExport is
that object, the shape of the Flink Kubernetes Operator's FlinkStateSnapshot:

- a user (or a GitOps tool) creates one to ask its job for an export named like the object;
- the operator creates one for every export the job took otherwise (``spec.exportSnapshot``,
  terminal or not) and for the periodic exports of ``spec.exportPolicy``;
- its status follows the export through Pending, InProgress, Completed or Failed, with a
  ``Ready`` condition and Events;
- the operator deletes the ones it created by the job's retention policy, never one that some
  job names (``initialSnapshotName``, ``exportSnapshot.name``, its restore point) or that is
  being taken;
- deleting one with ``spec.disposeOnDelete`` destroys the export's data (the store's map and
  its durable copy), again never while a job names it.

The export's name is the object's name: the map ``__sj.export.<namespace>.<name>``, the name
``initialSnapshotName`` takes, and the key of ``status.exportedSnapshots``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, ClassVar

from pydantic import AwareDatetime, ConfigDict, Field

from snapshotjob_contract.base import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    ApiModel,
    CrossFieldRule,
)
from snapshotjob_contract.conditions import ConditionStatus, described
from snapshotjob_contract.resource import GROUP

EXPORT_KIND = "SnapshotJobExport"
"""``kind`` of a SnapshotJobExport object."""
EXPORT_PLURAL = "snapshotjobexports"
"""The resource name in URLs and RBAC rules."""
EXPORT_SINGULAR = "snapshotjobexport"
"""The singular name kubectl accepts."""
EXPORT_SHORT_NAMES = ("sjx",)
"""Short names kubectl accepts."""
EXPORT_FINALIZER = f"{GROUP}/export-finalizer"
"""Kept on every export until its deletion is handled: its data disposed of if asked, and its
entry removed from the job's ``status.exportedSnapshots`` (else the operator, seeing an export
without an object, would create the object again)."""

EXPORT_NAME_RULE = CrossFieldRule(
    cel=f"size(self.metadata.name) <= {DNS_LABEL_MAX_LENGTH} && "
    f"self.metadata.name.matches('{DNS_LABEL_PATTERN}')",
    message="metadata.name must be a DNS-1123 label (at most 63 lower-case letters, digits and "
    "'-'): it is the export's name, which initialSnapshotName and exportSnapshot.name take",
    holds=lambda name: (
        len(name) <= DNS_LABEL_MAX_LENGTH and re.fullmatch(DNS_LABEL_PATTERN, name) is not None
    ),
)
"""The rule on an export's ``metadata.name``, for CEL (a root rule) and for Python."""


class ExportPhase(enum.StrEnum):
    """Where an export is in its lifecycle."""

    PENDING = "Pending"
    IN_PROGRESS = "InProgress"
    COMPLETED = "Completed"
    FAILED = "Failed"

    @property
    def description(self) -> str:
        """What the phase means, for the CRD and the docs."""
        return EXPORT_PHASE_DESCRIPTIONS[self]


EXPORT_PHASE_DESCRIPTIONS: Mapping[ExportPhase, str] = MappingProxyType(
    {
        ExportPhase.PENDING: "Not taken yet: the job is not running or suspended, takes another "
        "export first, or does not exist (the Ready condition says which)",
        ExportPhase.IN_PROGRESS: "The job takes it: the driver writes an export-only or terminal "
        "snapshot, or the operator copies a suspended job's restore point",
        ExportPhase.COMPLETED: "The export exists and validated; status names its snapshot",
        ExportPhase.FAILED: "The export was refused or its copy failed too often; it is not "
        "tried again (create another export)",
    }
)


class ExportOrigin(enum.StrEnum):
    """Who asked for an export, which decides whether the job's retention applies to it."""

    USER = "User"
    EXPORT_SNAPSHOT = "ExportSnapshot"
    PERIODIC = "Periodic"

    @property
    def description(self) -> str:
        """What the origin means, for the CRD and the docs."""
        return EXPORT_ORIGIN_DESCRIPTIONS[self]


EXPORT_ORIGIN_DESCRIPTIONS: Mapping[ExportOrigin, str] = MappingProxyType(
    {
        ExportOrigin.USER: "Created by a user or a GitOps tool to ask for the export; kept "
        "until deleted (retention would fight the tool that re-creates it)",
        ExportOrigin.EXPORT_SNAPSHOT: "Created by the operator for an export the job took for "
        "spec.exportSnapshot (terminal or not); retention applies",
        ExportOrigin.PERIODIC: "Created by the operator for spec.exportPolicy.periodicSeconds; "
        "retention applies",
    }
)


class ExportReason(enum.StrEnum):
    """Reasons of an export's Ready condition and of its Events."""

    QUEUED = "Queued"
    WAITING_FOR_JOB = "WaitingForJob"
    JOB_NOT_FOUND = "JobNotFound"
    EXPORT_IN_PROGRESS = "ExportInProgress"
    EXPORT_COMPLETED = "ExportCompleted"
    EXPORT_REFUSED = "ExportRefused"
    EXPORT_COPY_FAILED = "ExportCopyFailed"
    EXPORT_IN_USE = "ExportInUse"
    EXPORT_DISPOSED = "ExportDisposed"
    DISPOSE_FAILED = "DisposeFailed"
    EXPORT_RETIRED = "ExportRetired"

    @property
    def description(self) -> str:
        """What the reason means, for the docs."""
        return EXPORT_REASON_DESCRIPTIONS[self]


EXPORT_REASON_DESCRIPTIONS: Mapping[ExportReason, str] = MappingProxyType(
    {
        ExportReason.QUEUED: "The job takes other exports first",
        ExportReason.WAITING_FOR_JOB: "The job is neither running nor suspended",
        ExportReason.JOB_NOT_FOUND: "spec.jobName names no SnapshotJob in this namespace",
        ExportReason.EXPORT_IN_PROGRESS: "The job is taking the export",
        ExportReason.EXPORT_COMPLETED: "The export exists and validated",
        ExportReason.EXPORT_REFUSED: "The job cannot take this export (the message says why)",
        ExportReason.EXPORT_COPY_FAILED: "Copying a suspended job's restore point failed too often",
        ExportReason.EXPORT_IN_USE: "Deleting it waits: a job names it, or it is being taken",
        ExportReason.EXPORT_DISPOSED: "Its data was destroyed on deletion",
        ExportReason.DISPOSE_FAILED: "Its data could not be destroyed; the object went away "
        "and the message names what is left",
        ExportReason.EXPORT_RETIRED: "Deleted by the job's spec.exportPolicy retention",
    }
)


class SnapshotJobExportSpec(ApiModel):
    """An exported snapshot of a SnapshotJob in the same namespace, named like this object."""

    model_config = ConfigDict(extra="forbid")

    job_name: str = Field(
        max_length=253,
        min_length=1,
        json_schema_extra={
            "x-kubernetes-validations": [
                {"rule": "self == oldSelf", "message": "jobName cannot be changed"}
            ]
        },
    )
    """The SnapshotJob whose snapshot this is; it cannot be changed."""
    origin: ExportOrigin = Field(
        default=ExportOrigin.USER,
        description="Who asked for the export: " + described(EXPORT_ORIGIN_DESCRIPTIONS),
    )
    dispose_on_delete: bool = False
    """Deleting this object destroys the export's data: its map in the store and its durable
    copy. Never while a SnapshotJob names the export (initialSnapshotName, exportSnapshot.name
    or its restore point): the deletion waits, with an ExportInUse Event."""


class ExportCondition(ApiModel):
    """An export's Ready condition: True once it completed."""

    model_config = ConfigDict(extra="ignore")

    type: str = Field(default="Ready", pattern=r"^Ready$")
    """Ready: the export exists and validated."""
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Why the condition has this status, in CamelCase."""
    message: str = Field(default="", max_length=32768)
    """Details for humans, with key=value context."""
    last_transition_time: AwareDatetime
    """When the status last changed."""


class SnapshotJobExportStatus(ApiModel):
    """What the operator observed of the export; written by the operator only."""

    model_config = ConfigDict(extra="ignore")

    phase: ExportPhase = Field(
        default=ExportPhase.PENDING,
        description="Lifecycle phase: " + described(EXPORT_PHASE_DESCRIPTIONS),
    )
    conditions: list[ExportCondition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready."""
    job_uid: str | None = None
    """Uid of the SnapshotJob that took the export."""
    snapshot_id: int | None = None
    """Id of the exported snapshot."""
    num_bytes: int | None = Field(default=None, ge=0)
    """Bytes of snapshot data."""
    terminal: bool | None = None
    """Whether the job stopped after it (exportSnapshot.cancelJob)."""
    completed_at: AwareDatetime | None = None
    """When the export completed."""
    durable_location: str | None = None
    """Where its verified copy in object storage is; absent without durable storage."""
    dispose_failures: int = Field(default=0, ge=0)
    """Failed attempts to destroy the data on deletion; the deletion gives up after a few."""

    def ready(self) -> ExportCondition | None:
        """Returns the Ready condition, if written."""
        return next((c for c in self.conditions if c.type == "Ready"), None)


class SnapshotJobExportObject(ApiModel):
    """The parts of a SnapshotJobExport object the operator reads, parsed once."""

    model_config = ConfigDict(extra="ignore")

    spec: SnapshotJobExportSpec
    """The spec."""
    status: SnapshotJobExportStatus = Field(default_factory=SnapshotJobExportStatus)
    """The status."""

    FIELDS: ClassVar[tuple[str, ...]] = ("spec", "status")

    @classmethod
    def of(cls, raw: Mapping[str, Any]) -> SnapshotJobExportObject:
        """Parses an object as the API server returns it.

        Raises:
            pydantic.ValidationError: If the spec or status is not an export's.
        """
        return cls.model_validate({key: raw.get(key) or {} for key in cls.FIELDS})
