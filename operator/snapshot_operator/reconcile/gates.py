"""The gates a spec must pass before the decision acts on it: what only the operator can tell.

The CRD's schema and CEL rules reject most bad specs at admission, but some checks need the
job's status or the store's health, which admission cannot see: whether the store may hold a
new execution, whether an export would overwrite the job's own restore point. Each gate
returns why it is closed (for a condition) or None; the decision then leaves the running
execution alone rather than act on a spec it cannot apply. (A ``statePartitions`` change needs
no gate: the runtime re-partitions keyed state when it restores a snapshot.)
"""

from __future__ import annotations

from snapshot_operator.reconcile.observation import StoreHealth
from snapshot_operator.reconcile.plan import Plan, Problem
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionReason,
    ProcessingGuarantee,
    SnapshotJobSpec,
    SnapshotJobStatus,
)


def store_problem(
    spec: SnapshotJobSpec, status: SnapshotJobStatus, store: StoreHealth | None
) -> Problem | None:
    """Returns why no execution may start now, or None if the store allows it."""
    if store is None:
        return Problem(ConditionReason.STORE_UNREACHABLE, "Store health could not be read")
    if not store.cluster_safe:
        return Problem(
            ConditionReason.NOT_CLUSTER_SAFE,
            f"Store is not cluster-safe members={store.member_count}",
        )
    backups = spec.hazelcast.backup_count
    if store.member_count <= backups:
        return Problem(
            ConditionReason.TOO_FEW_MEMBERS,
            f"Store cannot hold the job's backups members={store.member_count} "
            f"backupCount={backups}",
        )
    quorum = status.record().quorum_size
    if spec.split_brain_protection and store.member_count < quorum:
        return Problem(
            ConditionReason.BELOW_QUORUM,
            f"Store has fewer members than the quorum members={store.member_count} "
            f"quorumSize={quorum}",
        )
    return None


def new_export_name(spec: SnapshotJobSpec, status: SnapshotJobStatus) -> str | None:
    """Returns the export the spec asks for and the job has not made yet, if any."""
    export = spec.export_snapshot
    if export is None or export.name is None or status.exported(export.name) is not None:
        return None
    return export.name


def export_problem(spec: SnapshotJobSpec, status: SnapshotJobStatus) -> Problem | None:
    """Returns why the requested export must not be taken (only the operator can tell)."""
    name = new_export_name(spec, status)
    if name is None:
        return None
    message = export_refusal(name, spec, status)
    return None if message is None else Problem(ConditionReason.EXPORT_REJECTED, message)


def export_refusal(name: str, spec: SnapshotJobSpec, status: SnapshotJobStatus) -> str | None:
    """Returns why the job must not take an export of this name, or None if it may.

    One rule for every way of asking: ``spec.exportSnapshot`` (reported on the job) and a
    SnapshotJobExport object (reported on that object, :mod:`snapshot_operator.reconcile.exports`).
    """
    record = status.record()
    if spec.processing_guarantee is ProcessingGuarantee.NONE:
        return f"Export cannot be taken name={name}: processingGuarantee NONE takes no snapshots"
    if name == record.exported_snapshot_name:
        return (
            f"Export would overwrite the job's restore point name={name} "
            f"snapshotId={record.snapshot_id}, choose another name"
        )
    if record.snapshot_id == NO_SNAPSHOT and name == spec.initial_snapshot_name:
        return (
            f"Export would overwrite the snapshot the job starts from name={name}, "
            "choose another name"
        )
    return None


def export_to_take(plan: Plan, spec: SnapshotJobSpec) -> str | None:
    """Returns the export to take now: the one the spec asks for, unless a gate refused it."""
    return None if plan.export_problem else new_export_name(spec, plan.status)
