"""Chunk keys, the validation record, strict validation (docs/protocol.md, restore step 4).

The snapshot maps are the in-memory fakes of ``fakes.py``; validation against a real
Hazelcast cluster that lost data is tested in ``tests/integration/test_protocol_hazelcast.py``.
"""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    ChunkKey,
    ChunkWriter,
    SnapshotCorrupted,
    ValidationRecord,
    validate_snapshot,
)

from .fakes import VALIDATION_KEY, Cluster

pytestmark = pytest.mark.unit

MAP = "__sj.b1.snapshot.uid.0"


def test_chunk_key_layout() -> None:
    key = ChunkKey(12, "state", 3, 1)
    assert str(key) == "12/state/3/1"
    assert ChunkKey.parse("12/state/3/1") == key


@pytest.mark.parametrize("text", ["12/state/3", "x/state/3/1", "12//3/1", "-1/state/0/0"])
def test_chunk_key_rejects_malformed_text(text: str) -> None:
    with pytest.raises(ValueError):
        ChunkKey.parse(text)


def test_operator_names_cannot_contain_a_slash() -> None:
    with pytest.raises(ValueError, match="operator"):
        ChunkKey(1, "a/b", 0, 0)


def record_for(snapshot_id: int, keys: tuple[ChunkKey, ...]) -> ValidationRecord:
    return ValidationRecord(snapshot_id, keys, 10, 3, 1_000, "uid", "fp")


def test_validation_record_round_trip() -> None:
    record = record_for(4, (ChunkKey(4, "source", 0, 0), ChunkKey(4, "state", 1, 0)))
    data = record.to_dict()
    assert data["numChunks"] == 2
    assert data["chunkKeys"] == ["4/source/0/0", "4/state/1/0"]
    assert data["formatVersion"] == 1
    assert ValidationRecord.from_dict(data) == record
    with pytest.raises(ValueError, match="lists 2 chunks but says 3"):
        ValidationRecord.from_dict({**data, "numChunks": 3})


def write_snapshot(cluster: Cluster, snapshot_id: int, chunks: int) -> tuple[ChunkKey, ...]:
    writer = ChunkWriter(cluster.snapshots, MAP, snapshot_id, "state")
    keys = tuple(writer.write(0, seq, b"data", 1).key for seq in range(chunks))
    cluster.snapshots.put_validation_record(MAP, record_for(snapshot_id, keys))
    return keys


def test_complete_snapshot_is_valid() -> None:
    cluster = Cluster()
    cluster.records.record = cluster.records.record.start_new_snapshot(0)
    keys = write_snapshot(cluster, 0, 3)
    assert validate_snapshot(cluster.snapshots, MAP, 0).chunk_keys == keys


def corrupted(cluster: Cluster, snapshot_id: int) -> str:
    with pytest.raises(SnapshotCorrupted) as error:
        validate_snapshot(cluster.snapshots, MAP, snapshot_id)
    assert (error.value.map_name, error.value.snapshot_id) == (MAP, snapshot_id)
    message = str(error.value)
    assert f"Snapshot {snapshot_id} in map '{MAP}' is corrupted" in message
    assert "spec.initialSnapshotName" in message
    return error.value.problem


def test_missing_validation_record() -> None:
    cluster = Cluster()
    assert corrupted(cluster, 0) == "its validation record is missing"


def test_validation_record_of_another_snapshot() -> None:
    cluster = Cluster()
    cluster.records.record = cluster.records.record.start_new_snapshot(0).start_new_snapshot(0)
    write_snapshot(cluster, 1, 1)
    assert corrupted(cluster, 0) == "the map's validation record belongs to snapshot 1"


def test_validation_record_listing_foreign_chunks() -> None:
    cluster = Cluster()
    cluster.snapshots.maps[MAP] = {VALIDATION_KEY: record_for(2, (ChunkKey(1, "state", 0, 0),))}
    assert "lists chunk '1/state/0/0' of another snapshot" in corrupted(cluster, 2)


def test_missing_chunks_are_named() -> None:
    cluster = Cluster()
    cluster.records.record = cluster.records.record.start_new_snapshot(0)
    keys = write_snapshot(cluster, 0, 5)
    for key in keys[:4]:
        del cluster.snapshots.maps[MAP][str(key)]
    assert corrupted(cluster, 0) == (
        "4 of its 5 chunks are missing ('0/state/0/0', '0/state/0/1', '0/state/0/2', ...)"
    )
