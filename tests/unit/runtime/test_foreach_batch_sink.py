"""The foreachBatch sink's checks and its at-least-once ids, which need no Spark job.

The batches of an EXACTLY_ONCE job, their ids and the restore's repeat are in
``tests/integration/test_foreach_batch.py``, on the real driver.
"""

from __future__ import annotations

from typing import Any, cast

import pytest
from pyspark.sql import DataFrame
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_runtime.sinks import EPOCH_COLUMN, DeltaSink, ForeachBatchSink
from spark_runtime.sinks.delta import app_id

OUTPUT = StructType(
    [
        StructField("key", StringType()),
        StructField("total", LongType()),
        StructField("n", LongType()),
    ]
)


def test_a_function_is_required() -> None:
    with pytest.raises(TypeError, match=r"foreachBatch takes a function of \(batch_df, batch_id\)"):
        ForeachBatchSink(cast(Any, "not a function"))


def test_a_key_must_name_output_columns() -> None:
    sink = ForeachBatchSink(lambda batch, batch_id: None, key=["key", "window"])

    with pytest.raises(ValueError, match=r"foreachBatch out: key columns \['window'\] are not"):
        sink.open(OUTPUT, "uid", "out")


def test_a_key_must_be_flat() -> None:
    window = StructType([StructField("start", LongType()), StructField("end", LongType())])
    output = StructType([StructField("window", window), *OUTPUT.fields])
    sink = ForeachBatchSink(lambda batch, batch_id: None, key=["window", "key"])

    with pytest.raises(ValueError, match=r"key columns must be flat, not window \(struct<"):
        sink.open(output, "uid", "out")


def test_batches_have_the_outputs_schema_without_the_epoch_column() -> None:
    sink = ForeachBatchSink(lambda batch, batch_id: None, key=["key"])
    with_epoch = StructType([*OUTPUT.fields, StructField(EPOCH_COLUMN, LongType())])

    sink.open(with_epoch, "uid", "out")

    assert sink.schema == OUTPUT
    assert list(sink.partition_columns()) == ["key"], "a key's rows are staged together"


def test_the_schema_is_unknown_until_the_sink_is_opened() -> None:
    with pytest.raises(RuntimeError, match="was not opened"):
        _ = ForeachBatchSink(lambda batch, batch_id: None).schema


def test_at_least_once_ids_only_grow_and_are_never_a_snapshots() -> None:
    calls: list[tuple[object, int]] = []
    sink = ForeachBatchSink(lambda batch, batch_id: calls.append((batch, batch_id)))
    epochs = [object() for _ in range(50)]

    for epoch in epochs:
        sink.write(cast(DataFrame, epoch))

    assert [batch for batch, _id in calls] == epochs, "each epoch's frame, as it is"
    ids = [batch_id for _batch, batch_id in calls]
    assert ids == sorted(set(ids)), "ids grow, even within one microsecond"
    assert ids[0] > 10**15, "microseconds since 1970: far above any snapshot id"


def test_a_batch_is_never_published_by_partition() -> None:
    with pytest.raises(TypeError, match="calls its function with the whole batch on the driver"):
        ForeachBatchSink(lambda batch, batch_id: None).publish(1, 0, iter([]))


def test_a_function_may_ask_for_the_uid_of_the_job_whose_batch_it_is() -> None:
    seen: list[tuple[Any, ...]] = []
    two = ForeachBatchSink(lambda batch, batch_id: seen.append((batch_id,)))
    three = ForeachBatchSink(lambda batch, batch_id, job_uid: seen.append((batch_id, job_uid)))
    assert not two.takes_job_uid and three.takes_job_uid
    frame = cast(DataFrame, object())
    two.call(frame, 4, "job-a")
    three.call(frame, 4, "job-a")
    assert seen == [(4,), (4, "job-a")]


def test_a_delta_sink_keeps_its_idempotent_options_and_needs_delta_in_the_session() -> None:
    with pytest.raises(ValueError, match="sets txnappid itself"):
        DeltaSink("/tmp/table", options={"txnAppId": "mine"})
    assert app_id("job-a", "events") == "snapshotjob-job-a-events"
    schema = StructType([StructField("id", LongType())])
    # No session here, so no Delta Lake in it: the definition fails, saying what to add.
    with pytest.raises(ValueError, match="Delta Lake is not in the driver's Spark session"):
        DeltaSink("/tmp/table").open(schema, "job-a", "events")
