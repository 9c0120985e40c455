"""Copies a job's restore point to an export, and the export on to durable storage.

Performs :class:`~snapshot_operator.reconcile.CopySnapshotToExport` for a suspended job: the
store copies and validates, the export is recorded in ``status.exportedSnapshots``, and a copy
the store failed is recorded in ``status.exportFailure`` instead of raised, counted by
:func:`snapshot_operator.reconcile.attempts.next_export_failure`.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from snapshot_operator.gateways import StoreOperationFailed
from snapshot_operator.reconcile import CopySnapshotToExport, Observation
from snapshot_operator.reconcile.attempts import next_export_failure
from snapshot_operator.services import Services, store_of
from snapshotjob_contract import DurableStorageSpec, ExportedSnapshot, SnapshotJobSpec

log = logging.getLogger(__name__)


def copy_to_export(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CopySnapshotToExport,
) -> str:
    """Copies the restore point to the export, then records the export in the status.

    A copy the store failed or that did not validate is recorded in ``status.exportFailure``
    (attempts counted per export name) instead of raised: the decision retries it with backoff
    and gives up after a few attempts, which it can only do if it sees the outcome.

    Returns:
        The job's ``resourceVersion`` after the status write.
    """
    job = observation.job
    spec = observation.spec
    members, cluster = store_of(services, spec if isinstance(spec, SnapshotJobSpec) else None)
    try:
        copied = services.store.copy_snapshot(
            members,
            cluster,
            source_map=action.source_map,
            target_map=action.export_map,
            snapshot_id=action.snapshot_id,
        )
    except StoreOperationFailed as error:
        return _copy_failed(services, observation, version, status, action, error)
    exported = ExportedSnapshot(
        name=action.export_name,
        snapshot_id=copied.snapshot_id,
        num_bytes=copied.num_bytes,
        created_at=services.clock(),
        terminal=False,
        durable_location=_copy_to_durable(services, observation, members, cluster, action),
    )
    kept = [
        entry
        for entry in status.get("exportedSnapshots") or ()
        if entry.get("name") != action.export_name
    ]
    patch = {"exportedSnapshots": [*kept, exported.to_json()]}
    version = services.kube.patch_status(job.namespace, job.name, version, patch)
    status.update(patch)
    log.info(
        "Copied snapshot to export namespace=%s name=%s export=%s snapshotId=%s numBytes=%s",
        job.namespace,
        job.name,
        action.export_name,
        copied.snapshot_id,
        copied.num_bytes,
    )
    return version


def _copy_to_durable(
    services: Services,
    observation: Observation,
    members: Sequence[str],
    cluster: str,
    action: CopySnapshotToExport,
) -> str | None:
    """Copies an export the operator made on to object storage, as a driver does its own.

    Only to the installation's storage, the one the operator has credentials for: a job with
    storage of its own gets no copy of an export taken while suspended (logged). A failed copy
    leaves the export without ``durableLocation``, as a driver's does; it is logged.
    """
    durable = services.durable
    spec = observation.spec
    if durable is None or not isinstance(spec, SnapshotJobSpec):
        return None
    context = f"namespace={observation.job.namespace} name={observation.job.name}"
    if spec.durable_storage is not None and _place(spec.durable_storage) != _place(durable.storage):
        log.warning(
            "Export has no durable copy %s export=%s reason=JobsOwnStorage bucket=%s",
            context,
            action.export_name,
            spec.durable_storage.bucket,
        )
        return None
    try:
        location = durable.copy_export(members, cluster, action.export_map, action.snapshot_id)
    except StoreOperationFailed as error:
        log.warning(
            "Durable copy of the export failed %s export=%s error=%s: %s",
            context,
            action.export_name,
            error.reason,
            error,
        )
        return None
    log.info(
        "Copied export to durable storage %s export=%s location=%s",
        context,
        action.export_name,
        location,
    )
    return location


def _place(storage: DurableStorageSpec) -> tuple[str, str, str | None]:
    """Where copies go: what two storage settings must share to be the same bucket and prefix
    (the copy interval and the Secret's name may differ)."""
    return storage.bucket, storage.prefix, storage.endpoint


def _copy_failed(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CopySnapshotToExport,
    error: StoreOperationFailed,
) -> str:
    """Records a failed copy in ``status.exportFailure``, counting attempts per export."""
    job = observation.job
    failure = next_export_failure(
        status.get("exportFailure") or {},
        action.export_name,
        f"{error.reason}: {error}",
        services.clock(),
    )
    patch = {"exportFailure": failure.to_json()}
    version = services.kube.patch_status(job.namespace, job.name, version, patch)
    status.update(patch)
    log.warning(
        "Copy to export failed namespace=%s name=%s export=%s attempts=%d error=%s",
        job.namespace,
        job.name,
        action.export_name,
        failure.attempts,
        error,
    )
    return version
