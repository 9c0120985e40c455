"""``python -m spark_runtime snapshot list|inspect|validate`` on Hazelcast, S3 and a directory.

Why: the command is what a user runs after an incident, so it is run here as a user would, as
a process, against snapshots in real Hazelcast members and their copies in a real S3 server
(s3proxy) and in a local job's embedded store, and its exit codes and messages are checked:
a sound snapshot validates, a changed chunk is named with exit 65, an absent one is exit 66.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshot_protocol import ChunkWriter, PipelineShape, ValidationRecord
from snapshot_protocol.transfer import transfer_snapshot
from snapshot_store.directory import DirectorySnapshotStore
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import export_map_name
from testbed.hazelcast import HazelcastCluster
from testbed.s3 import S3Server

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
SHAPE = PipelineShape({"numbers": "Sequence", "sums": "RunningAggregate(sum(value))"}, 2)


@pytest.fixture
def hazelcast(healthy_hazelcast: HazelcastCluster) -> Iterator[HazelcastSnapshotStore]:
    hz = connect([m.address for m in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    yield HazelcastSnapshotStore(hz)
    hz.shutdown()


def _write(store: HazelcastSnapshotStore, map_name: str, snapshot_id: int) -> ValidationRecord:
    sums = ChunkWriter(store, map_name, snapshot_id, "sums")
    chunks = sums.write_many([(part, 0, os.urandom(1000 + part), 10) for part in range(2)])
    chunks.append(ChunkWriter(store, map_name, snapshot_id, "numbers").write(0, 0, b"42", 1))
    record = ValidationRecord(
        snapshot_id,
        tuple(chunks),
        sum(c.num_bytes for c in chunks),
        sum(c.num_keys for c in chunks),
        1_764_000_000_000,
        "uid-1",
        SHAPE,
    )
    store.put_validation_record(map_name, record)
    return record


def _command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_runtime", "snapshot", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_list_inspect_and_validate_in_hazelcast_in_s3_and_in_a_directory(
    healthy_hazelcast: HazelcastCluster,
    hazelcast: HazelcastSnapshotStore,
    s3: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
    for snapshot_id in (4, 5):
        _write(hazelcast, map_name, snapshot_id)
    durable = S3SnapshotStore(s3.client(), s3_bucket, "copies")
    transfer_snapshot(hazelcast, map_name, durable, map_name, 5)
    members = ",".join(m.address for m in healthy_hazelcast.nodes)
    in_hazelcast = ["--hazelcast", members, "--cluster-name", healthy_hazelcast.cluster_name]
    in_s3 = ["--s3-endpoint", s3.endpoint, "--bucket", s3_bucket, "--prefix", "copies"]
    keys = {"AWS_ACCESS_KEY_ID": s3.access_key, "AWS_SECRET_ACCESS_KEY": s3.secret_key}

    listed = _command("list", "--map", map_name, *in_hazelcast, "-o", "json")
    assert listed.returncode == 0, listed.stderr
    assert [s["snapshot_id"] for s in json.loads(listed.stdout)["snapshots"]] == [4, 5]

    inspected = _command("inspect", "--map", map_name, *in_s3, env=keys)
    assert inspected.returncode == 0, inspected.stderr
    assert f"Snapshot 5 in map {map_name}: job uid-1" in inspected.stdout
    assert "sums: RunningAggregate(sum(value)); 2 partitions, 2 chunks, 2001 bytes" in (
        inspected.stdout
    )

    for where, env in ((in_hazelcast, None), (in_s3, keys)):
        valid = _command("validate", "--map", map_name, "--snapshot-id", "5", *where, env=env)
        assert valid.returncode == 0, valid.stderr
        assert "Valid: the validation record, all 3 chunks present" in valid.stdout

    # A chunk changed in the bucket: named, exit 65.
    s3.client().put_object(
        Bucket=s3_bucket, Key=durable.object_key(map_name, "5/sums/1/0"), Body=b"changed"
    )
    corrupted = _command("validate", "--map", map_name, *in_s3, env=keys)
    assert corrupted.returncode == DriverExit.SNAPSHOT_CORRUPTED, corrupted.stderr
    assert "chunk '5/sums/1/0' does not match its checksum (7 bytes read" in corrupted.stderr

    absent = _command("inspect", "--export", "nothing", "--namespace", "ns", *in_hazelcast)
    assert absent.returncode == DriverExit.SNAPSHOT_NOT_FOUND, absent.stderr
    assert "No snapshot with a validation record in map __sj.export.ns.nothing" in absent.stderr

    # A local job's embedded store; its exports are in the namespace "local".
    embedded = DirectorySnapshotStore(tmp_path / "store")
    transfer_snapshot(hazelcast, map_name, embedded, export_map_name("local", "golden"), 5)
    in_directory = ["--store-dir", str(tmp_path / "store")]
    valid = _command("validate", "--export", "golden", *in_directory)
    assert valid.returncode == 0, valid.stderr
    assert "Valid: the validation record, all 3 chunks present" in valid.stdout


def test_a_store_given_twice_or_not_at_all_is_bad_input() -> None:
    neither = _command("list", "--map", "m")
    assert neither.returncode == DriverExit.BAD_INPUT
    assert "Give exactly one of --hazelcast, --s3-endpoint and --store-dir" in neither.stderr
    missing = _command("list", "--map", "m", "--store-dir", "/nonexistent/store")
    assert missing.returncode == DriverExit.BAD_INPUT
    assert "--store-dir /nonexistent/store is not a directory" in missing.stderr
