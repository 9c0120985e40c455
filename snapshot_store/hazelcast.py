"""The snapshot store on Hazelcast: snapshot data maps that fail on indeterminate writes.

Hazelcast's IMap is AP: by default a put whose backup was never acknowledged still reports
success, and a snapshot written that way can silently lose a chunk when the owner dies
(docs/concepts/protocol.md, "Why the protocol exists"). The client here is created with
``fail_on_indeterminate_operation_state=True`` and backup acks sent to the client, so every
single-key write either reached all sync backups or raises ``IndeterminateOperationStateError``,
which this adapter turns into :class:`IndeterminateChunkWrite` for the protocol core.

Only single-key operations honour the flag (``put_all`` and ``clear`` do not), so chunks go
out as single-key ``set`` calls, issued asynchronously and in parallel up to a window: that
keeps the write rate at what the client and cluster can do while every chunk keeps its own
determinate outcome.
"""

from __future__ import annotations

import json
import logging
import socket
from collections import deque
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from hazelcast.client import HazelcastClient
from hazelcast.errors import HazelcastError, IndeterminateOperationStateError
from hazelcast.future import Future

from snapshot_protocol.chunks import (
    LEGACY_VALIDATION_RECORD_KEY,
    ChunkKey,
    ValidationRecord,
    discarded_keys,
    keys_of_snapshots,
    parse_validation_record,
    validate_snapshot,
    validation_record_id,
    validation_record_key,
    verify_chunk,
)
from snapshot_protocol.errors import IndeterminateChunkWrite, SnapshotStoreError

log = logging.getLogger(__name__)

DEFAULT_WINDOW = 32
"""Chunk operations in flight at once; enough to keep 3 members busy from one client."""

SOCKET_BUFFER_BYTES = 4 * 1024 * 1024
"""Socket buffers for chunk traffic. The client's default (128 kB) makes its reactor send a
1 MiB chunk in eight loop turns; measured with bench/snapshot_store.py, 4 MiB buffers raise
single-key write throughput several-fold on loopback."""

SOCKET_OPTIONS = [
    (socket.SOL_SOCKET, socket.SO_SNDBUF, SOCKET_BUFFER_BYTES),
    (socket.SOL_SOCKET, socket.SO_RCVBUF, SOCKET_BUFFER_BYTES),
]


CONNECT_TIMEOUT_S = 20.0
"""How long a client tries to reach a member, at start or after losing every connection,
before it gives up (and shuts down). The client's default is for ever: a driver started while
the store is down, or cut off from it, would hang instead of failing with a message."""

HEARTBEAT_TIMEOUT_S = 15.0
"""How long a member may stay silent before the client closes its connection (the client's
default is 60 s). Behind a network cut nothing closes the connection, so this is how soon a
driver learns that it reaches fewer members (split-brain protection,
docs/concepts/partitions.md)."""

INVOCATION_TIMEOUT_S = 20.0
"""How long one operation (a chunk put, a key-set query), retries included, may take before
it fails (the client's default is 120 s). Just over the heartbeat timeout: the operation in
flight when a cut sets in fails once the client has dropped the silent connection (between
15 and 20 s after the cut), instead of retrying until the client gives up reconnecting, so
a cut-off driver sees its store lost and stops in bounded time (docs/concepts/partitions.md). A
snapshot whose write times out fails cleanly and the next one is tried."""


def connect(
    members: Sequence[str],
    cluster_name: str,
    *,
    backup_timeout_s: float = 5.0,
    **options: Any,
) -> HazelcastClient:
    """Connect a client configured for snapshot data.

    Args:
        members: ``host:port`` addresses to start discovery from.
        cluster_name: The cluster's name.
        backup_timeout_s: How long the client waits for backup acks before the write is
            indeterminate; keep it equal to the members'
            ``hazelcast.operation.backup.timeout.millis``.
        **options: Further ``HazelcastClient`` options.

    Returns:
        A connected client with smart routing, backup acks to the client and
        fail-on-indeterminate on.

    Raises:
        SnapshotStoreError: If no member could be reached within the connect timeout.
    """
    settings: dict[str, Any] = {
        "cluster_name": cluster_name,
        "cluster_members": list(members),
        "smart_routing": True,
        "backup_ack_to_client_enabled": True,
        "operation_backup_timeout": backup_timeout_s,
        "fail_on_indeterminate_operation_state": True,
        "socket_options": SOCKET_OPTIONS,
        "cluster_connect_timeout": CONNECT_TIMEOUT_S,
        "heartbeat_timeout": HEARTBEAT_TIMEOUT_S,
        "invocation_timeout": INVOCATION_TIMEOUT_S,
    }
    settings.update(options)
    try:
        return HazelcastClient(**settings)
    except HazelcastError as error:
        raise SnapshotStoreError(
            f"no member of the store answered members={','.join(members)} "
            f"clusterName={cluster_name}: {error}"
        ) from error


class HazelcastSnapshotStore:
    """The :class:`~snapshot_protocol.ports.SnapshotStore` port on a Hazelcast cluster.

    Args:
        client: A client made by :func:`connect` (fail-on-indeterminate on).
        window: Chunk operations in flight at once.
    """

    def __init__(self, client: HazelcastClient, window: int = DEFAULT_WINDOW) -> None:
        # The client exposes its configuration only privately; a wrongly configured client
        # would make every snapshot silently corruptible, so it is worth the peek.
        if not client._config.fail_on_indeterminate_operation_state:
            raise ValueError(
                "The snapshot store needs a client with fail_on_indeterminate_operation_state"
                "=True; use snapshot_store.hazelcast.connect()"
            )
        self._client = client
        self._window = window

    def _map(self, map_name: str) -> Any:
        # Opening a map not seen before is a remote call; a client that lost its members
        # (a driver stopped past the heartbeat timeout) fails it like any other operation.
        with _translated(map_name, "open map"):
            return self._client.get_map(map_name)

    # --- membership ---------------------------------------------------------------------------

    def reachable_members(self) -> int:
        """Returns the size of the member list while the client is connected, else 0.

        The member list is the view of a member the client is connected to, so during a
        partition it is that side's, once the members noticed the split; the client drops the
        connections to members behind a cut after :data:`HEARTBEAT_TIMEOUT_S` and takes the
        list from a member it still reaches. (:class:`~snapshot_protocol.ports.StoreMembership`.)
        """
        # Connections are only visible privately; without one, the member list is stale.
        if not self.running or not self._client._connection_manager.active_connections:
            return 0
        return len(self._client.cluster_service.get_members())

    @property
    def running(self) -> bool:
        """Whether the client still runs (it shuts down after CONNECT_TIMEOUT_S without a
        member)."""
        return bool(self._client.lifecycle_service.is_running())

    # --- writes -------------------------------------------------------------------------------

    def clear(self, map_name: str) -> None:
        """Remove every entry of a map (not fail-on-indeterminate: entries may reappear).

        For maps no execution writes to, like an export map the operator copies into; the
        protocol itself only ever :meth:`discard`s.
        """
        with _translated(map_name, "clear"):
            self._map(map_name).clear().result()

    def discard(
        self, map_name: str, through_snapshot_id: int, keep: Sequence[ValidationRecord] = ()
    ) -> None:
        """Remove the entries of snapshots ``<= through_snapshot_id`` but those of ``keep``,
        with single-key deletes.

        One key-set query finds them; entries without a snapshot id (none are written) stay.
        """
        target = self._map(map_name)
        with _translated(map_name, "list keys"):
            keys = [str(key) for key in target.key_set().result()]
        doomed = discarded_keys(keys, through_snapshot_id, keep)
        self._run_windowed(map_name, "delete", ((key, target.delete(key)) for key in doomed))

    def discard_snapshots(self, map_name: str, snapshot_ids: Sequence[int]) -> None:
        """Remove every entry of the named snapshots, with single-key deletes (export maps)."""
        target = self._map(map_name)
        with _translated(map_name, "list keys"):
            keys = [str(key) for key in target.key_set().result()]
        doomed = keys_of_snapshots(keys, snapshot_ids)
        self._run_windowed(map_name, "delete", ((key, target.delete(key)) for key in doomed))

    def put_chunk(self, map_name: str, key: ChunkKey, data: bytes | bytearray) -> None:
        """Store one chunk with a single-key ``set``."""
        self.put_chunks(map_name, [(key, data)])

    def put_chunks(
        self, map_name: str, chunks: Iterable[tuple[ChunkKey, bytes | bytearray]]
    ) -> None:
        """Store chunks with single-key ``set`` calls in parallel, each determinate.

        Raises:
            IndeterminateChunkWrite: If any put may not have reached all sync backups; the
                snapshot has then failed (docs/concepts/protocol.md, taking step 4).
            SnapshotStoreError: If any put failed.
        """
        target = self._map(map_name)
        self._run_windowed(
            map_name,
            "put",
            ((str(key), target.set(str(key), _as_byte_array(data))) for key, data in chunks),
        )

    def put_validation_record(self, map_name: str, record: ValidationRecord) -> None:
        """Store the map's validation record with a single-key ``set`` (protocol taking step 5)."""
        payload = bytearray(json.dumps(record.to_dict(), separators=(",", ":")).encode())
        with _translated(map_name, "put validation record"):
            self._map(map_name).set(validation_record_key(record.snapshot_id), payload).result()

    def destroy(self, map_name: str) -> None:
        """Remove a map with its data, e.g. a deleted job's snapshot maps."""
        with _translated(map_name, "destroy"):
            self._map(map_name).destroy()

    # --- reads --------------------------------------------------------------------------------

    def get_validation_record(self, map_name: str, snapshot_id: int) -> ValidationRecord | None:
        """Snapshot ``snapshot_id``'s validation record, or None if the map has none for it.

        A map written by format 1 has one record under a fixed key; it is read only so that
        its format is reported (``UnreadableFormat``) instead of the snapshot looking lost.

        Raises:
            UnreadableFormat: If the record is of another format.
            ValueError: If the record is malformed.
        """
        target = self._map(map_name)
        with _translated(map_name, "get validation record"):
            payload = target.get(validation_record_key(snapshot_id)).result()
            if payload is None:
                payload = target.get(LEGACY_VALIDATION_RECORD_KEY).result()
        return None if payload is None else parse_validation_record(payload)

    def latest_snapshot_id(self, map_name: str) -> int | None:
        """The highest snapshot id with a validation record in the map, or None."""
        return max(self.snapshot_ids(map_name), default=None)

    def snapshot_ids(self, map_name: str) -> list[int]:
        """Every snapshot id with a validation record in the map, ascending."""
        with _translated(map_name, "list keys"):
            keys = self._map(map_name).key_set().result()
        return sorted(
            found for key in keys if (found := validation_record_id(str(key))) is not None
        )

    def missing_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[ChunkKey]:
        """Those of ``keys`` that are not in the map, from one key-set query of every owner.

        One multi-partition call instead of a ``contains_key`` per chunk; it reads the same
        owner replicas, and stray keys of other snapshots only make the set a little larger.
        """
        with _translated(map_name, "list keys"):
            present = set(self._map(map_name).key_set().result())
        return [key for key in keys if str(key) not in present]

    def read_chunk(self, map_name: str, key: ChunkKey) -> bytes:
        """One chunk's value."""
        return bytes(self.read_chunks(map_name, [key])[0])

    def read_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[bytearray]:
        """Chunk values in the order of ``keys``, read with parallel single-key ``get`` calls.

        The values are the client's own buffers, handed over without a copy: copying every
        chunk once more cost about an eighth of the restore throughput (bench/snapshot_store.py).

        Raises:
            SnapshotStoreError: If a chunk is absent or could not be read.
        """
        target = self._map(map_name)
        values = self._run_windowed(map_name, "get", ((str(k), target.get(str(k))) for k in keys))
        for key, value in zip(keys, values, strict=True):
            if value is None:
                raise SnapshotStoreError(f"Chunk '{key}' is missing from map {map_name}")
        return values

    def copy_snapshot(self, source_map: str, target_map: str, snapshot_id: int) -> ValidationRecord:
        """Copy a validated snapshot into another map, then validate the copy.

        This is how a suspended job's last snapshot becomes an export. Jet does it with a copy
        job whose writes can be lost silently; here every chunk read is verified against its
        checksum, every put is a strict single-key put, and the copy is validated before it
        counts.

        Raises:
            SnapshotUnusable: If the source or, after copying, the target fails validation, or
                a chunk does not match its checksum (SnapshotCorrupted naming it).
            IndeterminateChunkWrite: If a put of the copy was indeterminate.
        """
        record = validate_snapshot(self, source_map, snapshot_id)
        self.clear(target_map)
        chunks = list(record.chunks)
        for start in range(0, len(chunks), self._window):
            batch = chunks[start : start + self._window]
            values = self.read_chunks(source_map, [chunk.key for chunk in batch])
            for chunk, value in zip(batch, values, strict=True):
                verify_chunk(source_map, snapshot_id, chunk, value)
            self.put_chunks(target_map, zip([chunk.key for chunk in batch], values, strict=True))
        self.put_validation_record(target_map, record)
        return validate_snapshot(self, target_map, snapshot_id)

    # --- plumbing -----------------------------------------------------------------------------

    def _run_windowed(
        self, map_name: str, what: str, operations: Iterable[tuple[str, Future[Any]]]
    ) -> list[Any]:
        """Keep up to ``window`` operations in flight; return results in issue order.

        Every operation is waited for even after one failed, so no write is still in flight
        when the caller decides the snapshot's fate; the first failure is then raised.
        """
        results: list[Any] = []
        in_flight: deque[tuple[str, Future[Any]]] = deque()
        first_error: Exception | None = None

        def drain_one() -> None:
            nonlocal first_error
            key, future = in_flight.popleft()
            try:
                results.append(future.result())
            except Exception as exc:
                results.append(None)
                if first_error is None:
                    first_error = _translate(exc, map_name, f"{what} '{key}'")

        try:
            # Issuing an operation can fail at once (a client that has shut down), before
            # it has a future; the ones already issued are still waited for.
            for operation in operations:
                in_flight.append(operation)
                if len(in_flight) >= self._window:
                    drain_one()
        except Exception as exc:
            first_error = first_error or _translate(exc, map_name, what)
        while in_flight:
            drain_one()
        if first_error is not None:
            raise first_error
        return results


def _as_byte_array(data: bytes | bytearray) -> bytearray:
    """The client serialises ``bytearray`` natively (``bytes`` would go through pickle)."""
    return data if isinstance(data, bytearray) else bytearray(data)


def _translate(exc: Exception, map_name: str, what: str) -> Exception:
    if isinstance(exc, IndeterminateOperationStateError):
        return IndeterminateChunkWrite(
            f"Indeterminate {what} in map {map_name}: a sync backup did not acknowledge ({exc})"
        )
    if isinstance(exc, HazelcastError | OSError):
        return SnapshotStoreError(f"Failed to {what} in map {map_name}: {exc}")
    return exc


@contextmanager
def _translated(map_name: str, what: str) -> Iterator[None]:
    """Turn Hazelcast errors raised inside the block into the protocol's store errors."""
    try:
        yield
    except Exception as exc:
        translated = _translate(exc, map_name, what)
        if translated is exc:
            raise
        raise translated from exc
