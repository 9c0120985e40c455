"""The pipeline API against Spark itself: the same DataFrame code, the same output.

Each construct runs through :class:`~spark_runtime.pipeline.Pipeline` epoch by epoch on a real
local Spark, with a sink that keeps every epoch's rows. The running aggregation, the
de-duplication and ``applyInPandasWithState`` are given one function that is also run, unchanged,
as a Structured Streaming query over the same files, one file per micro-batch: every epoch's
output must equal that micro-batch's. Windows are compared with a batch aggregation of all the
input (Structured Streaming emits a window one batch later than the runtime, since its
watermark moves between batches). Timeouts and the constructs the state store cannot keep are
checked on their own. No snapshot store is involved: restores are test_runtime_restore's.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.sinks import Sink
from spark_runtime.sources import FileSource, SequenceSource
from spark_runtime.state import StateContext
from spark_runtime.streaming import EpochStream, Pipeline

Rows = list[tuple[Any, ...]]
SCHEMA = "id long, user string, amount long, ts timestamp"


class _Collect(Sink):
    """Keeps every epoch's rows, sorted."""

    def __init__(self) -> None:
        self.epochs: list[Rows] = []

    def write(self, frame: DataFrame) -> None:
        self.epochs.append(sorted(tuple(row) for row in frame.collect()))


def _run(
    spark: SparkSession, define: Callable[[Pipeline], EpochStream], max_epochs: int = 20
) -> list[Rows]:
    """Defines a pipeline whose last stream goes to a collecting sink; runs it to the end."""
    sink = _Collect()
    context = StateContext(spark, 3, StoreAddress(("127.0.0.1:1",), "unused"))
    pipeline = Pipeline(spark, context, ProcessingGuarantee.NONE, "uid", {})
    pipeline.define(lambda p: define(p).writeStream(sink))
    epoch = 0
    while (plan := pipeline.plan_epoch()) is not None:
        pipeline.run_epoch(epoch, plan)
        epoch += 1
        assert epoch <= max_epochs, "the input never ran out"
    return sink.epochs


@pytest.fixture
def events(tmp_path: Path) -> Path:
    """Four JSON files of purchases by two of four users each; ids repeat across files."""
    folder = tmp_path / "events"
    folder.mkdir()
    for index in range(4):
        rows = [
            {
                "id": i,
                "user": f"u{(i // 6) % 4}",
                "amount": (i * 7) % 11 if i % 5 else None,
                "ts": f"2026-01-01T00:{i // 4:02d}:{(i * 13) % 60:02d}Z",
            }
            for i in range(index * 6, index * 6 + 9)
        ]
        path = folder / f"part-{index}.json"
        path.write_text("\n".join(json.dumps(r) for r in rows))
        # Structured Streaming takes the oldest file first, the runtime the first by name.
        os.utime(path, (1_700_000_000 + index, 1_700_000_000 + index))
    return folder


def _structured_streaming(
    spark: SparkSession, folder: Path, query: Callable[[Any], Any], mode: str, tmp: Path
) -> list[Rows]:
    """Runs ``query`` as a Structured Streaming query, one file per micro-batch."""
    batches: list[Rows] = []
    stream = spark.readStream.schema(SCHEMA).option("maxFilesPerTrigger", 1).json(str(folder))

    def collect(frame: DataFrame, _batch: int) -> None:
        batches.append(sorted(tuple(row) for row in frame.collect()))

    # One shuffle partition: PySpark 4.3's applyInPandasWithState fails on a micro-batch
    # partition without any key ("Cannot convert pyarrow.lib.ChunkedArray"), a Spark bug.
    partitions = spark.conf.get("spark.sql.shuffle.partitions")
    spark.conf.set("spark.sql.shuffle.partitions", "1")
    running = (
        query(stream)
        .writeStream.outputMode(mode)
        .foreachBatch(collect)
        .option("checkpointLocation", str(tmp / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    try:
        running.awaitTermination(120)
    finally:
        spark.conf.set("spark.sql.shuffle.partitions", partitions)
    return batches


def _ours(spark: SparkSession, folder: Path, query: Callable[[Any], Any]) -> list[Rows]:
    def define(p: Pipeline) -> EpochStream:
        source = FileSource(str(folder), "json", SCHEMA, max_files_per_epoch=1, bounded=True)
        result: EpochStream = query(p.readStream(source))
        return result

    return _run(spark, define)


def _totals(events: Any) -> Any:
    return (
        events.withColumn("cents", F.col("amount") * 100)
        .groupBy("user")
        .agg(
            F.sum("cents").alias("cents"),
            F.count("*").alias("rows"),
            F.count("amount").alias("amounts"),
            F.min("amount").alias("low"),
            F.max(F.col("amount") + F.col("id")).alias("high"),
        )
    )


def _first_purchases(events: Any) -> Any:
    return events.dropDuplicates(["id"]).select("id", "user")


def _means(events: Any) -> Any:
    # Nested, so that the function is shipped to Python workers by value: they cannot import
    # a test module.
    def running_mean(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        count, total = state.get if state.exists else (0, 0)
        for rows in batches:
            count += len(rows)
            total += int(rows["amount"].fillna(0).sum())
        state.update((count, total))
        yield pd.DataFrame({"user": [key[0]], "n": [count], "mean": [total / count]})

    return events.groupBy("user").applyInPandasWithState(
        running_mean,
        "user string, n long, mean double",
        "n long, total long",
        "update",
        GroupStateTimeout.NoTimeout,
    )


@pytest.mark.parametrize(
    ("query", "mode"),
    [(_totals, "update"), (_first_purchases, "append"), (_means, "update")],
    ids=["groupBy-agg", "dropDuplicates", "applyInPandasWithState"],
)
def test_structured_streaming_code_gives_the_same_output_every_epoch(
    spark: SparkSession,
    events: Path,
    tmp_path: Path,
    query: Callable[[Any], Any],
    mode: str,
) -> None:
    expected = _structured_streaming(spark, events, query, mode, tmp_path)
    assert len(expected) == 4 and all(expected), "each file a non-empty micro-batch"
    assert _ours(spark, events, query) == expected


def test_tumbling_windows_equal_a_batch_aggregation_each_emitted_once(
    spark: SparkSession,
) -> None:
    def define(p: Pipeline) -> EpochStream:
        numbers = p.readStream(SequenceSource(rows_per_epoch=40, end=200, event_time_step_ms=1500))
        return (
            numbers.withColumn("key", F.col("value") % 2)
            .withWatermark("timestamp", "10 seconds")
            .groupBy(F.window("timestamp", "1 minute"), "key")
            .agg(F.sum("value").alias("total"), F.count("*").alias("n"))
        )

    epochs = _run(spark, define)
    emitted = [row for rows in epochs for row in rows]
    batch = (
        spark.range(200)
        .select(
            F.col("id").alias("value"),
            F.timestamp_seconds(F.col("id") * 1.5).alias("timestamp"),
        )
        .withColumn("key", F.col("value") % 2)
        .groupBy(F.window("timestamp", "1 minute"), "key")
        .agg(F.sum("value").alias("total"), F.count("*").alias("n"))
    )
    assert sorted(emitted) == sorted(tuple(row) for row in batch.collect())
    assert len(emitted) == len(set(emitted)) == 10
    # Windows come out as the watermark passes them, not all at the end of the input.
    assert sum(1 for rows in epochs[:-1] if rows) >= 3


def _sessions(timeout: str) -> Callable[[Any], Any]:
    """Counts a key's events until it is quiet; emits ``(key, events, timed_out)``."""

    def count(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        if state.hasTimedOut:
            (seen,) = state.get
            state.remove()
            yield pd.DataFrame({"key": [key[0]], "events": [seen], "timed_out": [True]})
            return
        (seen,) = state.get if state.exists else (0,)
        latest = None
        for rows in batches:
            seen += len(rows)
            latest = rows["timestamp"].max()
        state.update((seen,))
        if timeout == GroupStateTimeout.ProcessingTimeTimeout:
            state.setTimeoutDuration(1)
        else:
            state.setTimeoutTimestamp(int(latest.timestamp() * 1000) + 5000)
        yield pd.DataFrame({"key": [key[0]], "events": [seen], "timed_out": [False]})

    def query(numbers: Any) -> Any:
        # Key 1 only for the first 20 values, key 0 all along.
        keyed = numbers.withColumn("key", F.when(F.col("value") < 20, F.col("value") % 2))
        keyed = keyed.filter(F.col("key").isNotNull() | (F.col("value") % 2 == 0))
        keyed = keyed.withColumn("key", F.coalesce(F.col("key"), F.lit(0)))
        if timeout == GroupStateTimeout.EventTimeTimeout:
            keyed = keyed.withWatermark("timestamp", "0 seconds")
        return keyed.groupBy("key").applyInPandasWithState(
            count, "key long, events long, timed_out boolean", "events long", "update", timeout
        )

    return query


@pytest.mark.parametrize(
    "timeout", [GroupStateTimeout.ProcessingTimeTimeout, GroupStateTimeout.EventTimeTimeout]
)
def test_a_quiet_key_times_out_once_with_its_state(spark: SparkSession, timeout: str) -> None:
    query = _sessions(timeout)

    def define(p: Pipeline) -> EpochStream:
        numbers = p.readStream(SequenceSource(rows_per_epoch=10, end=60, event_time_step_ms=1000))
        result: EpochStream = query(numbers)
        return result

    epochs = _run(spark, define)
    timed_out = [(e, row) for e, rows in enumerate(epochs) for row in rows if row[2]]
    # Key 1 had values 1, 3, ..., 19 in epochs 0 and 1. Processing time: it times out in
    # epoch 2, the first without it. Event time: its timeout is 19 s + 5 s, passed by the
    # watermark of epoch 2 (29 s).
    assert timed_out == [(2, (1, 10, True))]
    # Key 0 never times out while it has events: its count grows every epoch.
    zeros = [row[1] for rows in epochs for row in rows if row[0] == 0]
    assert zeros == sorted(zeros) and zeros[-1] == 10 + 20


def _define_error(spark: SparkSession, query: Callable[[EpochStream], Any]) -> str:
    context = StateContext(spark, 3, StoreAddress(("127.0.0.1:1",), "unused"))
    pipeline = Pipeline(spark, context, ProcessingGuarantee.NONE, "uid", {})

    def define(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=10, end=60))
        query(numbers.withColumn("key", F.col("value") % 3)).writeStream(_Collect())

    with pytest.raises(ValueError) as caught:
        pipeline.define(define)
    return str(caught.value)


def _static_keys() -> DataFrame:
    spark = SparkSession.getActiveSession()
    assert spark is not None
    return spark.range(3).withColumnRenamed("id", "key")


def _unused_state_function(
    key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
) -> Iterator[pd.DataFrame]:
    """Never called: the definitions it is given to are rejected before any epoch."""
    raise AssertionError("called")


@pytest.mark.parametrize(
    ("query", "says"),
    [
        (lambda s: s.groupBy("key").agg(F.avg("value")), "keep F.sum and F.count"),
        (lambda s: s.groupBy("key").agg(F.countDistinct("value")), "dropDuplicates first"),
        (lambda s: s.groupBy("key").agg(F.sum("value") / 2), "aggregate alone"),
        (lambda s: s.groupBy("key").agg(F.collect_list("value")), "one of sum, count"),
        (lambda s: s.groupBy("key").agg(), "at least one aggregate"),
        (
            lambda s: s.groupBy("key").agg(F.sum("value"), F.sum("value")),
            "give each aggregate an alias",
        ),
        (lambda s: s.groupBy(F.col("value") % 2).agg(F.sum("value")), "withColumn() first"),
        (
            lambda s: (
                s.withWatermark("timestamp", "1 minute")
                .groupBy(F.window("timestamp", "1 minute", "30 seconds"))
                .agg(F.count("*"))
            ),
            "Sliding windows",
        ),
        (
            lambda s: s.groupBy(F.window("timestamp", "1 minute")).agg(F.count("*")),
            "needs withWatermark('timestamp', delay)",
        ),
        (
            lambda s: s.groupBy(F.session_window("timestamp", "1 minute")).agg(F.count("*")),
            "session_window is not supported",
        ),
        (lambda s: s.withWatermark("timestamp", "soon"), "is not a duration"),
        (lambda s: s.withWatermark("value", "1 minute"), "not a timestamp"),
        (lambda s: s.join(s, "key"), "Joining two streams is not supported"),
        (lambda s: s.join(_static_keys(), "key", "right"), "unmatched static rows"),
        (lambda s: s.join(_static_keys(), "key", "full_outer"), "unmatched static rows"),
        (lambda s: s.orderBy("value"), "cannot be sorted"),
        (lambda s: s.dropDuplicatesWithinWatermark(["key"]), "use dropDuplicates"),
        (lambda s: s.dropDuplicates(["nope"]), "is not a column of the stream"),
        (
            lambda s: s.groupBy("key").applyInPandasWithState(
                _unused_state_function,
                "n long",
                "n long",
                "update",
                GroupStateTimeout.EventTimeTimeout,
            ),
            "EventTimeTimeout needs a watermark",
        ),
        (
            lambda s: s.groupBy("key").applyInPandasWithState(
                _unused_state_function, "n long", "n long", "complete"
            ),
            "outputMode 'complete'",
        ),
    ],
)
def test_what_the_state_store_cannot_keep_fails_when_the_pipeline_is_defined(
    spark: SparkSession, query: Callable[[EpochStream], Any], says: str
) -> None:
    assert says in _define_error(spark, query)
