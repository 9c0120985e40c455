"""State operators on a real local Spark, without a snapshot store.

Checks what the epoch loop relies on between snapshots: running aggregates merge batches into
the state exactly as a one-shot aggregation over all rows would, the state stays hash-partitioned
into the job's partitions (what a snapshot's chunk keys promise), superseded state is freed, and
a tumbling window releases its open windows once when a bounded input ends, also across a
save/load of its driver values.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.chunk_io import StoreAddress
from spark_runtime.lineage import checkpoint
from spark_runtime.sinks import participant as participant_module
from spark_runtime.sinks.base import Sink
from spark_runtime.sinks.participant import EpochOutput
from spark_runtime.state import Deduplicate, RunningAggregate, StateContext, TumblingWindow

PARTITIONS = 4


@pytest.fixture
def context(spark: SparkSession) -> Iterator[StateContext]:
    # No snapshot is taken here, so the store is never contacted.
    yield StateContext(spark, PARTITIONS, StoreAddress(("127.0.0.1:1",), "unused"))


def _rows(frame: DataFrame) -> set[tuple[Any, ...]]:
    return {tuple(row) for row in frame.collect()}


def test_running_aggregate_matches_a_one_shot_aggregation(
    spark: SparkSession, context: StateContext
) -> None:
    schema = "k string, v long"
    epochs: list[list[tuple[str, int | None]]] = [
        [("a", 1), ("b", None), ("a", 5)],
        [("c", 7), ("b", 3)],
        [("a", None), ("d", None)],
        [("c", -2), ("a", 2)],
    ]
    aggs = {
        "n": ("count", None),
        "nv": ("count", "v"),
        "total": ("sum", "v"),
        "low": ("min", "v"),
        "high": ("max", "v"),
    }
    first = spark.createDataFrame(epochs[0], schema)
    operator = RunningAggregate("sums", context, ["k"], aggs, first.schema)
    seen: list[tuple[str, int | None]] = []
    for rows in epochs:
        batch = spark.createDataFrame(rows, schema)
        seen.extend(rows)
        output = operator.update(batch)
        assert output.columns == ["k", "n", "nv", "total", "low", "high"]
        # The output is the new aggregates of exactly the keys the batch touched.
        assert {r[0] for r in _rows(output)} == {k for k, _v in rows}
        everything = spark.createDataFrame(seen, schema)
        expected = everything.groupBy("k").agg(
            F.count(F.lit(1)).alias("n"),
            F.count("v").alias("nv"),
            F.sum("v").alias("total"),
            F.min("v").alias("low"),
            F.max("v").alias("high"),
        )
        assert _rows(operator.state) == _rows(expected)
    assert operator.state.schema == operator.state_schema
    assert _rows(operator.state.filter(F.col("k") == "d")) == {("d", 1, 0, None, None, None)}


def test_state_stays_hash_partitioned_into_the_job_partitions(
    spark: SparkSession, context: StateContext
) -> None:
    batch = spark.range(2000).select((F.col("id") % 97).alias("key"), F.col("id").alias("v"))
    operator = RunningAggregate("p", context, ["key"], {"s": ("sum", "v")}, batch.schema)
    operator.update(batch)
    operator.update(batch.filter(F.col("key") < 10))
    state = operator.state
    assert state.rdd.getNumPartitions() == PARTITIONS
    # Spark's hash partitioner: pmod(murmur3(key), partitions).
    misplaced = state.filter(
        F.spark_partition_id() != F.pmod(F.hash("key"), F.lit(PARTITIONS))
    ).count()
    assert misplaced == 0
    assert state.count() == 97


def test_superseded_state_is_freed(spark: SparkSession, context: StateContext) -> None:
    jsc = spark.sparkContext._jsc
    batch = spark.range(100).select((F.col("id") % 7).alias("key"), F.col("id").alias("v"))
    operator = RunningAggregate("free", context, ["key"], {"s": ("sum", "v")}, batch.schema)
    operator.update(batch)
    held = set(operator._state.rdd_ids)
    assert len(held) == 1 and held <= set(jsc.getPersistentRDDs().keySet())
    operator.update(batch)
    assert not held & set(jsc.getPersistentRDDs().keySet())
    materialised = checkpoint(batch)
    assert materialised.rdd_ids <= set(jsc.getPersistentRDDs().keySet())
    materialised.release()
    assert materialised.rdd_ids == set()


def test_deduplicate_passes_first_sightings_only(
    spark: SparkSession, context: StateContext
) -> None:
    schema = "id long, name string"
    first = spark.createDataFrame([(1, "x"), (2, "y"), (2, "y")], schema)
    operator = Deduplicate("d", context, ["id"], first.schema)
    assert _rows(operator.update(first)) == {(1, "x"), (2, "y")}
    second = spark.createDataFrame([(2, "y"), (3, "z")], schema)
    assert _rows(operator.update(second)) == {(3, "z")}


def _events(spark: SparkSession, seconds: list[int]) -> DataFrame:
    return spark.createDataFrame([(s % 2, s) for s in seconds], "key long, second long").select(
        "key", F.col("second").alias("v"), F.timestamp_seconds("second").alias("ts")
    )


def _windows(frame: DataFrame) -> set[tuple[int, int, int]]:
    return {(row["key"], int(row["window_start"].timestamp()), row["n"]) for row in frame.collect()}


def test_tumbling_window_emits_open_windows_once_at_end_of_input(
    spark: SparkSession, context: StateContext
) -> None:
    batch = _events(spark, list(range(0, 25)))
    window = TumblingWindow(
        "w", context, ["key"], "ts", 10, {"n": ("count", None)}, 2, batch.schema
    )
    # Watermark 22 s: [0, 10) and [10, 20) close; [20, 30) stays open.
    assert _windows(window.update(batch)) == {(0, 0, 5), (1, 0, 5), (0, 10, 5), (1, 10, 5)}
    assert window.holds_open_output
    empty = spark.createDataFrame([], batch.schema)
    assert _windows(window.update(empty)) == set()

    saved = window.driver_values()
    window.end_input()
    assert not window.holds_open_output
    assert _windows(window.update(empty)) == {(0, 20, 3), (1, 20, 2)}
    assert window.state.count() == 0
    assert _windows(window.update(empty)) == set()

    # A restore from before the closing epoch closes the windows again; from after, does not.
    window.load_driver_values(saved)
    assert window.holds_open_output
    window.load_driver_values(window.driver_values() | {"inputEnded": True})
    assert not window.holds_open_output
    legacy = {k: v for k, v in saved.items() if k != "inputEnded"}
    window.load_driver_values(legacy)
    assert window.holds_open_output


def _exchanges(frame: DataFrame) -> list[str]:
    """The shuffles of ``frame``'s physical plan, as Spark prints them."""
    plan = str(frame._jdf.queryExecution().executedPlan().toString())
    return [line.strip() for line in plan.splitlines() if "Exchange" in line]


def test_a_merge_shuffles_only_the_batch_once_the_state_is_partitioned(
    spark: SparkSession, context: StateContext
) -> None:
    # After a restore the state's partitioning is unknown and the first merge shuffles it;
    # from then on Spark knows it, and an epoch moves only its batch.
    batch = spark.range(500).select((F.col("id") % 31).alias("key"), F.col("id").alias("v"))
    operator = RunningAggregate("moves", context, ["key"], {"s": ("sum", "v")}, batch.schema)
    assert not operator.state_partitioned
    operator.update(batch)
    assert operator.state_partitioned, operator._state.partitioning
    plan = operator._merge.apply(operator.state, batch, operator.state_partitioned)
    (exchange,) = _exchanges(plan)
    assert "REPARTITION_BY_NUM" in exchange, exchange
    operator.update(batch.filter(F.col("key") < 5))
    assert _rows(operator.state) == _rows(
        batch.unionByName(batch.filter(F.col("key") < 5)).groupBy("key").agg(F.sum("v").alias("s"))
    )
    misplaced = operator.state.filter(
        F.spark_partition_id() != F.pmod(F.hash("key"), F.lit(PARTITIONS))
    )
    assert misplaced.count() == 0


def test_a_merge_planned_into_other_partitions_is_placed_again(
    spark: SparkSession, context: StateContext, caplog: pytest.LogCaptureFixture
) -> None:
    # A session that keeps a union's partitioning unknown and shuffles into 3 partitions:
    # the merge that relied on the state's partitioning comes out in 3, and the state must
    # still be placed in the job's 4 by key.
    batch = spark.range(500).select((F.col("id") % 31).alias("key"), F.col("id").alias("v"))
    operator = RunningAggregate("placed", context, ["key"], {"s": ("sum", "v")}, batch.schema)
    operator.update(batch)
    assert operator.state_partitioned
    changed = {"spark.sql.unionOutputPartitioning": "false", "spark.sql.shuffle.partitions": "3"}
    before = {key: str(spark.conf.get(key)) for key in changed}
    for key, value in changed.items():
        spark.conf.set(key, value)
    try:
        with caplog.at_level("WARNING"):
            operator.update(batch)
    finally:
        for key, old in before.items():
            spark.conf.set(key, old)
    state = operator.state
    assert state.rdd.getNumPartitions() == PARTITIONS
    misplaced = state.filter(F.spark_partition_id() != F.pmod(F.hash("key"), F.lit(PARTITIONS)))
    assert misplaced.count() == 0
    assert _rows(state) == _rows(batch.unionByName(batch).groupBy("key").agg(F.sum("v").alias("s")))
    assert "State re-partitioned after a merge operator=placed" in caplog.text


class _Discard(Sink):
    """A sink that is never written here: the test reads what the participant buffers."""

    def write(self, frame: DataFrame) -> int | None:
        raise AssertionError("buffered output is not written per epoch")


def _persisted(spark: SparkSession) -> set[int]:
    return set(spark.sparkContext._jsc.getPersistentRDDs().keySet())


def test_buffered_output_holds_the_states_it_reads_instead_of_a_copy(
    spark: SparkSession, context: StateContext, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Each epoch's output is a filter of that epoch's state: buffering holds the state
    # (no job, no copy) until the buffer is released, and reads back that epoch's rows
    # even after the state moved on.
    batch = spark.range(300).select((F.col("id") % 17).alias("key"), F.col("id").alias("v"))
    operator = RunningAggregate("held", context, ["key"], {"s": ("sum", "v")}, batch.schema)
    output = EpochOutput("held-out", _Discard(), buffered=True)
    before = _persisted(spark)
    expected = []
    for epoch in range(3):
        out = operator.update(batch.filter(F.col("key") <= epoch * 5))
        expected.append({(*row, epoch) for row in _rows(out)})
        output.accept(epoch, out)
    # The three epochs' states, nothing else: no copy of the output was stored.
    assert len(_persisted(spark) - before) == 3
    assert all(frame.held_bytes > 0 for frame in output._pending)
    assert [_rows(frame.frame) for frame in output._pending] == expected
    output._drop_buffers([])
    assert _persisted(spark) - before == operator._state.rdd_ids

    # Over the budget, or not deterministic: materialised as before, a copy per epoch.
    monkeypatch.setattr(participant_module, "HELD_STATE_MAX_BYTES", 0)
    output.accept(3, operator.update(batch))
    output.accept(4, operator.update(batch).withColumn("r", F.rand()))
    monkeypatch.undo()
    output.accept(5, operator.update(batch).withColumn("r", F.rand()))
    assert [frame.held_bytes for frame in output._pending] == [0, 0, 0]
    assert len(_persisted(spark) - before) == 4  # the three copies and the current state
    output._drop_buffers([])
    assert _persisted(spark) - before == operator._state.rdd_ids
