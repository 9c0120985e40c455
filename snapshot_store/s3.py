"""The snapshot store in object storage, through the S3 API: durable copies of snapshots.

Why: Hazelcast keeps snapshots in its members' memory, so losing the whole store (its
StatefulSet deleted, every member restarted) loses every snapshot and every export. A copy in
object storage outlives it. The copy has the same keys and the same validation record as in
Hazelcast, so the protocol's own checks (:func:`~snapshot_protocol.chunks.validate_snapshot`,
:func:`~snapshot_protocol.chunks.verify_chunk`) apply to it unchanged.

Layout, under a bucket and an optional prefix, one object per key of the snapshot map::

    <prefix>/<map name>/<snapshotId>/<operator>/<partition>/<seq>   a chunk
    <prefix>/<map name>/<snapshotId>/validation-record              its validation record (JSON)

Why no indeterminate writes here, unlike Hazelcast: an S3 PUT is atomic (an object is whole or
absent) and read-after-write consistent (once the PUT returned, every GET and LIST sees it), so
a PUT that returned is durable. A PUT that failed or timed out may or may not have landed; that
is a failed write like any other, and a stray object of a failed copy is never read as a
snapshot, because its validation record, written last, is missing or lists only what was
written. The client sends a checksum of every body (botocore's flexible checksums) that the
server verifies, and every chunk read is verified against the validation record's xxh3.
"""

from __future__ import annotations

import json
import logging
from collections import deque
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from functools import partial
from typing import TYPE_CHECKING

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from snapshot_protocol.chunks import (
    ChunkKey,
    ValidationRecord,
    discarded_keys,
    keys_of_snapshots,
    parse_validation_record,
    validation_record_id,
    validation_record_key,
)
from snapshot_protocol.errors import SnapshotStoreError

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client
    from mypy_boto3_s3.type_defs import ObjectIdentifierTypeDef

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 16
"""Requests in flight at once: S3 serves many connections, each request costs a round trip."""

READ_AHEAD_WINDOWS = 2
"""How many windows of chunks a streamed read holds ahead of its consumer: two keep the
window full while the consumer verifies or writes, and bound the memory to 32 chunks."""

_DELETE_BATCH = 1000
"""The most keys one DeleteObjects request takes."""

_ABSENT = frozenset({"NoSuchKey", "404", "NotFound"})

_Call = Callable[[], bytes | None]


def connect_s3(
    endpoint: str | None,
    region: str,
    *,
    access_key: str | None = None,
    secret_key: str | None = None,
    window: int = DEFAULT_WINDOW,
) -> S3Client:
    """Returns an S3 client for a snapshot store.

    Path-style addressing for a given endpoint (S3-compatible servers such as MinIO and s3proxy
    seldom resolve a bucket as a host name), the standard retry mode (a bounded 3 attempts with
    backoff, on throttling and 5xx), a connection pool as large as the request window, and
    timeouts that turn a server that stopped answering into an error instead of a hang.

    Args:
        endpoint: The S3 API's URL; None for AWS S3 itself.
        region: The region requests are signed for.
        access_key: The access key; None for boto3's own lookup (``AWS_ACCESS_KEY_ID``, ...).
        secret_key: The secret key, with ``access_key``.
        window: Requests the store keeps in flight at once.
    """
    import boto3

    config = Config(
        region_name=region,
        connect_timeout=10,
        read_timeout=60,
        retries={"max_attempts": 3, "mode": "standard"},
        max_pool_connections=max(window, 10),
        s3={"addressing_style": "path"} if endpoint else None,
    )
    client: S3Client = boto3.client(
        "s3",
        endpoint_url=endpoint,
        aws_access_key_id=access_key,
        aws_secret_access_key=secret_key,
        config=config,
    )
    return client


class S3SnapshotStore:
    """The :class:`~snapshot_protocol.ports.SnapshotStore` port on an S3 bucket.

    Args:
        client: A boto3 S3 client (thread-safe: the window's requests share it).
        bucket: The bucket; it must exist.
        prefix: Where under the bucket this store's maps are ("" for the bucket's root).
        window: Requests in flight at once.
    """

    def __init__(
        self, client: S3Client, bucket: str, prefix: str = "", window: int = DEFAULT_WINDOW
    ) -> None:
        self._client = client
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        self._window = window

    def object_key(self, map_name: str, key: str) -> str:
        """The object key of ``key`` (a chunk key or a validation record's) in ``map_name``."""
        return f"{self._map_prefix(map_name)}{key}"

    def _map_prefix(self, map_name: str) -> str:
        if not map_name or "/" in map_name:
            raise ValueError(f"A map name is one path segment without '/': {map_name!r}")
        return f"{self.prefix}/{map_name}/" if self.prefix else f"{map_name}/"

    # --- writes -------------------------------------------------------------------------------

    def put_chunk(self, map_name: str, key: ChunkKey, data: bytes) -> None:
        """Stores one chunk with one PUT."""
        self.put_chunks(map_name, [(key, data)])

    def put_chunks(
        self, map_name: str, chunks: Iterable[tuple[ChunkKey, bytes | bytearray]]
    ) -> None:
        """Stores chunks with parallel PUTs; every PUT has ended when this returns or raises.

        Raises:
            SnapshotStoreError: If any PUT failed (naming the first that did).
        """
        self._run_windowed(
            map_name,
            "put",
            (
                (str(key), partial(self._put, map_name, str(key), bytes(data)))
                for key, data in chunks
            ),
        )

    def put_validation_record(self, map_name: str, record: ValidationRecord) -> None:
        """Stores the snapshot's validation record, after its chunks (the copy then counts)."""
        payload = json.dumps(record.to_dict(), separators=(",", ":")).encode()
        self._put(map_name, validation_record_key(record.snapshot_id), payload)

    def discard(
        self, map_name: str, through_snapshot_id: int, keep: Sequence[ValidationRecord] = ()
    ) -> None:
        """Deletes the objects of snapshots ``<= through_snapshot_id`` from the map's prefix,
        but those of ``keep`` (:func:`~snapshot_protocol.chunks.discarded_keys`).

        Raises:
            SnapshotStoreError: If the listing or a deletion failed.
        """
        doomed = discarded_keys(self._keys(map_name), through_snapshot_id, keep)
        self._delete(map_name, doomed)
        log.info(
            "Discarded snapshots bucket=%s map=%s throughSnapshotId=%d objects=%d",
            self.bucket,
            map_name,
            through_snapshot_id,
            len(doomed),
        )

    def discard_snapshots(self, map_name: str, snapshot_ids: Sequence[int]) -> None:
        """Deletes every object of the named snapshots from the map's prefix (export maps).

        Raises:
            SnapshotStoreError: If the listing or a deletion failed.
        """
        doomed = keys_of_snapshots(self._keys(map_name), snapshot_ids)
        self._delete(map_name, doomed)
        log.info(
            "Discarded snapshots bucket=%s map=%s snapshotIds=%s objects=%d",
            self.bucket,
            map_name,
            ",".join(str(snapshot_id) for snapshot_id in snapshot_ids),
            len(doomed),
        )

    def _delete(self, map_name: str, doomed: Sequence[str]) -> None:
        for start in range(0, len(doomed), _DELETE_BATCH):
            batch = doomed[start : start + _DELETE_BATCH]
            objects: list[ObjectIdentifierTypeDef] = [
                {"Key": self.object_key(map_name, key)} for key in batch
            ]
            with _translated(self.bucket, map_name, "delete"):
                answer = self._client.delete_objects(
                    Bucket=self.bucket, Delete={"Objects": objects, "Quiet": True}
                )
            errors = answer.get("Errors") or []
            if errors:
                first = errors[0]
                raise SnapshotStoreError(
                    f"Failed to delete {len(errors)} objects of map {map_name} in bucket "
                    f"{self.bucket}, e.g. '{first.get('Key')}': {first.get('Code')} "
                    f"{first.get('Message')}"
                )

    # --- reads --------------------------------------------------------------------------------

    def get_validation_record(self, map_name: str, snapshot_id: int) -> ValidationRecord | None:
        """Snapshot ``snapshot_id``'s validation record, or None if the map has none for it.

        Raises:
            UnreadableFormat: If the record is of another format.
            ValueError: If the record is malformed.
            SnapshotStoreError: If it could not be read.
        """
        payload = self._get(map_name, validation_record_key(snapshot_id), absent_ok=True)
        return None if payload is None else parse_validation_record(payload)

    def latest_snapshot_id(self, map_name: str) -> int | None:
        """The highest snapshot id with a validation record under the map's prefix, or None."""
        return max(self.snapshot_ids(map_name), default=None)

    def snapshot_ids(self, map_name: str) -> list[int]:
        """Every snapshot id with a validation record under the map's prefix, ascending."""
        found = {validation_record_id(key) for key in self._keys(map_name)}
        return sorted(snapshot_id for snapshot_id in found if snapshot_id is not None)

    def missing_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[ChunkKey]:
        """Those of ``keys`` that have no object, from one listing of the map's prefix."""
        present = set(self._keys(map_name))
        return [key for key in keys if str(key) not in present]

    def read_chunk(self, map_name: str, key: ChunkKey) -> bytes:
        """One chunk's value, unverified."""
        return self.read_chunks(map_name, [key])[0]

    def read_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[bytes]:
        """Chunk values in the order of ``keys``, read with parallel GETs.

        Raises:
            SnapshotStoreError: If a chunk is absent or could not be read.
        """
        values = self._run_windowed(
            map_name,
            "get",
            ((str(key), partial(self._get, map_name, str(key))) for key in keys),
        )
        # _get raises for an absent chunk, and any failure was raised above.
        return [value for value in values if value is not None]

    def iter_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> Generator[bytes, None, None]:
        """Chunk values in the order of ``keys``, with ``window`` GETs in flight throughout.

        At most :data:`READ_AHEAD_WINDOWS` windows of chunks are read ahead of the consumer,
        which bounds the memory held. Closing the iterator early (or a failed GET, raised when
        its chunk's turn comes) cancels the GETs not started and waits for those in flight.

        Raises:
            SnapshotStoreError: If a chunk is absent or could not be read.
        """
        ahead = self._window * READ_AHEAD_WINDOWS
        remaining = iter(keys)
        with ThreadPoolExecutor(self._window, thread_name_prefix="s3-store-read") as pool:
            pending: deque[Future[bytes]] = deque()

            def submit_next() -> None:
                key = next(remaining, None)
                if key is not None:
                    pending.append(pool.submit(self._get_chunk, map_name, str(key)))

            try:
                for _ in range(ahead):
                    submit_next()
                while pending:
                    value = pending.popleft().result()
                    submit_next()
                    yield value
            finally:
                for future in pending:
                    future.cancel()

    # --- plumbing -----------------------------------------------------------------------------

    def _put(self, map_name: str, key: str, body: bytes) -> None:
        with _translated(self.bucket, map_name, f"put '{key}'"):
            self._client.put_object(
                Bucket=self.bucket, Key=self.object_key(map_name, key), Body=body
            )

    def _get_chunk(self, map_name: str, key: str) -> bytes:
        value = self._get(map_name, key)
        if value is None:  # _get raises for an absent object unless told otherwise
            raise SnapshotStoreError(f"Chunk '{key}' of map {map_name} has no value")
        return value

    def _get(self, map_name: str, key: str, *, absent_ok: bool = False) -> bytes | None:
        try:
            answer = self._client.get_object(Bucket=self.bucket, Key=self.object_key(map_name, key))
            return answer["Body"].read()
        except ClientError as error:
            if _error_code(error) in _ABSENT:
                if absent_ok:
                    return None
                raise SnapshotStoreError(
                    f"Chunk '{key}' is missing from map {map_name} in bucket {self.bucket}"
                ) from error
            raise _translate(error, self.bucket, map_name, f"get '{key}'") from error
        except BotoCoreError as error:
            raise _translate(error, self.bucket, map_name, f"get '{key}'") from error

    def _keys(self, map_name: str) -> Iterator[str]:
        """Every key under the map's prefix, relative to it."""
        start = self._map_prefix(map_name)
        paginator = self._client.get_paginator("list_objects_v2")
        with _translated(self.bucket, map_name, "list keys"):
            for page in paginator.paginate(Bucket=self.bucket, Prefix=start):
                for entry in page.get("Contents") or []:
                    yield entry["Key"][len(start) :]

    def _run_windowed(
        self, map_name: str, what: str, calls: Iterable[tuple[str, _Call]]
    ) -> list[bytes | None]:
        """Runs the calls ``window`` at a time; waits for every one even after a failure, so
        no request is still in flight when the caller decides; then raises the first error."""
        futures: list[tuple[str, Future[bytes | None]]] = []
        with ThreadPoolExecutor(self._window, thread_name_prefix="s3-store") as pool:
            for key, call in calls:
                futures.append((key, pool.submit(call)))
        results: list[bytes | None] = []
        first_error: BaseException | None = None
        for key, future in futures:
            error = future.exception()
            if error is not None:
                first_error = first_error or error
                log.debug(
                    "S3 request failed map=%s what=%s key=%s error=%s", map_name, what, key, error
                )
                results.append(None)
            else:
                results.append(future.result())
        if first_error is not None:
            raise first_error
        return results


def _error_code(error: ClientError) -> str:
    return str(error.response.get("Error", {}).get("Code", ""))


def _translate(error: Exception, bucket: str, map_name: str, what: str) -> SnapshotStoreError:
    code = f" {_error_code(error)}" if isinstance(error, ClientError) else ""
    return SnapshotStoreError(
        f"Failed to {what} in map {map_name} of bucket {bucket}:{code} {error}"
    )


@contextmanager
def _translated(bucket: str, map_name: str, what: str) -> Iterator[None]:
    """Turns boto errors raised inside the block into the protocol's store errors."""
    try:
        yield
    except (ClientError, BotoCoreError) as error:
        raise _translate(error, bucket, map_name, what) from error
