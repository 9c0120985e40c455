"""The embedded snapshot store in a directory (snapshot_store.directory): the port's contract.

The protocol's own checks run against it unchanged: a snapshot written here validates, a
changed file fails its chunk's checksum, a missing one the validation, and a write that was
cut short is never read as a key. The driver on it, killed and run again, is tested in
``tests/integration/test_laptop_loop.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshot_protocol import ChunkKey, SnapshotCorrupted, validate_snapshot
from snapshot_protocol.chunks import ChunkDescriptor, ValidationRecord, verify_chunk
from snapshot_protocol.errors import SnapshotStoreError
from snapshot_store.directory import DirectorySnapshotStore

pytestmark = pytest.mark.unit

MAP = "__sj.b1.snapshot.job-1.0"


def _write(
    store: DirectorySnapshotStore, snapshot_id: int, values: list[bytes]
) -> ValidationRecord:
    chunks = [(ChunkKey(snapshot_id, "sums", p, 0), value) for p, value in enumerate(values)]
    store.put_chunks(MAP, chunks)
    descriptors = tuple(ChunkDescriptor.of(key, value, 1) for key, value in chunks)
    record = ValidationRecord(
        snapshot_id,
        descriptors,
        sum(len(v) for v in values),
        len(values),
        1_700_000_000_000,
        "job-1",
    )
    store.put_validation_record(MAP, record)
    return record


def test_a_snapshot_validates_and_reads_back(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path / "store")
    record = _write(store, 3, [b"alpha", b"beta"])
    assert validate_snapshot(store, MAP, 3) == record
    assert store.snapshot_ids(MAP) == [3]
    assert store.latest_snapshot_id(MAP) == 3
    values = store.read_chunks(MAP, [c.key for c in record.chunks])
    assert values == [b"alpha", b"beta"]
    for chunk, value in zip(record.chunks, values, strict=True):
        verify_chunk(MAP, 3, chunk, value)
    # One file per key, as the S3 store's objects: a user can see what a snapshot holds.
    assert (tmp_path / "store" / MAP / "3" / "sums" / "0" / "0").read_bytes() == b"alpha"
    assert store.map_names() == [MAP]
    # A new process (a Python worker of a task) sees the same store.
    assert DirectorySnapshotStore(tmp_path / "store").read_chunk(MAP, record.chunks[1].key)


def test_a_changed_file_fails_its_checksum_and_a_deleted_one_the_validation(
    tmp_path: Path,
) -> None:
    store = DirectorySnapshotStore(tmp_path)
    record = _write(store, 1, [b"alpha", b"beta"])
    changed = tmp_path / MAP / "1" / "sums" / "0" / "0"
    changed.write_bytes(b"alphA")
    with pytest.raises(SnapshotCorrupted, match="does not match its checksum"):
        verify_chunk(MAP, 1, record.chunks[0], store.read_chunk(MAP, record.chunks[0].key))
    (tmp_path / MAP / "1" / "sums" / "1" / "0").unlink()
    with pytest.raises(SnapshotCorrupted):
        validate_snapshot(store, MAP, 1)
    assert store.missing_chunks(MAP, list(record.chunk_keys)) == [record.chunks[1].key]
    with pytest.raises(SnapshotStoreError, match="is missing from map"):
        store.read_chunk(MAP, record.chunks[1].key)


def test_a_write_cut_short_is_never_a_key(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path)
    _write(store, 1, [b"alpha"])
    # What a process killed in the middle of a write leaves: a temporary file.
    (tmp_path / MAP / "1" / "sums" / "0" / ".tmp-0.abc").write_bytes(b"al")
    (tmp_path / MAP / "2").mkdir()
    (tmp_path / MAP / "2" / ".tmp-validation-record.abc").write_bytes(b"{")
    assert store.snapshot_ids(MAP) == [1]
    assert store.get_validation_record(MAP, 2) is None
    store.discard(MAP, 1)
    assert store.snapshot_ids(MAP) == []


def test_discard_keeps_newer_and_kept_snapshots_and_removes_empty_directories(
    tmp_path: Path,
) -> None:
    store = DirectorySnapshotStore(tmp_path)
    kept = _write(store, 1, [b"one"])
    _write(store, 2, [b"two"])
    _write(store, 3, [b"three"])
    store.discard(MAP, 2, keep=[kept])
    assert store.snapshot_ids(MAP) == [1, 3]
    assert not (tmp_path / MAP / "2").exists()
    store.discard_snapshots(MAP, [1])
    assert store.snapshot_ids(MAP) == [3]
    store.destroy(MAP)
    assert store.snapshot_ids(MAP) == [] and store.map_names() == []
    store.destroy(MAP)  # a map that is gone is destroyed already


def test_names_that_would_leave_the_map_are_refused(tmp_path: Path) -> None:
    store = DirectorySnapshotStore(tmp_path / "store")
    with pytest.raises(ValueError, match="one path segment"):
        store.snapshot_ids("../elsewhere")
    with pytest.raises(ValueError, match="Not a key"):
        store.read_chunk(MAP, ChunkKey(1, "..", 0, 0))
    assert not (tmp_path / "elsewhere").exists()


def test_a_store_that_cannot_be_written_is_a_store_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    with pytest.raises(SnapshotStoreError, match="Cannot create the store directory"):
        DirectorySnapshotStore(blocker / "store")
    store = DirectorySnapshotStore(tmp_path / "store")
    (tmp_path / "store" / MAP).write_text("a file where the map's directory goes")
    with pytest.raises(SnapshotStoreError, match="Failed to put"):
        store.put_chunk(MAP, ChunkKey(1, "sums", 0, 0), b"x")
