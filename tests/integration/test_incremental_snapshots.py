"""Incremental snapshots through the runtime: deltas, inherited chains, restores that apply them.

Real Hazelcast members, real Spark (``local[2]``), real PostgreSQL for the output. A running
aggregate and a deduplication of a stream whose epochs each touch a few of its keys: with
``incremental`` the snapshots after the first write a delta for the partitions those keys
are in and inherit the others' chains, in the job's one chain map; restores apply the chains
(in the executors' JVMs, in Python workers, or in the driver) and the output, appended so a
replayed epoch would show as a duplicate, equals that of an uninterrupted run without
incremental snapshots. A lost delta fails the job naming the chunk, not a restart loop.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import psycopg
import pytest
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshot_protocol import ChunkWriter, PipelineShape, SnapshotRef, ValidationRecord
from snapshot_protocol.chunks import chunks_of
from snapshot_protocol.incremental import ChainPolicy
from snapshotjob_contract import CHAIN_MAP_INDEX, snapshot_map_name
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spark import JVM_CHUNKS_CONF
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sinks import PostgresSink
from spark_runtime.snapshot_reader import read_state_table
from spark_runtime.sources import SequenceSource
from spark_runtime.state import RunningAggregate, StateContext
from spark_runtime.state import keyed as state_module
from spark_runtime.streaming import Pipeline
from tests.fixtures.in_process_driver import Build, Runner

PARTITIONS = 4
_PairRow = tuple[str | None, int, int]
KEYS = 4000
EPOCHS = 12


@pytest.fixture
def executors(runner: Runner, monkeypatch: pytest.MonkeyPatch) -> Iterator[Runner]:
    """The runner, every state written and read by executor tasks (incremental snapshots are
    written only there)."""
    monkeypatch.setattr(state_module, "driver_snapshot_max_bytes", lambda _spark: 0)
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_CHUNKS", 0)
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_BYTES", 0)
    yield runner
    runner.spark.conf.unset(JVM_CHUNKS_CONF)


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def _snapshot_each(
    runner: Runner, operator: RunningAggregate, batches: Sequence[Sequence[Any]], schema: str
) -> SnapshotRef:
    """Updates the operator with each batch and snapshots it after each one, every snapshot
    building on the one before, in a map of its own; returns the last."""
    map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
    previous = None
    for snapshot_id, rows in enumerate(batches):
        operator.update(runner.spark.createDataFrame(rows, schema))
        writer = ChunkWriter(runner.store, map_name, snapshot_id, operator.name, previous)
        chunks = tuple(operator.save_and_prepare(snapshot_id, writer, False))
        operator.commit_finish(snapshot_id, True)
        previous = SnapshotRef(map_name, snapshot_id, chunks, PARTITIONS)
    assert previous is not None
    return previous


def _sums(
    runner: Runner, name: str, schema: str, keys: list[str], policy: ChainPolicy | None = None
) -> Callable[[], RunningAggregate]:
    """A factory of empty running sums of ``value`` by ``keys`` over rows of ``schema``, taking
    incremental snapshots (within ``policy``'s bounds, if given)."""
    spark = runner.spark
    context = StateContext(
        spark, PARTITIONS, runner.address, incremental=True, chain_policy=policy or ChainPolicy()
    )
    aggs: dict[str, tuple[str, str | None]] = {"total": ("sum", "value")}
    empty = spark.createDataFrame([], schema)
    return lambda: RunningAggregate(name, context, keys, aggs, empty.schema)


def _pipeline(dsn: str, table: str) -> Build:
    """Running sums of 4000 keys: the first epoch (4000 values) touches every key, each later
    one 2 (values ``2000k .. 2000k + 1999`` have key ``k``), so most partitions do not change
    in an epoch, and a changed one's delta is far smaller than the partition."""

    def build(p: Pipeline) -> None:
        numbers = p.readStream(
            SequenceSource(rows_per_epoch=KEYS, end=KEYS * EPOCHS), name="numbers"
        )
        value = F.col("value")
        key = F.when(value < KEYS, value).otherwise((value / 2000).cast("long") % KEYS)
        keyed = numbers.select(key.alias("key"), "value")
        sums = keyed.groupBy("key").agg(
            F.sum("value").alias("total"), F.count("*").alias("n"), name="sums"
        )
        # Appending: a replayed epoch would show up as a duplicate row.
        sums.writeStream(PostgresSink(dsn, f"{table}_sums"))
        firsts = keyed.dropDuplicates(["key"], name="firsts")
        firsts.writeStream(PostgresSink(dsn, f"{table}_firsts"))

    return build


def test_incremental_snapshots_restore_exactly_the_uninterrupted_output(
    executors: Runner, postgres_dsn: str, caplog: pytest.LogCaptureFixture
) -> None:
    runner = executors
    job = f"incr-{uuid.uuid4().hex[:8]}"
    with caplog.at_level("INFO", logger=state_module.__name__):
        assert runner.run(_pipeline(postgres_dsn, "ref"), f"{job}-ref", 10**9) is (
            DriverExit.COMPLETED
        )
        build = _pipeline(postgres_dsn, "inc")
        # A snapshot after each of 5 epochs; then 2 epochs whose output no snapshot commits;
        # then the rest, a snapshot after each epoch again.
        assert runner.run(build, job, 0, 5, incremental=True) is DriverExit.INTERRUPTED
        assert runner.run(build, job, 10**9, 2, incremental=True) is DriverExit.INTERRUPTED
        assert runner.run(build, job, 0, None, incremental=True) is DriverExit.COMPLETED
    lines = [r.getMessage() for r in caplog.records]
    increments = [line for line in lines if "increment=full:" in line]
    assert any("delta:0" not in line and "keep:0" not in line for line in increments), increments
    restored = [line for line in lines if "Restored state operator=sums" in line]
    assert restored and all("path=jvm" in line for line in restored), restored
    for name in ("sums", "firsts"):
        query = f"SELECT * FROM {{}}_{name} ORDER BY 1, 2"
        expected = _rows(postgres_dsn, query.format("ref"))
        assert _rows(postgres_dsn, query.format("inc")) == expected
    sums = _rows(postgres_dsn, "SELECT key, n FROM inc_sums")
    # One row per key and epoch touching it: every key in the first, 2 in each other one.
    assert len(sums) == len(set(sums)) == KEYS + 2 * (EPOCHS - 1)
    record = FileRecordStore(runner.record_path(job), "reader").read()
    assert record.data_map_index == CHAIN_MAP_INDEX


def test_the_jvm_the_python_workers_and_the_driver_restore_the_same_chain(
    executors: Runner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A state with a full snapshot and two deltas on it: each reader applies the chain."""
    runner = executors
    spark = runner.spark
    context = StateContext(spark, PARTITIONS, runner.address, incremental=True)
    schema = "key long, value long"
    aggs: dict[str, tuple[str, str | None]] = {"total": ("sum", "value"), "n": ("count", None)}

    def make() -> RunningAggregate:
        empty = spark.createDataFrame([], schema)
        return RunningAggregate("chain", context, ["key"], aggs, empty.schema)

    operator = make()
    batches = [[(k, k) for k in range(500)], [(3, 1), (7, 1)], [(3, 10), (450, 2)]]
    previous = _snapshot_each(runner, operator, batches, schema)
    map_name = previous.map_name
    assert any(c.delta for c in previous.chunks)
    assert any(c.key.snapshot_id == 0 for c in previous.chunks)
    expected = sorted(tuple(r) for r in operator.state.collect())
    assert (3, 3 + 1 + 10, 3) in expected and (450, 452, 2) in expected

    readers = {"jvm": "true", "python": "false"}
    for reader, conf in readers.items():
        spark.conf.set(JVM_CHUNKS_CONF, conf)
        restored = make()
        restored.restore(previous, runner.store)
        assert sorted(tuple(r) for r in restored.state.collect()) == expected, reader
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_CHUNKS", 10**6)
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_BYTES", 10**9)
    restored = make()
    restored.restore(previous, runner.store)
    assert sorted(tuple(r) for r in restored.state.collect()) == expected, "driver"
    # Read outside any job (python -m spark_runtime snapshot read), as a restore would.
    description = f"RunningAggregate(keys=key; {operator.state_schema.simpleString()})"
    runner.store.put_validation_record(
        map_name,
        ValidationRecord(
            previous.snapshot_id,
            previous.chunks,
            0,
            0,
            0,
            "test",
            PipelineShape({"chain": description}, PARTITIONS),
        ),
    )
    table = read_state_table(runner.store, map_name, "chain")
    assert sorted(zip(*table.to_pydict().values(), strict=True)) == expected, "reader"
    runner.store.destroy(map_name)


def test_a_turn_is_rewritten_beside_the_delta_of_the_other_partitions(
    executors: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    """Chains of at most 2 deltas, every partition changed at every snapshot: from the
    second snapshot on, a partition whose turn it is while its chain has a delta is rewritten
    in full by a Spark job of its own beside the delta of the others, and gets no delta;
    the chains the snapshots list restore the state, through the JVM and Python workers."""
    runner = executors
    spark = runner.spark
    schema = "key long, value long"
    make = _sums(runner, "turns", schema, ["key"], ChainPolicy(max_deltas=2, delta_ratio=0.5))

    # 1000 keys, then 40 of them (every partition's, each delta far within its bound) a time.
    batches = [[(k, 1) for k in range(1000)]] + [
        [(k, i) for k in range(i * 40, i * 40 + 40)] for i in range(1, 7)
    ]
    operator = make()
    with caplog.at_level("INFO", logger=state_module.__name__):
        previous = _snapshot_each(runner, operator, batches, schema)
    lines = [r.getMessage() for r in caplog.records if "operator=turns" in r.getMessage()]
    beside = {
        int(line.split("snapshot_id=")[1].split()[0]): line.rsplit("fullBesideDelta=", 1)[1]
        for line in lines
        if "fullBesideDelta=" in line
    }
    early = {sid: partitions for sid, partitions in beside.items() if partitions != "none"}
    assert len(early) >= 2, lines
    last_id = previous.snapshot_id
    # Snapshot 6 is partitions 0 and 3's turn (1 + 2 deltas: (6 + p) % 3 == 0), their
    # chains each with a delta: it lists their new full versions, no delta of theirs.
    assert early.get(last_id) == "0,3", lines
    for partition in (0, 3):
        mine = [c for c in previous.chunks if c.key.partition == partition]
        assert mine and all(c.key.snapshot_id == last_id and not c.delta for c in mine), mine
    assert any(c.delta for c in previous.chunks), previous.chunks
    expected = sorted(tuple(r) for r in operator.state.collect())
    for conf in ("true", "false"):  # the executors' JVMs, then Python workers
        spark.conf.set(JVM_CHUNKS_CONF, conf)
        restored = make()
        restored.restore(previous, runner.store)
        assert sorted(tuple(r) for r in restored.state.collect()) == expected, conf
    runner.store.destroy(previous.map_name)


def test_a_chain_restore_counts_the_rows_it_leaves_out_in_the_state_size(
    executors: Runner,
) -> None:
    """A delta replaces 45 % of the keys: the full version's rows of those keys are left out of
    the restored state, but they stay in the arrays they share with rows kept (BatchRows), so
    the rows kept carry their bytes in the size they tell Spark's memory store (SharedRow,
    ChainRows). The stored block's size is then that of every row read, not only the rows
    kept; Spark samples it (SizeEstimator), hence the tolerance."""
    runner = executors
    spark = runner.spark
    schema = "key string, value long"
    make = _sums(runner, "carried", schema, ["key"])

    keys = [f"{k:0100d}" for k in range(4000)]  # rows of 8 + 16 + 104 bytes
    replaced = [k for i, k in enumerate(keys) if i % 20 < 9]
    previous = _snapshot_each(
        runner, make(), [[(k, 1) for k in keys], [(k, 1) for k in replaced]], schema
    )
    assert any(c.delta for c in previous.chunks), previous.chunks
    spark.conf.set(JVM_CHUNKS_CONF, "true")
    restored = make()
    restored.restore(previous, runner.store)
    (rdd_id,) = [int(i) for i in restored._state.rdd_ids]
    (info,) = [i for i in spark.sparkContext._jsc.sc().getRDDStorageInfo() if i.id() == rdd_id]
    shell = spark.sparkContext._jvm.io.snapshotjob.chunks.SharedRow.SHELL_BYTES
    row_bytes = 128
    kept = len(keys) * (shell + row_bytes)
    left_out = len(replaced) * row_bytes
    # Spark samples 200 of a block's rows (the lower of two samples of 100, scaled up), so it
    # counts the carried bytes roughly: 0.63 of them here. Without them it would count none,
    # only its vector of references, a few bytes a row.
    size = info.memSize()
    assert kept + 0.4 * left_out <= size <= kept + 1.2 * left_out + 16 * len(keys), (
        size,
        kept,
        left_out,
    )
    runner.store.destroy(previous.map_name)


def test_the_jvm_applies_a_chain_by_the_whole_key_first_column_shared_or_null(
    executors: Runner,
) -> None:
    """Keys (name, shard): the deltas update ("a", 2) and (null, 1) and add ("c", 1); the full
    version also has ("a", 1) and (null, 2), whose first key column a delta's key shares, so the
    JVM's first-column filter lets them through to the whole key's lookup, which keeps them."""
    runner = executors
    spark = runner.spark
    schema = "name string, shard int, value long"
    make = _sums(runner, "pairs", schema, ["name", "shard"])

    # Enough other keys that each delta is far within its chain's bound.
    base: list[_PairRow] = [(f"n{i}", i % 3, 1) for i in range(2000)]
    special: list[_PairRow] = [("a", 1, 10), ("a", 2, 20), (None, 1, 30), (None, 2, 40)]
    batches: list[list[_PairRow]] = [
        base + special,
        [("a", 2, 1), (None, 1, 1)],
        [("a", 2, 2), ("c", 1, 5)],
    ]
    previous = _snapshot_each(runner, make(), batches, schema)
    assert any(c.delta and c.key.snapshot_id == 1 for c in previous.chunks), previous.chunks
    expected = sorted(
        [(n, s, v) for n, s, v in base]
        + [("a", 1, 10), ("a", 2, 23), (None, 1, 31), (None, 2, 40), ("c", 1, 5)],
        key=str,
    )
    spark.conf.set(JVM_CHUNKS_CONF, "true")
    restored = make()
    restored.restore(previous, runner.store)
    assert sorted((tuple(r) for r in restored.state.collect()), key=str) == expected
    runner.store.destroy(previous.map_name)


def test_a_lost_delta_fails_the_job_naming_its_chunk(executors: Runner, postgres_dsn: str) -> None:
    runner = executors
    job = f"incr-{uuid.uuid4().hex[:8]}"
    build = _pipeline(postgres_dsn, "lost")
    # 16 partitions: a snapshot rewrites at most one chain early, so deltas are inherited.
    exit_code = runner.run(build, job, 0, 5, partitions=16, incremental=True)
    assert exit_code is DriverExit.INTERRUPTED
    record = FileRecordStore(runner.record_path(job), "reader").read()
    map_name = snapshot_map_name(job, CHAIN_MAP_INDEX, 1)
    validation = runner.store.get_validation_record(map_name, record.snapshot_id)
    assert validation is not None
    inherited = [
        c.key
        for c in chunks_of(validation, "sums")
        if c.delta and c.key.snapshot_id < record.snapshot_id
    ]
    assert inherited, "the restore point inherits no delta"
    runner.client.get_map(map_name).blocking().delete(str(inherited[0]))
    exit_code = runner.run(build, job, 0, None, partitions=16, incremental=True)
    assert exit_code is DriverExit.SNAPSHOT_CORRUPTED
    assert runner.last is not None and runner.last.exit_message is not None
    message = runner.last.exit_message
    assert f"Snapshot {record.snapshot_id} in map '{map_name}' is corrupted" in message
    assert f"'{inherited[0]}'" in message


def test_empty_partitions_are_kept_without_a_write_until_a_key_fills_one(
    executors: Runner, caplog: pytest.LogCaptureFixture
) -> None:
    """Keys in two of four state partitions: the writer puts no chunk for an empty partition,
    and a later snapshot keeps it so (no job rewrites it) while a changed key's partition gets
    a delta; a new key in an empty partition makes that one full; the chain restores the
    state."""
    runner = executors
    spark = runner.spark
    context = StateContext(spark, PARTITIONS, runner.address, incremental=True)
    schema = "key long, value long"
    aggs: dict[str, tuple[str, str | None]] = {"total": ("sum", "value")}
    # Where Spark's hash partitioner puts keys (as the state's repartition does).
    placed = (
        spark.createDataFrame([(k,) for k in range(2000)], "key long")
        .repartition(PARTITIONS, "key")
        .select("key", F.spark_partition_id().alias("p"))
        .collect()
    )
    partition_of = {row["key"]: row["p"] for row in placed}
    used = {partition_of[0], next(p for p in partition_of.values() if p != partition_of[0])}
    # Enough keys that a one-key delta is far within the chain's bound (half the partition).
    keys = [k for k in range(800) if partition_of[k] in used]
    filled = next(k for k, p in partition_of.items() if p not in used)
    batches = [[(k, 1) for k in keys], [(0, 2)], [(0, 3)], [(filled, 5)]]
    empty = spark.createDataFrame([], schema)
    operator = RunningAggregate("sparse", context, ["key"], aggs, empty.schema)
    with caplog.at_level("INFO", logger=state_module.__name__):
        previous = _snapshot_each(runner, operator, batches, schema)
    increments = [
        r.getMessage().rsplit("increment=", 1)[1].split()[0]
        for r in caplog.records
        if "operator=sparse" in r.getMessage() and "increment=" in r.getMessage()
    ]
    # Snapshot 0 is full (no restore point); 1 and 2 write key 0's delta and keep the other
    # three partitions, two of them empty; 3 fills an empty partition in full.
    assert increments == [
        "none",
        "full:0,delta:1,keep:3",
        "full:0,delta:1,keep:3",
        "full:1,delta:0,keep:3",
    ], increments
    listed = {c.key.partition for c in previous.chunks if c.key.partition < PARTITIONS}
    assert listed == used | {partition_of[filled]}
    restored = RunningAggregate("sparse", context, ["key"], aggs, empty.schema)
    restored.restore(previous, runner.store)
    expected = sorted([(k, 1 + (5 if k == 0 else 0)) for k in keys] + [(filled, 5)])
    assert sorted(tuple(r) for r in restored.state.collect()) == expected
    runner.store.destroy(previous.map_name)
