"""The durable gateway over S3: the durable copy of an export the operator made, and disposal.

Drivers write and read most copies (:mod:`spark_runtime.durable`). The operator writes one
kind: the export of a suspended job, which it copies inside the store itself and then on to
object storage, verified, with the same transfer the driver uses. And it deletes copies: an
export's, when a SnapshotJobExport with ``disposeOnDelete`` is deleted, and a deleted job's
periodic copies. It uses the installation's durable
storage (the chart's ``durableStorage``) and the credentials the chart gives the operator's
container from its Secret (boto3 reads ``AWS_ACCESS_KEY_ID`` and ``AWS_SECRET_ACCESS_KEY``);
a copy in another bucket (a job's own ``spec.durableStorage``) is refused rather than guessed
at, and its deletion reports what is left. Tested against a real S3 server by
``tests/integration/test_exports.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapshot_operator.gateways import StoreOperationFailed
from snapshot_operator.snapshot_maps import SnapshotMaps
from snapshot_protocol import SnapshotStoreError, SnapshotUnusable
from snapshot_protocol.export_names import discard_other_jobs_exports
from snapshot_store.s3 import S3SnapshotStore, connect_s3
from snapshotjob_contract import DurableStorageSpec

_EVERY_SNAPSHOT = 2**63 - 1
"""A snapshot id above every real one: discarding through it empties a map's prefix."""


def parse_location(location: str) -> tuple[str, str, str, int]:
    """Splits ``s3://<bucket>/<prefix>/<map>/<snapshotId>`` into its four parts.

    Raises:
        ValueError: If the location is not one a driver writes.
    """
    if not location.startswith("s3://"):
        raise ValueError(f"Not an s3:// location: {location}")
    parts = location.removeprefix("s3://").split("/")
    if len(parts) < 3 or not parts[-1].isdigit():
        raise ValueError(f"Not a durable copy's location s3://<bucket>/<map>/<id>: {location}")
    return parts[0], "/".join(parts[1:-2]), parts[-2], int(parts[-1])


class S3DurableGateway:
    """:class:`snapshot_operator.gateways.DurableGateway` over the installation's bucket.

    Args:
        storage: The installation's durable storage.
        maps: The store's snapshot maps, shared with the store gateway (one client per store).
    """

    def __init__(self, storage: DurableStorageSpec, maps: SnapshotMaps) -> None:
        self._storage = storage
        self._maps = maps
        self._client: Any = None

    @property
    def storage(self) -> DurableStorageSpec:
        """See :attr:`snapshot_operator.gateways.DurableGateway.storage`."""
        return self._storage

    def _bucket(self, prefix: str) -> S3SnapshotStore:
        if self._client is None:
            self._client = connect_s3(self._storage.endpoint, self._storage.region)
        return S3SnapshotStore(self._client, self._storage.bucket, prefix)

    def copy_export(
        self, members: Sequence[str], cluster_name: str, map_name: str, snapshot_id: int
    ) -> str:
        """See :meth:`snapshot_operator.gateways.DurableGateway.copy_export`."""
        bucket = self._bucket(self._storage.prefix)
        try:
            self._maps.transfer(
                members,
                cluster_name,
                source_map=map_name,
                snapshot_id=snapshot_id,
                target=bucket,
                target_map=map_name,
            )
            copy = bucket.get_validation_record(map_name, snapshot_id)
            if snapshot_id > 0 and copy is not None:
                # An export name holds one snapshot, whose chains may reach back to older ids.
                bucket.discard(map_name, snapshot_id - 1, [copy])
            if copy is not None:
                # Nor another job's, whatever its ids (a reused name).
                discard_other_jobs_exports(bucket, map_name, copy.job_uid)
        except (SnapshotStoreError, SnapshotUnusable) as error:
            raise StoreOperationFailed(type(error).__name__, str(error)) from error
        parts = [self._storage.bucket, self._storage.prefix, map_name, str(snapshot_id)]
        return "s3://" + "/".join(part for part in parts if part)

    def discard_job_copies(self, storage: DurableStorageSpec, map_name: str) -> list[int]:
        """See :meth:`snapshot_operator.gateways.DurableGateway.discard_job_copies`."""
        ours = (self._storage.bucket, self._storage.endpoint)
        if (storage.bucket, storage.endpoint) != ours:
            raise StoreOperationFailed(
                "NotOperatorBucket",
                f"Copies are in bucket={storage.bucket} endpoint={storage.endpoint or 'aws'}, the "
                f"operator has credentials for bucket={ours[0]} endpoint={ours[1] or 'aws'} only",
            )
        bucket = self._bucket(storage.prefix)
        try:
            snapshot_ids = bucket.snapshot_ids(map_name)
            # Also the chunks of a copy that never got its validation record.
            bucket.discard(map_name, _EVERY_SNAPSHOT)
        except SnapshotStoreError as error:
            raise StoreOperationFailed(type(error).__name__, str(error)) from error
        return snapshot_ids

    def discard(self, location: str) -> None:
        """See :meth:`snapshot_operator.gateways.DurableGateway.discard`."""
        try:
            bucket, prefix, map_name, snapshot_id = parse_location(location)
        except ValueError as error:
            raise StoreOperationFailed("InvalidLocation", str(error)) from error
        if bucket != self._storage.bucket:
            raise StoreOperationFailed(
                "NotOperatorBucket",
                f"Copy is in bucket={bucket}, the operator has credentials for "
                f"bucket={self._storage.bucket} only; delete location={location} yourself",
            )
        try:
            self._bucket(prefix).discard(map_name, snapshot_id)
        except SnapshotStoreError as error:
            raise StoreOperationFailed(type(error).__name__, str(error)) from error
