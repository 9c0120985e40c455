"""Copying a validated snapshot from one snapshot store to another, verified end to end.

Why here, in the pure core: making an export durable (Hazelcast to object storage) and bringing
a durable export back (object storage to Hazelcast) must be checked exactly like a restore.
The source is validated first (its validation record, every listed chunk present), every chunk
is verified against the size and checksum its validation record lists as it is read, the
validation record is written only after every chunk (a copy cut short has no record, so no
restore takes it for a snapshot), and the copy is validated before it counts. Only the ports
are used, so one function serves any pair of stores, and the protocol's fakes can test it
without I/O.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Generator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing
from typing import Protocol, runtime_checkable

from snapshot_protocol.chunks import (
    ChunkDescriptor,
    ChunkKey,
    ValidationRecord,
    validate_snapshot,
    verify_chunk,
)
from snapshot_protocol.ports import ChunkReader, SnapshotStore

TRANSFER_BATCH = 32
"""Chunks read, verified and written per round: enough to keep a store's parallel puts busy,
few enough that the rounds held at once (:data:`WRITES_IN_FLIGHT` being written, one being
read: at most 96 MiB of 1 MiB chunks) are a bounded buffer."""

WRITES_IN_FLIGHT = 2
"""Rounds being written at once: the last puts of one round overlap the first of the next,
so the target's window stays full instead of draining at the end of every round."""


@runtime_checkable
class BulkChunkReader(Protocol):
    """A store that reads several chunks at once (in parallel); read one by one otherwise."""

    def read_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> Sequence[bytes | bytearray]:
        """Returns the chunks' values in the order of ``keys``."""
        ...


@runtime_checkable
class StreamingChunkReader(Protocol):
    """A store that streams chunks in order with its requests kept in flight across them.

    Reading round by round leaves a store's window half empty at the end of every round,
    while the last requests of the round finish; a remote store (S3) then runs well below
    its bandwidth. A stream keeps the window full from the first chunk to the last.
    """

    def iter_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> Generator[bytes, None, None]:
        """Yields the chunks' values in the order of ``keys``.

        Closing the iterator early (or an error) stops the requests not yet started and waits
        for those in flight, so none is still running when the caller goes on.
        """
        ...


def read_verified(
    store: ChunkReader, map_name: str, snapshot_id: int, chunks: Sequence[ChunkDescriptor]
) -> Generator[tuple[ChunkDescriptor, bytes | bytearray], None, None]:
    """Yields each of ``chunks`` with its value, verified against its size and checksum.

    Streams where the store can (:class:`StreamingChunkReader`), else reads in rounds of
    :data:`TRANSFER_BATCH` (in parallel where it can, :class:`BulkChunkReader`).

    Raises:
        SnapshotCorrupted: If a chunk does not match what the record lists, naming it.
        SnapshotStoreError: If a chunk could not be read.
    """
    if isinstance(store, StreamingChunkReader):
        with closing(store.iter_chunks(map_name, [chunk.key for chunk in chunks])) as values:
            for chunk, streamed in zip(chunks, values, strict=True):
                verify_chunk(map_name, snapshot_id, chunk, streamed)
                yield chunk, streamed
        return
    for start in range(0, len(chunks), TRANSFER_BATCH):
        batch = chunks[start : start + TRANSFER_BATCH]
        batch_values = _read(store, map_name, [chunk.key for chunk in batch])
        for chunk, value in zip(batch, batch_values, strict=True):
            verify_chunk(map_name, snapshot_id, chunk, value)
            yield chunk, value


def transfer_snapshot(
    source: SnapshotStore,
    source_map: str,
    target: SnapshotStore,
    target_map: str,
    snapshot_id: int,
) -> ValidationRecord:
    """Copies snapshot ``snapshot_id`` from ``source_map`` of one store to ``target_map`` of
    another (or of the same one), verifying every chunk, then validates the copy.

    The target map is not cleared first: keys carry their snapshot id, so whatever else the
    target holds is never read as this snapshot, and the caller decides what to discard.

    Args:
        source: The store holding the snapshot.
        source_map: Its map (a prefix, in object storage).
        target: The store to copy it to.
        target_map: The map to copy it into.
        snapshot_id: The snapshot's id, kept in the copy.

    Returns:
        The copy's validation record (the source's, validated again in the target).

    Raises:
        SnapshotCorrupted: If the source fails validation, a chunk does not match its checksum
            (naming the snapshot and the chunk), or the copy fails validation.
        SnapshotIncompatible: If the source's record is of a format this code does not read.
        SnapshotStoreError: If either store could not be read or written.
    """
    record = validate_snapshot(source, source_map, snapshot_id)
    chunks = record.chunks
    # Rounds are written while the next is read and verified: a copy then takes about as
    # long as the slower of the two stores, not their sum. A failed write surfaces before the
    # round after it is written, and leaving the block waits for the last write in flight, so
    # nothing is still being written when this function raises or writes the record.
    with (
        ThreadPoolExecutor(WRITES_IN_FLIGHT, thread_name_prefix="transfer-write") as writer,
        closing(read_verified(source, source_map, snapshot_id, chunks)) as verified,
    ):
        writing: deque[Future[None]] = deque()
        batch: list[tuple[ChunkKey, bytes]] = []
        last = len(chunks) - 1
        for position, (chunk, value) in enumerate(verified):
            batch.append((chunk.key, bytes(value)))
            if len(batch) < TRANSFER_BATCH and position < last:
                continue
            if len(writing) == WRITES_IN_FLIGHT:
                writing.popleft().result()
            writing.append(writer.submit(target.put_chunks, target_map, batch))
            batch = []
        while writing:
            writing.popleft().result()
    target.put_validation_record(target_map, record)
    return validate_snapshot(target, target_map, snapshot_id)


def _read(store: ChunkReader, map_name: str, keys: list[ChunkKey]) -> Sequence[bytes | bytearray]:
    if isinstance(store, BulkChunkReader):
        return store.read_chunks(map_name, keys)
    return [store.read_chunk(map_name, key) for key in keys]
