"""Copying a snapshot between stores (snapshot_protocol.transfer): verified, record last.

Both stores are the in-memory fakes of ``fakes.py``; the copy from Hazelcast to a real S3
server and back is tested in ``tests/integration/test_s3_snapshot_store.py``.
"""

from __future__ import annotations

from collections.abc import Generator, Sequence

import pytest

from snapshot_protocol import ChunkKey, SnapshotCorrupted, validate_snapshot
from snapshot_protocol.chunks import validation_record_key
from snapshot_protocol.errors import SnapshotStoreError
from snapshot_protocol.transfer import TRANSFER_BATCH, StreamingChunkReader, transfer_snapshot

from .fakes import Cluster, Fault, Op
from .snapshots import MAP, write_snapshot

pytestmark = pytest.mark.unit

COPY = "__sj.export.ns.copy"


def _stores(snapshot_id: int, chunks: int) -> tuple[Cluster, Cluster, tuple[ChunkKey, ...]]:
    source, target = Cluster(), Cluster()
    for cluster in (source, target):
        cluster.records.record = cluster.records.record.start_new_snapshot(snapshot_id)
    return source, target, write_snapshot(source, snapshot_id, chunks)


def test_a_copy_has_every_chunk_and_the_same_record() -> None:
    # More chunks than one batch: the copy goes round by round.
    source, target, keys = _stores(0, TRANSFER_BATCH + 5)

    record = transfer_snapshot(source.snapshots, MAP, target.snapshots, COPY, 0)

    assert record == validate_snapshot(source.snapshots, MAP, 0)
    assert validate_snapshot(target.snapshots, COPY, 0) == record
    for key in keys:
        assert target.snapshots.read_chunk(COPY, key) == source.snapshots.read_chunk(MAP, key)
    assert not target.violations


def test_a_corrupted_chunk_stops_the_copy_before_its_record_is_written() -> None:
    source, target, keys = _stores(0, 3)
    source.snapshots.maps[MAP][str(keys[1])] = b"datb"

    with pytest.raises(SnapshotCorrupted) as error:
        transfer_snapshot(source.snapshots, MAP, target.snapshots, COPY, 0)

    assert (error.value.map_name, error.value.snapshot_id) == (MAP, 0)
    assert f"chunk '{keys[1]}' does not match its checksum" in str(error.value)
    # A copy cut short has no validation record: no restore can take it for a snapshot.
    assert validation_record_key(0) not in target.snapshots.maps.get(COPY, {})


def test_a_source_missing_a_chunk_is_refused_before_anything_is_copied() -> None:
    source, target, keys = _stores(0, 3)
    del source.snapshots.maps[MAP][str(keys[2])]

    with pytest.raises(SnapshotCorrupted, match="1 of its 3 chunks are missing"):
        transfer_snapshot(source.snapshots, MAP, target.snapshots, COPY, 0)

    assert not target.snapshots.maps.get(COPY)


def test_a_failed_write_of_the_copy_leaves_it_without_a_record() -> None:
    source, target, _ = _stores(0, 3)
    target.faults.arm([(Op.CHUNK_PUT, 2, Fault.FAILED)])

    with pytest.raises(SnapshotStoreError):
        transfer_snapshot(source.snapshots, MAP, target.snapshots, COPY, 0)

    assert validation_record_key(0) not in target.snapshots.maps.get(COPY, {})
    with pytest.raises(SnapshotCorrupted, match="validation record is missing"):
        validate_snapshot(target.snapshots, COPY, 0)


class _Streaming:
    """The fake store read as a stream (as the S3 store reads), recording how far it went and
    whether the copy closed it."""

    def __init__(self, store: object) -> None:
        self.store = store
        self.read = 0
        self.closed = False

    def __getattr__(self, name: str) -> object:
        return getattr(self.store, name)

    def iter_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> Generator[bytes, None, None]:
        try:
            for key in keys:
                self.read += 1
                yield self.store.read_chunk(map_name, key)  # type: ignore[attr-defined]
        finally:
            self.closed = True


def test_a_streamed_copy_has_every_chunk_and_closes_its_stream() -> None:
    source, target, keys = _stores(0, 2 * TRANSFER_BATCH + 3)
    streaming = _Streaming(source.snapshots)
    assert isinstance(streaming, StreamingChunkReader)

    record = transfer_snapshot(streaming, MAP, target.snapshots, COPY, 0)  # type: ignore[arg-type]

    assert validate_snapshot(target.snapshots, COPY, 0) == record
    for key in keys:
        assert target.snapshots.read_chunk(COPY, key) == source.snapshots.read_chunk(MAP, key)
    assert streaming.read == len(keys)
    assert streaming.closed


def test_a_corrupted_chunk_in_a_stream_stops_the_reads_and_writes_no_record() -> None:
    source, target, keys = _stores(0, 2 * TRANSFER_BATCH)
    source.snapshots.maps[MAP][str(keys[5])] = b"datb"
    streaming = _Streaming(source.snapshots)

    with pytest.raises(SnapshotCorrupted, match="does not match its checksum"):
        transfer_snapshot(streaming, MAP, target.snapshots, COPY, 0)  # type: ignore[arg-type]

    assert streaming.closed, "the stream's requests are stopped before the copy raises"
    assert streaming.read == 6, "nothing is read past the corrupted chunk"
    assert validation_record_key(0) not in target.snapshots.maps.get(COPY, {})
