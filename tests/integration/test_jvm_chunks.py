"""Keyed state written and read by the executors' JVMs (``jvm/``) against the Python workers.

Both writers must make the same snapshot: the same chunk keys, schema (with the session's time
zone), rows and row counts, and checksums the Python side verifies, so a snapshot restores
whichever side wrote it and whichever reads it. A chunk altered in the store fails the JVM's
restore with the words the coordinator recognises as a corrupted snapshot, naming the chunk.
Real Hazelcast members, real Spark (``local[2]``: the executors run in the driver's JVM).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pytest
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshot_protocol import ChunkWriter, SnapshotCorrupted, SnapshotRef
from snapshot_protocol.chunks import ChunkDescriptor, verify_chunk
from snapshotjob_contract.spark import JVM_CHUNKS_CONF
from spark_runtime import jvm_chunks, lineage
from spark_runtime.chunk_io import decode_batches
from spark_runtime.lineage import adopt, checkpoint
from spark_runtime.state import RunningAggregate, StateContext
from spark_runtime.state import keyed as state_module
from tests.fixtures.in_process_driver import Runner

PARTITIONS = 4


@pytest.fixture
def executors_write(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    """The runner, with every state written and read by executor tasks, never the driver."""
    monkeypatch.setattr(state_module, "driver_snapshot_max_bytes", lambda _spark: 0)
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_CHUNKS", 0)
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_BYTES", 0)
    yield runner
    runner.spark.conf.unset(JVM_CHUNKS_CONF)


def _use_jvm(runner: Runner, jvm: bool) -> None:
    runner.spark.conf.set(JVM_CHUNKS_CONF, "true" if jvm else "false")
    assert (jvm_chunks.state_chunks(runner.spark) is not None) == jvm, (
        "the session has no jvm/ classes: run 'make install'"
    )


def _state(runner: Runner, keys: int) -> tuple[RunningAggregate, Callable[[], RunningAggregate]]:
    """A running aggregate of string keys with a sum, a newest timestamp, a largest double, a
    count and null values, filled with ``keys`` keys; and a factory of empty ones like it."""
    spark = runner.spark
    batch = spark.range(keys * 3).select(
        F.concat(F.lit("key-"), (F.col("id") % keys).cast("string")).alias("key"),
        F.when(F.col("id") % 7 == 0, F.lit(None)).otherwise(F.col("id")).alias("v"),
        F.timestamp_seconds(F.col("id")).alias("at"),
        (F.col("id") / 3).alias("ratio"),
    )
    aggs = {
        "total": ("sum", "v"),
        "last": ("max", "at"),
        "peak": ("max", "ratio"),
        "n": ("count", None),
    }
    context = StateContext(spark, PARTITIONS, runner.address)

    def make() -> RunningAggregate:
        return RunningAggregate("jvm", context, ["key"], aggs, batch.schema)

    operator = make()
    operator.update(batch)
    return operator, make


def _save(runner: Runner, operator: RunningAggregate, jvm: bool) -> tuple[str, list[Any]]:
    _use_jvm(runner, jvm)
    map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
    writer = ChunkWriter(runner.store, map_name, 1, operator.name)
    return map_name, list(operator.save_and_prepare(1, writer, False))


def _restore(
    runner: Runner,
    make: Callable[[], RunningAggregate],
    map_name: str,
    chunks: list[Any],
    jvm: bool,
) -> DataFrame:
    _use_jvm(runner, jvm)
    restored = make()
    restored.restore(SnapshotRef(map_name, 1, tuple(chunks), PARTITIONS), runner.store)
    return restored.state


def _tables(runner: Runner, map_name: str, chunks: list[ChunkDescriptor]) -> dict[Any, Any]:
    """Each state chunk, verified against its descriptor, decoded, by ``(partition, seq)``."""
    tables = {}
    for chunk in chunks:
        if chunk.key.partition < PARTITIONS:
            (data,) = runner.store.read_chunks(map_name, [chunk.key])
            verify_chunk(map_name, 1, chunk, data)
            table = pa.Table.from_batches(decode_batches(data))
            tables[chunk.key.partition, chunk.key.seq] = (table, chunk.num_keys)
    return tables


def test_the_jvm_writes_the_chunks_the_python_workers_write(
    executors_write: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    runner = executors_write
    operator, _ = _state(runner, 3000)
    written = {}
    for jvm in (True, False):
        caplog.clear()
        with caplog.at_level("INFO", logger=state_module.__name__):
            map_name, chunks = _save(runner, operator, jvm)
        (line,) = [r.getMessage() for r in caplog.records if "chunks written" in r.getMessage()]
        assert f" path={'jvm' if jvm else 'python'} " in line, line
        written[jvm] = _tables(runner, map_name, chunks)
        runner.store.destroy(map_name)
    assert written[True].keys() == written[False].keys()
    assert len(written[True]) == PARTITIONS
    for key, (table, keys) in written[False].items():
        jvm_table, jvm_keys = written[True][key]
        assert jvm_keys == keys == table.num_rows, key
        assert jvm_table.schema.equals(table.schema, check_metadata=True), key
        assert jvm_table.equals(table), key


def test_the_jvm_puts_chunks_already_serialised(executors_write: Runner) -> None:
    """The writer builds each chunk's value in the client's own serialised form of a byte array
    (one copy, not the client's growing buffer and its copy): this checks the form still is the
    client's, which the test above then reads back through the Python client."""
    runner = executors_write
    _use_jvm(runner, True)
    chunks = jvm_chunks.state_chunks(runner.spark)
    assert chunks is not None
    address = runner.address
    assert chunks.putsSerialisedChunks(",".join(address.members), address.cluster_name)


@pytest.mark.parametrize(
    "columns",
    [
        ["key", "a", "b", "flag"],
        ["key", "a", "b"],
        ["key", "b"],
        ["b", "key", "a"],
    ],
    ids=["whole", "leading", "gap", "reordered"],
)
def test_the_jvm_writes_the_columns_of_a_projected_checkpoint(
    executors_write: Runner, columns: list[str]
) -> None:
    """The writer reads a checkpoint's stored rows as they are when the state is the
    checkpoint or its leading columns (an aggregate's state less its flag), and through the
    plan otherwise: every case writes exactly the frame's columns and rows."""
    runner = executors_write
    _use_jvm(runner, True)
    spark = runner.spark
    stored = checkpoint(
        spark.range(500)
        .repartition(PARTITIONS)
        .select(
            F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"),
            F.col("id").alias("a"),
            (F.col("id") * 2).cast("double").alias("b"),
            (F.col("id") % 3 == 0).alias("flag"),
        )
    )
    frame = stored.frame.select(*columns)
    chunks = jvm_chunks.state_chunks(spark)
    map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
    try:
        written = jvm_chunks.write_state(chunks, spark, frame, runner.address, map_name, 1, "op")
        for chunk, _writer in written:
            (data,) = runner.store.read_chunks(map_name, [chunk.key])
            table = pa.Table.from_batches(decode_batches(data))
            assert table.column_names == columns
            expected = (
                frame.filter(F.spark_partition_id() == chunk.key.partition).toArrow().to_pylist()
            )
            assert table.to_pylist() == expected, chunk.key
        assert sum(chunk.num_keys for chunk, _writer in written) == 500
    finally:
        runner.store.destroy(map_name)
        stored.release()


def _typed_frame(runner: Runner, fallback: bool) -> DataFrame:
    """Rows of every type the reader copies straight from Arrow's buffers, nulls in each
    column, empty and multi-byte strings; with ``fallback``, also a decimal and an array, which
    it reads through Spark's columnar view instead."""
    spark = runner.spark
    i = F.col("id")
    columns = [
        F.concat(F.lit("k-"), i.cast("string")).alias("key"),
        (i % 2 == 0).alias("flag"),
        (i % 200 - 100).cast("tinyint").alias("i8"),
        (i * 7 - 10_000).cast("smallint").alias("i16"),
        (i * 700_001 - 1_000_000_000).cast("int").alias("i32"),
        (i * 1_000_000_007).alias("i64"),
        (i / 7).cast("float").alias("f32"),
        F.when(i % 5 == 0, F.lit(float("nan"))).otherwise(-i / 3).alias("f64"),
        F.date_add(F.lit("2026-01-01").cast("date"), i.cast("int")).alias("day"),
        F.timestamp_micros(i * 1_000_003).alias("at"),
        F.timestamp_micros(i * 7).cast("timestamp_ntz").alias("local"),
        F.when(i % 3 == 0, F.lit("")).otherwise(F.repeat(F.lit("é€"), i % 11)).alias("text"),
        F.encode(F.repeat(F.lit("b"), i % 13), "utf-8").alias("blob"),
    ]
    if fallback:
        columns += [
            (i / 9).cast("decimal(12,3)").alias("amount"),
            F.array(i.cast("int"), F.lit(None).cast("int")).alias("pair"),
        ]
    frame = spark.range(3000).repartition(PARTITIONS).select(*columns)
    # Every column but the key is null in some rows, each at other rows.
    return frame.select(
        "key",
        *[
            F.when(F.hash("key", F.lit(n)) % 9 == 0, F.lit(None)).otherwise(F.col(c)).alias(c)
            for n, c in enumerate(frame.columns[1:])
        ],
    )


def _unsafe(row: Any) -> Any:
    """A stored row as an ``UnsafeRow``: a restored one is a ``SharedRow``, read through an
    ``UnsafeRow`` over its bytes."""
    return row.unsafe() if row.getClass().getSimpleName() == "SharedRow" else row


def _assert_sized(spark: Any, stored: list[Any]) -> None:
    """Rows restored from Arrow are SharedRows, each telling Spark's size estimator its own
    bytes: left to itself, the estimator would count a whole shared array for each row it
    samples, and the memory store would take the block for far larger than it is. (Collected
    here, each row comes in an array of its own: the bytes compared above are each row's
    slice of its shared array, as serialising a row copies it.)"""
    jvm = spark.sparkContext._jvm
    shell = jvm.io.snapshotjob.chunks.SharedRow.SHELL_BYTES
    assert {row.getClass().getSimpleName() for row in stored} == {"SharedRow"}
    for row in stored[:50]:
        assert jvm.org.apache.spark.util.SizeEstimator.estimate(row) == (
            shell + row.unsafe().getSizeInBytes()
        )


@pytest.mark.parametrize(
    ("fallback", "replicas"),
    [(False, 1), (True, 1), (False, 2)],
    ids=["copied", "projected", "replicated"],
)
def test_the_jvm_restores_rows_as_spark_lays_them_out_and_stores_them_once(
    executors_write: Runner, monkeypatch: pytest.MonkeyPatch, fallback: bool, replicas: int
) -> None:
    """The writer fills each chunk's Arrow columns from the stored rows' bytes, and the reader
    builds each row's bytes from Arrow's buffers (for other column types, both go through
    Spark's own writer and projection) and stores them as a local checkpoint itself, at the
    storage level ``checkpoint`` uses (with replicas: serialised, on that many executors). Rows
    are compared as bytes against Spark's own layout of the same rows: a key's equality and
    hash in Spark are its bytes', so a stray byte in a word or a padding would make equal keys
    differ. A failed read leaves no stored rows behind."""
    runner = executors_write
    _use_jvm(runner, True)
    spark = runner.spark
    monkeypatch.setattr(lineage, "state_replicas", lambda _spark: replicas)
    source = checkpoint(_typed_frame(runner, fallback))
    chunks = jvm_chunks.state_chunks(spark)
    map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
    schema = source.frame.schema
    try:
        written = jvm_chunks.write_state(
            chunks, spark, source.frame, runner.address, map_name, 1, "op"
        )
        partitions: list[list[ChunkDescriptor]] = [[] for _ in range(PARTITIONS)]
        for chunk, _writer in written:
            partitions[chunk.key.partition].append(chunk)
            # The writer's own columns (BatchColumns, or Spark's writer for the other types)
            # hold what Spark's conversion of the partition holds.
            (data,) = runner.store.read_chunks(map_name, [chunk.key])
            table = pa.Table.from_batches(decode_batches(data))
            part = source.frame.filter(F.spark_partition_id() == chunk.key.partition)
            assert repr(table.to_pylist()) == repr(part.toArrow().to_pylist()), chunk.key
        frame = jvm_chunks.read_state(
            chunks, spark, runner.address, map_name, 1, partitions, schema, 1, checkpointed=True
        )
        restored = adopt(frame)
        (rdd_id,) = restored.rdd_ids
        (info,) = [i for i in spark.sparkContext._jsc.sc().getRDDStorageInfo() if i.id() == rdd_id]
        assert info.numCachedPartitions() == PARTITIONS, "stored when read_state returns"
        level = info.storageLevel()
        assert (level.replication(), level.deserialized(), level.useDisk()) == (
            replicas,
            replicas == 1,
            True,
        )
        plan = frame._jdf.queryExecution().analyzed()
        stored = list(plan.rdd().toJavaRDD().collect())
        ours = sorted(bytes(_unsafe(row).getBytes()) for row in stored)
        if not fallback:
            _assert_sized(spark, stored)
        spark_rows = source.frame._jdf.queryExecution().executedPlan().executeCollect()
        theirs = sorted(bytes(row.getBytes()) for row in spark_rows)
        assert len(ours) == 3000
        assert ours == theirs
        # As text: NaN is not equal to itself.
        assert sorted(map(repr, restored.frame.collect())) == sorted(
            map(repr, source.frame.collect())
        )
        restored.release(blocking=True)
        assert rdd_id not in spark.sparkContext._jsc.getPersistentRDDs()

        before = set(spark.sparkContext._jsc.getPersistentRDDs().keySet())
        victim = partitions[1][0]
        runner.client.get_map(map_name).blocking().delete(str(victim.key))
        with pytest.raises(Exception, match=f"Chunk '{victim.key}' is missing from map"):
            jvm_chunks.read_state(
                chunks, spark, runner.address, map_name, 1, partitions, schema, 1, True
            )
        assert set(spark.sparkContext._jsc.getPersistentRDDs().keySet()) == before
    finally:
        runner.store.destroy(map_name)
        source.release()


@pytest.mark.parametrize(
    ("writer_jvm", "reader_jvm"),
    [(True, True), (True, False), (False, True)],
    ids=["jvm-jvm", "jvm-python", "python-jvm"],
)
def test_either_side_restores_what_the_other_wrote(
    executors_write: Runner, writer_jvm: bool, reader_jvm: bool
) -> None:
    runner = executors_write
    operator, make = _state(runner, 2000)
    map_name, chunks = _save(runner, operator, writer_jvm)
    try:
        restored = _restore(runner, make, map_name, chunks, reader_jvm)
        assert restored.schema == operator.state_schema
        assert sorted(restored.collect()) == sorted(operator.state.collect())
        # Read in place: partition p holds the keys Spark's hash partitioner puts in p.
        placed = restored.filter(F.spark_partition_id() != F.pmod(F.hash("key"), F.lit(PARTITIONS)))
        assert placed.count() == 0
    finally:
        runner.store.destroy(map_name)


def test_a_state_of_many_chunks_per_partition_comes_back_whole(
    executors_write: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Chunks of 64 KiB: each partition is several chunks and each chunk several record
    # batches, so the reader crosses chunk and batch boundaries inside a task.
    monkeypatch.setattr(jvm_chunks, "CHUNK_TARGET_BYTES", 64 * 1024)
    runner = executors_write
    runner.spark.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "1000")
    try:
        operator, make = _state(runner, 40_000)
        map_name, chunks = _save(runner, operator, jvm=True)
    finally:
        runner.spark.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    try:
        per_partition = [sum(c.key.partition == p for c in chunks) for p in range(PARTITIONS)]
        assert min(per_partition) >= 3, per_partition
        assert sum(c.num_keys for c in chunks) == 40_000
        restored = _restore(runner, make, map_name, chunks, jvm=True)
        assert restored.exceptAll(operator.state).count() == 0
        assert operator.state.exceptAll(restored).count() == 0
    finally:
        runner.store.destroy(map_name)


def test_a_changed_chunk_fails_the_jvm_restore_as_corrupted_naming_it(
    executors_write: Runner,
) -> None:
    runner = executors_write
    operator, make = _state(runner, 2000)
    map_name, chunks = _save(runner, operator, jvm=True)
    try:
        victim = next(c for c in chunks if c.key.partition == 2)
        (data,) = runner.store.read_chunks(map_name, [victim.key])
        changed = bytearray(data)
        changed[len(changed) // 2] ^= 0xFF
        runner.store.put_chunks(map_name, [(victim.key, bytes(changed))])
        with pytest.raises(Exception) as failure:
            _restore(runner, make, map_name, chunks, jvm=True).count()
        corrupted = SnapshotCorrupted.find_in(str(failure.value))
        assert corrupted is not None, str(failure.value)[:2000]
        assert corrupted.map_name == map_name and corrupted.snapshot_id == 1
        assert f"chunk '{victim.key}' does not match its checksum" in corrupted.problem
    finally:
        runner.store.destroy(map_name)


def test_a_missing_chunk_fails_the_jvm_restore_naming_it(executors_write: Runner) -> None:
    runner = executors_write
    operator, make = _state(runner, 2000)
    map_name, chunks = _save(runner, operator, jvm=True)
    try:
        victim = next(c for c in chunks if c.key.partition == 1)
        runner.client.get_map(map_name).blocking().delete(str(victim.key))
        with pytest.raises(Exception, match=f"Chunk '{victim.key}' is missing from map"):
            _restore(runner, make, map_name, chunks, jvm=True).count()
    finally:
        runner.store.destroy(map_name)
