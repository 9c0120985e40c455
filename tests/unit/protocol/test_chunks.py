"""Chunk keys, validation record, checksums, compatibility (docs/concepts/protocol.md, restore 4).

The snapshot maps are the in-memory fakes of ``fakes.py``; validation against a real
Hazelcast cluster that lost data is tested in ``tests/integration/test_protocol_hazelcast.py``.
"""

from __future__ import annotations

import json

import pytest

from snapshot_protocol import (
    SNAPSHOT_FORMAT_VERSION,
    ChunkDescriptor,
    ChunkKey,
    PipelineShape,
    SnapshotCorrupted,
    SnapshotIncompatible,
    SnapshotRef,
    UnreadableFormat,
    ValidationRecord,
    check_compatible,
    checksum,
    validate_snapshot,
)
from snapshot_protocol.chunks import (
    STANDALONE_FORMAT_VERSION,
    snapshot_id_of_key,
    validation_record_key,
)

from .fakes import Cluster
from .snapshots import MAP, SHAPE, record_for, write_snapshot

pytestmark = pytest.mark.unit


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


def descriptor(key: ChunkKey, data: bytes = b"data") -> ChunkDescriptor:
    return ChunkDescriptor.of(key, data, 1)


def test_validation_record_round_trip() -> None:
    record = record_for(
        4, (descriptor(ChunkKey(4, "source", 0, 0)), descriptor(ChunkKey(4, "state", 1, 0)))
    )
    data = json.loads(json.dumps(record.to_dict()))
    assert data["numChunks"] == 2
    assert data["chunks"][0] == ["4/source/0/0", 4, 1, checksum(b"data")]
    # Without chains, format 2: a release from before chains restores it too.
    assert data["formatVersion"] == STANDALONE_FORMAT_VERSION == 2
    assert SNAPSHOT_FORMAT_VERSION == 3
    assert data["checksumAlgorithm"] == "xxh3-64"
    assert data["pipelineFingerprint"] == SHAPE.fingerprint
    assert ValidationRecord.from_dict(data) == record
    with pytest.raises(ValueError, match="lists 2 chunks but says 3"):
        ValidationRecord.from_dict({**data, "numChunks": 3})


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            {"formatVersion": 1},
            "written in snapshot format 1 and this runtime reads formats 2 and 3",
        ),
        ({"checksumAlgorithm": "crc32"}, "checksums are 'crc32'"),
    ],
)
def test_a_record_of_another_format_is_unreadable(change: dict[str, object], problem: str) -> None:
    data = {**record_for(4, ()).to_dict(), **change}
    with pytest.raises(UnreadableFormat, match=problem):
        ValidationRecord.from_dict(data)


def test_a_format_1_map_is_reported_as_incompatible_not_lost() -> None:
    cluster = Cluster()
    format_1 = {**record_for(0, ()).to_dict(), "formatVersion": 1}
    cluster.snapshots.get_validation_record = (  # type: ignore[method-assign]
        lambda map_name, snapshot_id: ValidationRecord.from_dict(format_1)
    )
    with pytest.raises(SnapshotIncompatible, match="format 1") as error:
        validate_snapshot(cluster.snapshots, MAP, 0)
    assert "release that wrote it" in str(error.value)


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


def test_another_snapshots_validation_record_is_never_read() -> None:
    """A zombie's later record in the same map does not replace the restore point's."""
    cluster = Cluster()
    cluster.records.record = cluster.records.record.start_new_snapshot(0).start_new_snapshot(0)
    write_snapshot(cluster, 1, 1)
    write_snapshot(cluster, 0, 2)
    assert validate_snapshot(cluster.snapshots, MAP, 1).snapshot_id == 1
    assert validate_snapshot(cluster.snapshots, MAP, 0).num_chunks == 2
    assert cluster.snapshots.latest_snapshot_id(MAP) == 1


def test_validation_record_under_another_snapshots_key() -> None:
    cluster = Cluster()
    cluster.snapshots.maps[MAP] = {
        validation_record_key(2): record_for(1, (descriptor(ChunkKey(1, "state", 0, 0)),))
    }
    assert corrupted(cluster, 2) == "the validation record under its key belongs to snapshot 1"


def test_validation_record_listing_a_later_snapshots_chunk() -> None:
    cluster = Cluster()
    cluster.snapshots.maps[MAP] = {
        validation_record_key(2): record_for(2, (descriptor(ChunkKey(3, "state", 0, 0)),))
    }
    assert "lists chunk '3/state/0/0' of a later snapshot" in corrupted(cluster, 2)


def test_missing_chunks_are_named() -> None:
    cluster = Cluster()
    cluster.records.record = cluster.records.record.start_new_snapshot(0)
    keys = write_snapshot(cluster, 0, 5)
    for key in keys[:4]:
        del cluster.snapshots.maps[MAP][str(key)]
    assert corrupted(cluster, 0) == (
        "4 of its 5 chunks are missing ('0/state/0/0', '0/state/0/1', '0/state/0/2', ...)"
    )


@pytest.mark.parametrize("changed", [b"datb", b"dat", b"data!"])
def test_one_changed_byte_fails_the_read_naming_the_snapshot_and_chunk(changed: bytes) -> None:
    cluster = Cluster()
    cluster.records.record = cluster.records.record.start_new_snapshot(0)
    (key,) = write_snapshot(cluster, 0, 1)
    record = validate_snapshot(cluster.snapshots, MAP, 0)
    ref = SnapshotRef(MAP, 0, record.chunks)
    assert ref.read(cluster.snapshots, key) == b"data"
    cluster.snapshots.maps[MAP][str(key)] = changed

    with pytest.raises(SnapshotCorrupted) as error:
        ref.read(cluster.snapshots, key)

    message = str(error.value)
    assert f"Snapshot 0 in map '{MAP}' is corrupted: chunk '0/state/0/0'" in message
    assert "does not match its checksum" in message
    found = SnapshotCorrupted.find_in(f"py4j trace\n  raise ...\n{message}\n at ...")
    assert found is not None
    assert (found.map_name, found.snapshot_id, found.problem) == (MAP, 0, error.value.problem)


def test_a_chunk_the_snapshot_does_not_list_is_not_read() -> None:
    ref = SnapshotRef(MAP, 0, (descriptor(ChunkKey(0, "state", 0, 0)),))
    with pytest.raises(KeyError, match="lists no chunk '0/state/1/0'"):
        ref.read(Cluster().snapshots, ChunkKey(0, "state", 1, 0))


def test_compatibility_names_both_sides() -> None:
    snapshot = PipelineShape({"source": "Sequence", "counts": "Agg(a)", "old": "Agg(x)"}, 8)
    pipeline = PipelineShape({"source": "Sequence", "counts": "Agg(b)", "new": "Agg(y)"}, 3)
    with pytest.raises(SnapshotIncompatible) as error:
        check_compatible(MAP, record_for(5, (), snapshot), pipeline)
    message = str(error.value)
    assert message.startswith(f"Snapshot 5 in map '{MAP}' cannot be restored by this job")
    assert "operator 'old' is in the snapshot but not in the pipeline" in message
    assert "operator 'new' is in the pipeline but not in the snapshot" in message
    assert "operator 'counts' stores Agg(a) in the snapshot, Agg(b) in the pipeline" in message
    assert "upgradeMode: stateless" in message


def test_another_partition_count_is_compatible() -> None:
    shape = PipelineShape({"counts": "Agg(a)"}, 8)
    check_compatible(MAP, record_for(5, (), shape), PipelineShape({"counts": "Agg(a)"}, 16))


def test_discard_keeps_newer_snapshots() -> None:
    cluster = Cluster()
    for snapshot_id in range(4):
        cluster.records.record = cluster.records.record.start_new_snapshot(0)
        write_snapshot(cluster, snapshot_id, 2)
    cluster.snapshots.discard(MAP, 1)
    assert {snapshot_id_of_key(key) for key in cluster.snapshots.maps[MAP]} == {2, 3}
    assert validate_snapshot(cluster.snapshots, MAP, 3).snapshot_id == 3
