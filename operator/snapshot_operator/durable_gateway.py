"""The durable gateway over S3: disposing of an export's durable copy.

Drivers write and read the copies (:mod:`spark_runtime.durable`); the operator only deletes
one, when a SnapshotJobExport with ``disposeOnDelete`` is deleted. It uses the installation's
durable storage (the chart's ``durableStorage``) and the credentials the chart gives the
operator's container from its Secret (boto3 reads ``AWS_ACCESS_KEY_ID`` and
``AWS_SECRET_ACCESS_KEY``); a copy in another bucket (a job's own ``spec.durableStorage``) is
refused rather than guessed at, and its deletion reports what is left. Tested against a real
S3 server by ``tests/integration/test_exports.py``.
"""

from __future__ import annotations

from typing import Any

from snapshot_operator.gateways import StoreOperationFailed
from snapshot_protocol import SnapshotStoreError
from snapshot_store.s3 import S3SnapshotStore, connect_s3
from snapshotjob_contract import DurableStorageSpec


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
    """

    def __init__(self, storage: DurableStorageSpec) -> None:
        self._storage = storage
        self._client: Any = None

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
        if self._client is None:
            self._client = connect_s3(self._storage.endpoint, self._storage.region)
        try:
            S3SnapshotStore(self._client, bucket, prefix).discard(map_name, snapshot_id)
        except SnapshotStoreError as error:
            raise StoreOperationFailed(type(error).__name__, str(error)) from error
