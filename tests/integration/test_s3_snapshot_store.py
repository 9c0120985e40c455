"""The snapshot store on a real S3 server (s3proxy), and snapshots copied to it and back.

Why: a durable copy of a snapshot is only worth having if a restore can trust it as much as
the original. These tests write a snapshot into real Hazelcast members, copy it to a real S3
server with :func:`~snapshot_protocol.transfer.transfer_snapshot`, and check what a restore
would: the copy validates, its chunks match their checksums, a changed or deleted object is
found and named, and a copy back into Hazelcast validates again.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import pytest

from snapshot_protocol import (
    ChunkKey,
    ChunkWriter,
    ExportIdentity,
    PipelineShape,
    SnapshotCorrupted,
    SnapshotRef,
    ValidationRecord,
    validate_snapshot,
)
from snapshot_protocol.errors import SnapshotStoreError
from snapshot_protocol.export_names import discard_other_jobs_exports, find_export
from snapshot_protocol.transfer import transfer_snapshot
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshot_store.s3 import S3SnapshotStore
from testbed.hazelcast import HazelcastCluster
from testbed.s3 import S3Server

pytestmark = pytest.mark.integration

SHAPE = PipelineShape({"source": "Sequence", "state": "RunningAggregate(sum(v))"}, 4)
CHUNK_BYTES = 256 * 1024


@pytest.fixture
def hazelcast(healthy_hazelcast: HazelcastCluster) -> Iterator[HazelcastSnapshotStore]:
    hz = connect([m.address for m in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    yield HazelcastSnapshotStore(hz)
    hz.shutdown()


@pytest.fixture
def durable(s3: S3Server, s3_bucket: str) -> S3SnapshotStore:
    return S3SnapshotStore(s3.client(), s3_bucket, prefix="team-a/snapshots")


def _write_snapshot(
    store: HazelcastSnapshotStore, map_name: str, snapshot_id: int, job_uid: str = "job-uid"
) -> ValidationRecord:
    """A snapshot of 4 state partitions of 3 random chunks each, plus a driver-side chunk."""
    state = ChunkWriter(store, map_name, snapshot_id, "state")
    chunks = state.write_many(
        [
            (partition, seq, os.urandom(CHUNK_BYTES), 100)
            for partition in range(4)
            for seq in range(3)
        ]
    )
    chunks.append(ChunkWriter(store, map_name, snapshot_id, "source").write(0, 0, b"offset=42", 1))
    record = ValidationRecord(
        snapshot_id,
        tuple(chunks),
        sum(chunk.num_bytes for chunk in chunks),
        sum(chunk.num_keys for chunk in chunks),
        1_700_000_000_000,
        job_uid,
        SHAPE,
    )
    store.put_validation_record(map_name, record)
    return record


def test_a_reused_export_name_resolves_to_the_new_export_in_the_store_and_the_bucket(
    hazelcast: HazelcastSnapshotStore, durable: S3SnapshotStore
) -> None:
    """The old export (job "old", snapshot 9) outlived its name; the new one is snapshot 2.

    Both stores dispose of the old export the way the coordinator (taking step 3) and the
    durable copy do; a bucket that still holds it (a disposal that failed) resolves the name to
    the new export when given its identity. The coordinator's use of these rules is in
    ``tests/unit/protocol/test_export_names.py``.
    """
    export = f"__sj.test.{uuid.uuid4().hex[:8]}.golden"
    old = _write_snapshot(hazelcast, export, 9, "old")
    transfer_snapshot(hazelcast, export, durable, export, 9)

    # The new job's export: other jobs' snapshots go before its own are written.
    assert discard_other_jobs_exports(hazelcast, export, "new") == [9]
    new = _write_snapshot(hazelcast, export, 2, "new")
    assert hazelcast.snapshot_ids(export) == [2]
    assert hazelcast.missing_chunks(export, list(old.chunk_keys)) == list(old.chunk_keys)
    assert find_export(hazelcast, export, None) == new

    # The bucket, before the new export's copy disposes of the old one: only the identity
    # keeps the restore from the old export's state.
    transfer_snapshot(hazelcast, export, durable, export, 2)
    assert durable.snapshot_ids(export) == [2, 9]
    assert find_export(durable, export, None) == old
    assert find_export(durable, export, ExportIdentity("new", 2)) == new
    assert find_export(durable, export, ExportIdentity("old", 2)) is None

    assert discard_other_jobs_exports(durable, export, "new") == [9]
    assert durable.snapshot_ids(export) == [2]
    assert durable.missing_chunks(export, list(old.chunk_keys)) == list(old.chunk_keys)
    assert find_export(durable, export, None) == new
    assert validate_snapshot(durable, export, 2) == new


def test_a_snapshot_copied_to_s3_and_back_validates_and_reads_the_same(
    hazelcast: HazelcastSnapshotStore, durable: S3SnapshotStore, s3: S3Server
) -> None:
    source, export, back = (f"__sj.test.{uuid.uuid4().hex[:8]}.{name}" for name in "abc")
    written = _write_snapshot(hazelcast, source, 7)

    copied = transfer_snapshot(hazelcast, source, durable, export, 7)

    assert copied == written
    assert durable.latest_snapshot_id(export) == 7
    # The documented layout: one object per key under <prefix>/<map>/.
    objects = {
        entry["Key"] for entry in s3.client().list_objects_v2(Bucket=durable.bucket)["Contents"]
    }
    assert f"team-a/snapshots/{export}/7/validation-record" in objects
    assert f"team-a/snapshots/{export}/7/state/3/2" in objects
    assert len(objects) == written.num_chunks + 1
    # Read as a restore reads: every chunk verified against the record.
    ref = SnapshotRef(export, 7, validate_snapshot(durable, export, 7).chunks)
    for chunk in written.chunks:
        assert ref.read(durable, chunk.key) == hazelcast.read_chunk(source, chunk.key)

    assert transfer_snapshot(durable, export, hazelcast, back, 7) == written


def test_a_changed_object_fails_the_read_and_a_deleted_one_the_validation(
    hazelcast: HazelcastSnapshotStore, durable: S3SnapshotStore, s3: S3Server
) -> None:
    source, export = (f"__sj.test.{uuid.uuid4().hex[:8]}.{name}" for name in "ab")
    written = _write_snapshot(hazelcast, source, 3)
    transfer_snapshot(hazelcast, source, durable, export, 3)
    changed, deleted = written.chunks[5], written.chunks[8]
    client = s3.client()
    client.put_object(
        Bucket=durable.bucket, Key=durable.object_key(export, str(changed.key)), Body=b"x" * 10
    )

    # A copy from the changed export (as when it is brought back) stops at the changed chunk.
    with pytest.raises(SnapshotCorrupted) as error:
        transfer_snapshot(durable, export, hazelcast, f"{source}.back", 3)
    assert f"chunk '{changed.key}' does not match its checksum (10 bytes read" in str(error.value)
    assert error.value.map_name == export

    client.delete_object(Bucket=durable.bucket, Key=durable.object_key(export, str(deleted.key)))
    with pytest.raises(
        SnapshotCorrupted, match=f"1 of its 13 chunks are missing \\('{deleted.key}'"
    ):
        validate_snapshot(durable, export, 3)


def test_discard_keeps_newer_snapshots_and_a_missing_object_is_named(
    hazelcast: HazelcastSnapshotStore, durable: S3SnapshotStore
) -> None:
    source, export = (f"__sj.test.{uuid.uuid4().hex[:8]}.{name}" for name in "ab")
    for snapshot_id in (1, 2, 3):
        _write_snapshot(hazelcast, source, snapshot_id)
        transfer_snapshot(hazelcast, source, durable, export, snapshot_id)
    assert durable.snapshot_ids(export) == [1, 2, 3]

    durable.discard(export, 2)

    assert durable.snapshot_ids(export) == [3]
    assert durable.get_validation_record(export, 2) is None
    validate_snapshot(durable, export, 3)
    with pytest.raises(
        SnapshotStoreError, match=f"Chunk '1/state/0/0' is missing from map {export}"
    ):
        durable.read_chunks(export, [ChunkKey(1, "state", 0, 0)])


def test_a_wrong_secret_is_a_store_error_naming_the_bucket(s3: S3Server, s3_bucket: str) -> None:
    store = S3SnapshotStore(s3.client(secret_key="not-the-secret"), s3_bucket)
    with pytest.raises(SnapshotStoreError, match=f"of bucket {s3_bucket}: SignatureDoesNotMatch"):
        store.latest_snapshot_id("__sj.export.ns.name")


def test_a_streamed_read_keeps_the_order_and_names_a_missing_chunk(
    durable: S3SnapshotStore,
) -> None:
    # More chunks than the read-ahead (two windows), so the stream refills as it is consumed.
    count = 2 * 16 + 9
    map_name = "__sj.export.ns.streamed"
    keys = [ChunkKey(1, "state", 0, seq) for seq in range(count)]
    values = [os.urandom(1024) + seq.to_bytes(4, "big") for seq in range(count)]
    durable.put_chunks(map_name, list(zip(keys, values, strict=True)))

    assert list(durable.iter_chunks(map_name, keys)) == values

    stream = durable.iter_chunks(map_name, keys)
    assert next(stream) == values[0]
    stream.close()  # Early: the GETs not started are cancelled, the others waited for.

    absent = ChunkKey(1, "state", 0, 999)
    stream = durable.iter_chunks(map_name, [*keys[:3], absent, *keys[3:]])
    assert [next(stream) for _ in range(3)] == values[:3]
    with pytest.raises(SnapshotStoreError, match=f"Chunk '{absent}' is missing"):
        next(stream)
