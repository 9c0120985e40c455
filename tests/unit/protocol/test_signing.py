"""Signed validation records: a forged chunk whose checksum the forger recomputed is refused.

The forger here is whoever can write the store's maps (its port has no authentication): they
rewrite the source's chunk to rewind its offset, which would replay input, and put the new
chunk's checksum into the validation record, so every check but the MAC passes. The real
Hazelcast store is tested the same way in tests/integration/test_restore_integrity.py.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from snapshot_protocol import CoordinatorState, SnapshotCorrupted, ValidationRecord
from snapshot_protocol.chunks import ChunkDescriptor, parse_validation_record, validation_record_key
from snapshot_protocol.signing import SnapshotKeys, check_signature, sign
from tests.unit.protocol.fakes import Cluster, running, snapshot

pytestmark = pytest.mark.unit

MAP_0 = "__sj.b1.snapshot.0b5e-uid.0"
K1 = b"k" * 32
K2 = b"2" * 40
KEYS = SnapshotKeys("k1", {"k1": K1})


def _record(cluster: Cluster, snapshot_id: int) -> ValidationRecord:
    """The validation record of ``snapshot_id``, in whichever map holds it."""
    (record,) = [
        entries[validation_record_key(snapshot_id)]
        for entries in cluster.snapshots.maps.values()
        if validation_record_key(snapshot_id) in entries
    ]
    assert isinstance(record, ValidationRecord)
    return record


def _forge_source_offset(cluster: Cluster, snapshot_id: int, offset: int) -> None:
    """Rewrites the source's chunk and recomputes its checksum in the record, MAC untouched."""
    entries = cluster.snapshots.maps[MAP_0]
    record = entries[validation_record_key(snapshot_id)]
    assert isinstance(record, ValidationRecord)
    forged = json.dumps(offset, sort_keys=True).encode()
    chunks = []
    for chunk in record.chunks:
        if chunk.key.operator == "source":
            entries[str(chunk.key)] = forged
            chunk = ChunkDescriptor.of(chunk.key, forged, chunk.num_keys)
        chunks.append(chunk)
    entries[validation_record_key(snapshot_id)] = replace(record, chunks=tuple(chunks))


def test_a_signed_record_verifies_after_a_round_trip_through_its_json() -> None:
    record = sign(ValidationRecord(3, (), 0, 0, 1, "uid"), KEYS)
    assert record.mac is not None and record.mac.key_id == "k1"
    stored = parse_validation_record(json.dumps(record.to_dict()))
    assert stored == record
    check_signature(MAP_0, stored, KEYS)


def test_a_forged_chunk_with_a_recomputed_checksum_is_refused_before_any_state_is_read() -> None:
    cluster = Cluster()
    driver = running(cluster, snapshot_keys=KEYS)
    snapshot_id = snapshot(driver)
    _forge_source_offset(cluster, snapshot_id, 0)

    restarted = cluster.start_driver(snapshot_keys=KEYS)
    with pytest.raises(SnapshotCorrupted, match="was not written with the job's key") as refused:
        restarted.coordinator.restore()
    assert refused.value.snapshot_id == snapshot_id
    assert "MAC of its validation record does not verify with key 'k1'" in str(refused.value)
    assert restarted.coordinator.state is CoordinatorState.FAILED
    assert restarted.pipeline.source.offset == 0  # nothing was restored


def test_without_keys_the_same_forgery_is_restored() -> None:
    """Why the MAC is needed: every other check passes, and the input would be replayed."""
    cluster = Cluster()
    driver = running(cluster, snapshot_keys=None)
    snapshot_id = snapshot(driver)
    _forge_source_offset(cluster, snapshot_id, 1)
    restarted = running(cluster, snapshot_keys=None)
    assert restarted.pipeline.source.offset == 1


def test_an_unsigned_snapshot_is_refused_unless_accepted_once() -> None:
    cluster = Cluster()
    snapshot(running(cluster, snapshot_keys=None))
    with pytest.raises(SnapshotCorrupted, match="has no MAC"):
        cluster.start_driver(snapshot_keys=KEYS).coordinator.restore()
    accepting = running(cluster, snapshot_keys=replace(KEYS, accept_unsigned=True))
    snapshot_id = snapshot(accepting)
    assert _record(cluster, snapshot_id).mac is not None
    running(cluster, snapshot_keys=KEYS)  # the next execution needs acceptUnsigned no more


def test_a_rotated_key_verifies_the_old_snapshot_and_signs_the_next() -> None:
    cluster = Cluster()
    snapshot(running(cluster, snapshot_keys=KEYS))
    rotated = SnapshotKeys("k2", {"k2": K2, "k1": K1})
    driver = running(cluster, snapshot_keys=rotated)
    snapshot_id = snapshot(driver)
    record = _record(cluster, snapshot_id)
    assert record.mac is not None and record.mac.key_id == "k2"
    # Once the old key is dropped, the new snapshot still restores; a record of k1 would not.
    running(cluster, snapshot_keys=SnapshotKeys("k2", {"k2": K2}))
    with pytest.raises(SnapshotCorrupted, match="signed with key 'k1', which the job does not"):
        check_signature(MAP_0, sign(record, KEYS), SnapshotKeys("k2", {"k2": K2}))


def test_keys_shorter_than_the_macs_output_are_refused() -> None:
    with pytest.raises(ValueError, match="has 16 bytes; a key needs at least 32"):
        SnapshotKeys("short", {"short": b"s" * 16})
    with pytest.raises(ValueError, match="signing key 'k9' is not among the keys"):
        SnapshotKeys("k9", {"k1": K1})
