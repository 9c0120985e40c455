"""A deleted job's periodic durable copies: deleted where the operator can, named where not.

Why a module of its own: the decision (:mod:`snapshot_operator.reconcile.deletion`) asks for
the deletion, but only the attempt tells how it went. The operator holds credentials for the
installation's bucket only (a job's own ``spec.durableStorage`` has its Secret in the job's
namespace, which the operator does not read), and object storage may be unreachable. Either
way the job's deletion goes on: a finalizer that waited for a bucket the operator can never
write would hold the job for ever. What is left behind is named in a Warning Event, with the
location to delete by hand; nothing is said when there was nothing to delete.
"""

from __future__ import annotations

from snapshot_operator.gateways import DurableGateway, StoreOperationFailed
from snapshot_operator.reconcile import DeleteDurableCopies, EmitEvent, EventReason
from snapshotjob_contract import DurableStorageSpec


def delete_job_copies(
    durable: DurableGateway | None,
    installation: DurableStorageSpec | None,
    action: DeleteDurableCopies,
) -> EmitEvent | None:
    """Deletes the copies the action names; returns the Event that reports it, if any.

    Args:
        durable: The operator's durable gateway; None without durable storage.
        installation: The installation's durable storage (the default of a job's).
        action: Which copies, and the job's own storage if it has one.

    Returns:
        ``DurableCopiesDeleted`` when copies were deleted, ``DurableCopiesKept`` when copies
        may be left (the job copied periodically, or the deletion failed), None otherwise.
    """
    storage = action.storage or installation
    if storage is None:
        return None  # No durable storage: there never were copies.
    location = _location(storage, action.map_name)
    copied = storage.snapshot_copy_interval_seconds is not None
    if durable is None:
        if not copied:
            return None
        return _kept(location, "NoCredentials", "the operator was started without durable storage")
    try:
        snapshot_ids = durable.discard_job_copies(storage, action.map_name)
    except StoreOperationFailed as failure:
        if failure.reason == "NotOperatorBucket" and not copied:
            return None
        return _kept(location, failure.reason, str(failure))
    if not snapshot_ids:
        return None
    return EmitEvent(
        EventReason.DURABLE_COPIES_DELETED,
        f"Deleted the job's periodic durable copies location={location} "
        f"snapshotIds={','.join(map(str, snapshot_ids))}, exports' copies are kept",
    )


def _kept(location: str, reason: str, detail: str) -> EmitEvent:
    return EmitEvent(
        EventReason.DURABLE_COPIES_KEPT,
        f"Durable copies of the deleted job left in place location={location} reason={reason}: "
        f"{detail}; delete them with the bucket's own credentials if they are not wanted",
    )


def _location(storage: DurableStorageSpec, map_name: str) -> str:
    parts = [storage.bucket, storage.prefix, map_name]
    return "s3://" + "/".join(part for part in parts if part) + "/"
