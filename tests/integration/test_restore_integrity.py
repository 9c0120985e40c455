"""Restores that must not happen, and the one that must: checksums, compatibility, rescaling.

Real Hazelcast members, real PostgreSQL and real PySpark: the driver runs in-process on the
session's SparkSession (as in ``test_runtime_restore.py``), its snapshots go to the session's
Hazelcast cluster, and the tests change stored bytes with a plain Hazelcast client, the way a
bit flip or a foreign writer would. Each failure must end the job with its own exit code and a
message naming the snapshot (and the chunk), before any output is published; a change of the
state partition count must restore with exact sums.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from examples.sequence_sum import expected_sums
from snapshot_protocol import ChunkKey, ExecutionRecord, JobIdentity, SnapshotCorrupted
from snapshot_protocol.chunks import (
    LEGACY_VALIDATION_RECORD_KEY,
    ChunkDescriptor,
    validation_record_key,
)
from snapshot_protocol.signing import SnapshotKeys
from snapshotjob_contract.exits import DriverExit
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sinks import ConsoleSink, PostgresSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline
from testbed.hazelcast import HazelcastCluster
from tests.fixtures.in_process_driver import Build, Runner

pytestmark = pytest.mark.integration


class Jobs(Runner):
    """Runs executions of one job in-process; every run is a new execution of its record."""

    def __init__(self, spark: SparkSession, cluster: HazelcastCluster, workdir: Path) -> None:
        super().__init__(spark, cluster, workdir)
        self.uid = f"integrity-{uuid.uuid4().hex[:8]}"
        self.identity = JobIdentity(self.uid, "test", 1)

    def run_job(
        self,
        build: Build,
        *,
        partitions: int = 4,
        max_epochs: int | None = None,
        initial_snapshot_name: str | None = None,
        snapshot_keys: SnapshotKeys | None = None,
    ) -> DriverExit:
        """Runs the next execution, a snapshot at every epoch."""
        return self.run(
            build,
            self.uid,
            0,
            max_epochs,
            partitions=partitions,
            initial_snapshot_name=initial_snapshot_name,
            snapshot_keys=snapshot_keys,
        )

    @property
    def record(self) -> ExecutionRecord:
        return FileRecordStore(self.record_path(self.uid), "reader").read()

    def restore_point(self) -> tuple[str, int]:
        record = self.record
        map_name = record.successful_snapshot_map_name(self.identity)
        assert map_name is not None
        return map_name, record.snapshot_id

    def exit_message(self) -> str:
        assert self.last is not None and self.last.exit_message is not None
        return self.last.exit_message


@pytest.fixture
def jobs(
    spark: SparkSession, healthy_hazelcast: HazelcastCluster, tmp_path: Path
) -> Iterator[Jobs]:
    result = Jobs(spark, healthy_hazelcast, tmp_path)
    yield result
    result.client.shutdown()


def _sums(dsn: str, table: str, *, keys: int = 7, end: int = 7000) -> Build:
    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=end // 10, end=end), name="numbers")
        keyed = numbers.select((F.col("value") % keys).alias("key"), "value")
        sums = keyed.groupBy("key").agg(
            F.sum("value").alias("total"), F.count("*").alias("count"), name="sums"
        )
        sums.writeStream(PostgresSink(dsn, table, ["key"]), name="postgres")

    return build


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def _table() -> str:
    return f"sums_{uuid.uuid4().hex[:8]}"


def _flip_one_bit(jobs: Jobs, map_name: str, key: ChunkKey) -> None:
    target = jobs.client.get_map(map_name).blocking()
    value = bytearray(target.get(str(key)))
    value[len(value) // 2] ^= 0x01
    target.set(str(key), value)


def test_state_partitions_8_3_16_restore_with_exact_sums(jobs: Jobs, postgres_dsn: str) -> None:
    table = _table()
    build = _sums(postgres_dsn, table)

    assert jobs.run_job(build, partitions=8, max_epochs=3) is DriverExit.INTERRUPTED
    assert jobs.run_job(build, partitions=3, max_epochs=3) is DriverExit.INTERRUPTED
    map_name, snapshot_id = jobs.restore_point()
    record = jobs.store.get_validation_record(map_name, snapshot_id)
    assert record is not None and record.shape.state_partitions == 3
    assert {k.partition for k in record.chunk_keys if k.operator == "sums"} <= {0, 1, 2, 3}
    assert jobs.run_job(build, partitions=16) is DriverExit.COMPLETED

    actual = {
        k: (t, c) for k, t, c in _rows(postgres_dsn, f"SELECT key, total, count FROM {table}")
    }
    assert actual == expected_sums(7000, 7)


@pytest.mark.parametrize(
    ("keys", "path"),
    [(7, "driver"), (640, "executors")],  # 640 keys over 32 partitions: more than 16 chunks
)
def test_a_flipped_bit_in_a_state_chunk_fails_the_job_naming_the_chunk(
    jobs: Jobs, postgres_dsn: str, keys: int, path: str
) -> None:
    table = _table()
    build = _sums(postgres_dsn, table, keys=keys)
    assert jobs.run_job(build, partitions=32, max_epochs=3) is DriverExit.INTERRUPTED
    map_name, snapshot_id = jobs.restore_point()
    record = jobs.store.get_validation_record(map_name, snapshot_id)
    assert record is not None
    state = sorted(k for k in record.chunk_keys if k.operator == "sums" and k.partition < 32)
    assert (len(state) > 16) == (path == "executors")
    published = _rows(postgres_dsn, f"SELECT key, total, count FROM {table} ORDER BY key")
    _flip_one_bit(jobs, map_name, state[len(state) // 2])

    assert jobs.run_job(build, partitions=32) is DriverExit.SNAPSHOT_CORRUPTED

    message = jobs.exit_message()
    assert f"Snapshot {snapshot_id} in map '{map_name}' is corrupted" in message
    assert f"chunk '{state[len(state) // 2]}' does not match its checksum" in message
    assert _rows(postgres_dsn, f"SELECT key, total, count FROM {table} ORDER BY key") == published


def test_a_chunk_rewritten_with_its_checksum_recomputed_is_refused_when_signed(
    jobs: Jobs, postgres_dsn: str
) -> None:
    """The forger of docs/operations/security.md: it can write the store's maps, so it changes
    a state chunk and puts the chunk's new xxh3 checksum into the validation record, which
    every check but the record's MAC then accepts."""
    keys = SnapshotKeys("k1", {"k1": b"a-test-key-of-48-bytes-000000000000000000000000"})
    table = _table()
    build = _sums(postgres_dsn, table)
    assert jobs.run_job(build, max_epochs=3, snapshot_keys=keys) is DriverExit.INTERRUPTED
    map_name, snapshot_id = jobs.restore_point()
    record = jobs.store.get_validation_record(map_name, snapshot_id)
    assert record is not None and record.mac is not None and record.mac.key_id == "k1"
    published = _rows(postgres_dsn, f"SELECT key, total, count FROM {table} ORDER BY key")

    target = next(c for c in record.chunks if c.key.operator == "sums")
    forged = bytearray(jobs.client.get_map(map_name).blocking().get(str(target.key)))
    forged[len(forged) // 2] ^= 0x01
    listed = [
        ChunkDescriptor.of(c.key, bytes(forged), c.num_keys) if c is target else c
        for c in record.chunks
    ]
    records_map = jobs.client.get_map(map_name).blocking()
    records_map.set(str(target.key), forged)
    records_map.set(
        validation_record_key(snapshot_id),
        bytearray(json.dumps(replace(record, chunks=tuple(listed)).to_dict()).encode()),
    )

    assert jobs.run_job(build, snapshot_keys=keys) is DriverExit.SNAPSHOT_CORRUPTED
    message = jobs.exit_message()
    assert f"Snapshot {snapshot_id} in map '{map_name}' is corrupted" in message
    assert "does not verify with key 'k1'" in message
    assert "was not written with the job's key" in message
    assert _rows(postgres_dsn, f"SELECT key, total, count FROM {table} ORDER BY key") == published


def test_random_bytes_in_a_chunk_fail_the_job_not_a_restart_loop(
    jobs: Jobs, postgres_dsn: str
) -> None:
    build = _sums(postgres_dsn, _table())
    assert jobs.run_job(build, max_epochs=2) is DriverExit.INTERRUPTED
    map_name, snapshot_id = jobs.restore_point()
    key = ChunkKey(snapshot_id, "sums", 0, 0)
    jobs.client.get_map(map_name).blocking().set(str(key), bytearray(uuid.uuid4().bytes * 8))

    assert jobs.run_job(build) is DriverExit.SNAPSHOT_CORRUPTED
    assert f"chunk '{key}' does not match its checksum" in jobs.exit_message()


def test_another_pipeline_is_refused_before_any_state_is_loaded(
    jobs: Jobs, postgres_dsn: str
) -> None:
    table = _table()
    assert jobs.run_job(_sums(postgres_dsn, table), max_epochs=2) is DriverExit.INTERRUPTED
    published = _rows(postgres_dsn, f"SELECT * FROM {table} ORDER BY key")

    def other(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=700, end=7000), name="numbers")
        keyed = numbers.select((F.col("value") % 7).alias("key"), "value")
        highs = keyed.groupBy("key").agg(F.max("value").alias("high"), name="sums")
        highs.writeStream(PostgresSink(postgres_dsn, table + "_high", ["key"]), name="postgres")

    assert jobs.run_job(other) is DriverExit.SNAPSHOT_INCOMPATIBLE

    message = jobs.exit_message()
    assert "cannot be restored by this job: it was written by another pipeline" in message
    assert "operator 'sums' stores RunningAggregate(keys=key; struct<key:" in message
    assert "high:bigint" in message and "total:bigint" in message
    assert "upgradeMode: stateless" in message
    assert _rows(postgres_dsn, f"SELECT * FROM {table} ORDER BY key") == published


def test_an_aggregate_of_another_argument_is_refused_though_its_type_is_the_same(
    jobs: Jobs, postgres_dsn: str
) -> None:
    """Same names, keys and state schema: only the aggregates' arguments tell the state apart."""
    table = _table()
    assert jobs.run_job(_sums(postgres_dsn, table), max_epochs=2) is DriverExit.INTERRUPTED

    def doubled(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=700, end=7000), name="numbers")
        keyed = numbers.select((F.col("value") % 7).alias("key"), "value")
        sums = keyed.groupBy("key").agg(
            F.sum(F.col("value") * 2).alias("total"), F.count("*").alias("count"), name="sums"
        )
        sums.writeStream(PostgresSink(postgres_dsn, table, ["key"]), name="postgres")

    assert jobs.run_job(doubled) is DriverExit.SNAPSHOT_INCOMPATIBLE
    message = jobs.exit_message()
    assert "total=sum(value)" in message
    assert "total=sum((value * CAST(2 AS BIGINT)))" in message


def test_a_definition_the_stream_cannot_run_is_bad_input_with_its_reason(jobs: Jobs) -> None:
    def limited(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=10, end=100), name="numbers")
        numbers.limit(5).writeStream(ConsoleSink())  # type: ignore[attr-defined]

    assert jobs.run_job(limited) is DriverExit.BAD_INPUT
    assert "The pipeline cannot be defined: AttributeError" in jobs.exit_message()
    assert "'limit'" in jobs.exit_message()


def test_a_missing_initial_snapshot_fails_the_job(jobs: Jobs, postgres_dsn: str) -> None:
    build = _sums(postgres_dsn, _table())

    assert (
        jobs.run_job(build, initial_snapshot_name="no-such-export") is DriverExit.SNAPSHOT_NOT_FOUND
    )
    assert "The initial snapshot 'no-such-export' does not exist" in jobs.exit_message()


def test_a_format_1_restore_point_is_reported_as_incompatible(
    jobs: Jobs, postgres_dsn: str
) -> None:
    build = _sums(postgres_dsn, _table())
    assert jobs.run_job(build, max_epochs=2) is DriverExit.INTERRUPTED
    map_name, snapshot_id = jobs.restore_point()
    target = jobs.client.get_map(map_name).blocking()
    record = json.loads(bytes(target.get(validation_record_key(snapshot_id))))
    target.delete(validation_record_key(snapshot_id))
    legacy = {"snapshotId": snapshot_id, "formatVersion": 1, "chunkKeys": record["chunks"]}
    target.set(LEGACY_VALIDATION_RECORD_KEY, bytearray(json.dumps(legacy).encode()))

    assert jobs.run_job(build) is DriverExit.SNAPSHOT_INCOMPATIBLE
    assert "written in snapshot format 1 and this runtime reads formats 2 and 3" in (
        jobs.exit_message()
    )


def test_discard_and_copy_on_the_real_store(jobs: Jobs, postgres_dsn: str) -> None:
    """A discard leaves newer snapshots; a copy verifies every chunk before it counts."""
    build = _sums(postgres_dsn, _table())
    assert jobs.run_job(build, max_epochs=3) is DriverExit.INTERRUPTED
    map_name, snapshot_id = jobs.restore_point()
    jobs.store.discard(map_name, snapshot_id - 1)
    assert jobs.store.latest_snapshot_id(map_name) == snapshot_id
    jobs.store.discard(map_name, snapshot_id - 1)  # idempotent
    copied = jobs.store.copy_snapshot(map_name, f"__sj.export.test.copy-{jobs.uid}", snapshot_id)
    assert copied.snapshot_id == snapshot_id

    _flip_one_bit(jobs, map_name, ChunkKey(snapshot_id, "numbers", 0, 0))
    with pytest.raises(SnapshotCorrupted, match=f"chunk '{snapshot_id}/numbers/0/0'"):
        jobs.store.copy_snapshot(map_name, f"__sj.export.test.copy2-{jobs.uid}", snapshot_id)
