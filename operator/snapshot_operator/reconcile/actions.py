"""What the decision function asks for: actions as data, one API call (or store call) each.

The executor in the kopf layer performs them in order and stops at the first error; the next
reconcile decides again from what is then observed. Status writes carry the ``resourceVersion``
the decision was based on, so a decision made on a stale view fails with a conflict instead of
overwriting the driver's execution record. Order matters and the decision function relies on
it: the status that names a new execution (the fencing token) is written before its Pod is
created, and requests to the driver are written after the phase that announces them.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from snapshotjob_contract import (
    DurableStorageSpec,
    ExportedSnapshot,
    ExportRequestStatus,
    TerminationMode,
    TerminationStatus,
)


class EventType(enum.StrEnum):
    """Kubernetes Event types."""

    NORMAL = "Normal"
    WARNING = "Warning"


class EventReason(enum.StrEnum):
    """The fixed set of Event reasons the operator emits (Kubernetes: CamelCase)."""

    EXECUTION_STARTED = "ExecutionStarted"
    EXECUTION_FAILED = "ExecutionFailed"
    RESTART_LIMIT_REACHED = "RestartLimitReached"
    SUSPENDED_ON_FAILURE = "SuspendedOnFailure"
    FORCED_RESTART = "ForcedRestart"
    DRIVER_INTERRUPTED = "DriverInterrupted"
    QUORUM_LOST = "QuorumLost"
    DRIVER_FENCED = "DriverFenced"
    DRIVER_NODE_LOST = "DriverNodeLost"
    SNAPSHOT_CORRUPTED = "SnapshotCorrupted"
    SNAPSHOT_INCOMPATIBLE = "SnapshotIncompatible"
    SNAPSHOT_NOT_FOUND = "SnapshotNotFound"
    RESTORE_NEEDS_CONSENT = "RestoreNeedsConsent"
    TERMINATION_REQUESTED = "TerminationRequested"
    TERMINATION_ESCALATED = "TerminationEscalated"
    SUSPENDED = "Suspended"
    CANCELLED = "Cancelled"
    COMPLETED = "Completed"
    UPGRADING = "Upgrading"
    EXPORT_REQUESTED = "ExportRequested"
    EXPORT_COPY_STARTED = "ExportCopyStarted"
    SNAPSHOT_EXPORTED = "SnapshotExported"
    EXPORT_TIMED_OUT = "ExportTimedOut"
    EXPORT_REJECTED = "ExportRejected"
    EXPORT_FAILED = "ExportFailed"
    INVALID_SPEC = "InvalidSpec"
    STORE_NOT_READY = "StoreNotReady"
    STALE_DRIVER_DELETED = "StaleDriverDeleted"
    DRIVER_POD_MISSING = "DriverPodMissing"
    SNAPSHOT_MAPS_DELETED = "SnapshotMapsDeleted"
    DURABLE_COPIES_DELETED = "DurableCopiesDeleted"
    DURABLE_COPIES_KEPT = "DurableCopiesKept"
    CREATE_FAILED = "CreateFailed"
    REPEATED_FORCED_RESTARTS = "RepeatedForcedRestarts"
    PIPELINE_RUNNING = "PipelineRunning"
    DRIVER_UNSCHEDULABLE = "DriverUnschedulable"
    DRIVER_NOT_STARTING = "DriverNotStarting"
    EXECUTORS_NOT_STARTING = "ExecutorsNotStarting"
    SNAPSHOT_STALE = "SnapshotStale"
    DRIVER_STALLED = "DriverStalled"
    SOURCE_DATA_LOST = "SourceDataLost"
    UPGRADE_CHECK_STARTED = "UpgradeCheckStarted"
    UPGRADE_REFUSED = "UpgradeRefused"
    DELETION_POLICY_APPLIED = "DeletionPolicyApplied"
    DELETION_EXPORT_KEPT = "DeletionExportKept"
    DELETION_HELD = "DeletionHeld"

    @property
    def event_type(self) -> EventType:
        """Warning for reasons a human should look at, Normal otherwise."""
        return EventType.WARNING if self in _WARNINGS else EventType.NORMAL


_WARNINGS = frozenset(
    {
        EventReason.EXECUTION_FAILED,
        EventReason.RESTART_LIMIT_REACHED,
        EventReason.SUSPENDED_ON_FAILURE,
        EventReason.FORCED_RESTART,
        EventReason.DRIVER_INTERRUPTED,
        EventReason.QUORUM_LOST,
        EventReason.DRIVER_FENCED,
        EventReason.DRIVER_NODE_LOST,
        EventReason.SNAPSHOT_CORRUPTED,
        EventReason.SNAPSHOT_INCOMPATIBLE,
        EventReason.SNAPSHOT_NOT_FOUND,
        EventReason.RESTORE_NEEDS_CONSENT,
        EventReason.TERMINATION_ESCALATED,
        EventReason.EXPORT_TIMED_OUT,
        EventReason.EXPORT_REJECTED,
        EventReason.EXPORT_FAILED,
        EventReason.INVALID_SPEC,
        EventReason.STORE_NOT_READY,
        EventReason.STALE_DRIVER_DELETED,
        EventReason.DRIVER_POD_MISSING,
        EventReason.CREATE_FAILED,
        EventReason.REPEATED_FORCED_RESTARTS,
        EventReason.DRIVER_UNSCHEDULABLE,
        EventReason.DRIVER_NOT_STARTING,
        EventReason.EXECUTORS_NOT_STARTING,
        EventReason.DURABLE_COPIES_KEPT,
        EventReason.SNAPSHOT_STALE,
        EventReason.DRIVER_STALLED,
        EventReason.SOURCE_DATA_LOST,
        EventReason.DELETION_HELD,
        EventReason.UPGRADE_REFUSED,
    }
)


@dataclass(frozen=True)
class PatchStatus:
    """A JSON merge patch of the status subresource (camelCase; null deletes a field).

    Attributes:
        patch: Top-level status fields and their new values.
    """

    patch: Mapping[str, Any]


@dataclass(frozen=True)
class RequestTermination:
    """Ask the current driver to stop: written to ``status.termination``.

    Attributes:
        mode: A graceful mode (forceful ones need no driver: the operator deletes the Pod).
        request_id: Unique id of the request.
        export_name: Export the terminal snapshot under this name.
        reason: Why, in CamelCase.
    """

    mode: TerminationMode
    request_id: str
    export_name: str | None
    reason: str

    def status_patch(self, requested_at: datetime) -> dict[str, Any]:
        """Returns the merge patch of the status that makes the request."""
        termination = TerminationStatus(
            mode=self.mode,
            request_id=self.request_id,
            requested_at=requested_at,
            export_name=self.export_name,
            reason=self.reason,
        )
        return {"termination": termination.to_json()}


@dataclass(frozen=True)
class RequestExport:
    """Ask the running driver for an export-only snapshot: written to ``status.exportRequest``.

    Attributes:
        name: Export name.
        request_id: Unique id of the request.
    """

    name: str
    request_id: str

    def status_patch(self, requested_at: datetime) -> dict[str, Any]:
        """Returns the merge patch of the status that makes the request."""
        request = ExportRequestStatus(
            name=self.name, request_id=self.request_id, requested_at=requested_at
        )
        return {"exportRequest": request.to_json()}


@dataclass(frozen=True)
class CreateDriverPod:
    """Create the driver Pod of a new execution (its id is already in the status).

    Attributes:
        pod_name: Name of the Pod.
        execution_id: The execution's fencing token.
        attempt: Sequence number of the execution.
        initial_snapshot_name: Restore from this exported snapshot (the job has none of its own
            and the user named one); None to restore from the execution record, if it points
            anywhere.
    """

    pod_name: str
    execution_id: str
    attempt: int
    initial_snapshot_name: str | None


@dataclass(frozen=True)
class DeleteDriverPod:
    """Delete a driver Pod; its executors go with it (owner references).

    Attributes:
        pod_name: Name of the Pod.
        at_once: Delete it without a grace period (``gracePeriodSeconds: 0``): the API forgets
            the Pod at once, whether or not its node confirms that its containers stopped.
            Only for a Pod whose node stopped reporting; fencing stops the driver if it runs.
    """

    pod_name: str
    at_once: bool = False


@dataclass(frozen=True)
class CreateUpgradeCheckPod:
    """Create the Pod that checks, in the changed spec's image, that its pipeline can restore
    the restore point (``snapshot validate --pipeline``), before the running execution is
    asked to stop for the change (:mod:`~snapshot_operator.reconcile.upgrade_check`).

    Attributes:
        pod_name: Name of the Pod.
        spec_hash: The execution fingerprint of the spec it checks.
        map_names: The maps the job's snapshots are in, the restore point's first: the check
            takes the newest snapshot it finds there when it looks (a running job rewrites
            its maps every interval).
    """

    pod_name: str
    spec_hash: str
    map_names: tuple[str, ...]


@dataclass(frozen=True)
class DeleteUpgradeCheckPod:
    """Delete an upgrade check's Pod, once it has answered or its spec is gone.

    Attributes:
        pod_name: Name of the Pod.
    """

    pod_name: str


@dataclass(frozen=True)
class CopySnapshotToExport:
    """Copy the restore point of a suspended job to an export map and validate the copy.

    On success the executor appends the export to ``status.exportedSnapshots`` (terminal
    false); copying again over a partial copy is safe, the validation record is written last.

    Attributes:
        source_map: The map holding the restore point.
        snapshot_id: The restore point's snapshot id.
        export_name: Export name.
        export_map: The map to copy to.
    """

    source_map: str
    snapshot_id: int
    export_name: str
    export_map: str


@dataclass(frozen=True)
class DeleteSnapshotMaps:
    """Destroy the job's automatic snapshot maps; exports are kept.

    Attributes:
        map_names: The maps to destroy.
    """

    map_names: tuple[str, ...]


@dataclass(frozen=True)
class DeleteDurableCopies:
    """Delete a deleted job's periodic durable copies (``spec.durableStorage``'s
    ``snapshotCopyIntervalSeconds``): nothing can restore them once the job is gone. Exports'
    copies are kept, as the exports are.

    The outcome (deleted, or kept because the operator cannot reach or may not write the
    bucket) is known only once tried, so the executor reports it in an Event.

    Attributes:
        map_name: The copies' map name (``__sj.copy.<job uid>``).
        storage: The job's own durable storage; None for the installation's.
    """

    map_name: str
    storage: DurableStorageSpec | None


@dataclass(frozen=True)
class EmitEvent:
    """Emit a Kubernetes Event on the SnapshotJob.

    Attributes:
        reason: One of the fixed reasons; it also gives the type.
        message: Capitalised, key=value context, no trailing period.
    """

    reason: EventReason
    message: str

    @property
    def event_type(self) -> EventType:
        """Normal or Warning."""
        return self.reason.event_type


@dataclass(frozen=True)
class RemoveFinalizer:
    """Let the API server delete the SnapshotJob: its cleanup is done."""


@dataclass(frozen=True)
class Requeue:
    """Decide again after a delay, even if nothing changes.

    Attributes:
        after_seconds: The delay.
    """

    after_seconds: float


@dataclass(frozen=True)
class KeepExport:
    """Make sure a deleted job's export has a SnapshotJobExport that outlives the job.

    The export reconcile creates an object for every export the job lists, but it runs before
    the job's decision and may miss one listed since; once the job is gone nothing would create
    it, and the export would have no object to find, restore exactly (its ``jobUid`` and
    ``snapshotId``) or dispose of. So the deletion asks for it itself, before the job's maps
    and its finalizer go: created if absent, its status written completed if it is not. It has
    no owner reference, so the job's garbage collection does not take it.

    Attributes:
        exported: The export as the job's status lists it.
        dispose_on_delete: The object's ``spec.disposeOnDelete``.
    """

    exported: ExportedSnapshot
    dispose_on_delete: bool


Action = (
    PatchStatus
    | RequestTermination
    | RequestExport
    | CreateDriverPod
    | DeleteDriverPod
    | CreateUpgradeCheckPod
    | DeleteUpgradeCheckPod
    | CopySnapshotToExport
    | DeleteSnapshotMaps
    | DeleteDurableCopies
    | EmitEvent
    | RemoveFinalizer
    | Requeue
    | KeepExport
)
"""Every kind of action."""


def status_writes(
    actions: Sequence[Action], start: int, now: datetime
) -> list[tuple[Action, dict[str, Any]]]:
    """The status writes from ``actions[start]`` on that can share one merge patch.

    A run of ``PatchStatus``, ``RequestTermination`` and ``RequestExport`` ends at the first
    other action or at a write that touches a field an earlier one of the run touched (merge
    patches of the same field would not compose into one). Empty if ``actions[start]`` is not
    a status write.
    """
    writes: list[tuple[Action, dict[str, Any]]] = []
    touched: set[str] = set()
    for action in actions[start:]:
        match action:
            case PatchStatus(patch=patch):
                part = dict(patch)
            case RequestTermination() | RequestExport():
                part = action.status_patch(now)
            case _:
                break
        if touched & part.keys():
            break
        touched |= part.keys()
        writes.append((action, part))
    return writes


_STATUS_ONLY = (PatchStatus, RequestTermination, RequestExport, EmitEvent, Requeue)


def acts_beyond_the_status(actions: Sequence[Action]) -> bool:
    """Whether the actions do more than write the job's status, emit Events and requeue.

    A decision that only does those may be made on a view whose older Pods come from a cache
    (:func:`snapshot_operator.observing._first_look_pods`); any other action (a Pod created
    or deleted, maps or copies destroyed, a snapshot copied, the finalizer released) depends
    on every Pod, so it is decided again on a consistent list.
    """
    return any(not isinstance(action, _STATUS_ONLY) for action in actions)
