"""KafkaSource on a real broker, read by Spark's own Kafka connector (issue 15, item 2).

What the snapshot protocol needs of a source: a range, once decided, reads the same records
every time; the ranges of successive epochs cover every committed record once; nothing of an
open or aborted transaction is ever in them. And what a Kafka user expects: partitions added
while the job runs are read too, the consumer group shows the snapshotted offsets, and a
restore whose offsets retention deleted stops or goes on from the earliest offset as
``spec.expiredOffsets`` says.
"""

from __future__ import annotations

import dataclasses
import socket
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import NewPartitions
from pyspark.sql import Row, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.observability import DRIVER_RECORDS_SKIPPED
from snapshotjob_contract.spec import ExpiredOffsetsPolicy
from spark_runtime.pipeline import Pipeline
from spark_runtime.sources import KafkaSource
from spark_runtime.sources import kafka as kafka_source
from spark_runtime.sources.base import Offset
from spark_runtime.testing import MemorySink, PipelineRunFailed, PipelineTest, assert_exactly_once
from testbed.kafka import KafkaBroker

pytestmark = pytest.mark.integration


def _produce(broker: KafkaBroker, topic: str, values: range, transactional_id: str) -> Producer:
    """Commits ``values`` in one transaction, round-robin over the partitions 0..2."""
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": transactional_id,
            "log_level": 3,
        }
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for n in values:
        producer.produce(topic, value=str(n).encode(), partition=n % 3)
    producer.commit_transaction(30)
    return producer


def _abort(broker: KafkaBroker, topic: str, values: range, transactional_id: str) -> None:
    """Writes ``values`` into the log in a transaction, then aborts it."""
    aborting = _produce(broker, topic, range(0), transactional_id)
    aborting.begin_transaction()
    for n in values:
        aborting.produce(topic, value=str(n).encode(), partition=n % 3)
    aborting.flush(30)  # in the log before the abort, which would drop them unsent otherwise
    aborting.abort_transaction(30)


def _drain(spark: SparkSession, source: KafkaSource, offset: Offset) -> tuple[list[int], Offset]:
    """Reads epoch after epoch until nothing is new; returns the values and the last offset."""
    values: list[int] = []
    while (end := source.next_offset(offset)) is not None:
        rows = source.read(spark, offset, end).collect()
        assert len(rows) <= max(source.max_rows_per_epoch, 3)
        values.extend(int(row["value"].decode()) for row in rows)
        offset = end
    return values, offset


_READERS = pytest.mark.parametrize(
    "driver_read_max_records",
    [0, kafka_source.DRIVER_READ_MAX_RECORDS],
    ids=["spark-reads", "driver-reads"],
)
"""Both readers: Spark's Kafka connector on the executors, and the driver's own consumer."""


@_READERS
def test_epochs_read_every_committed_record_once_and_never_an_open_or_aborted_one(
    spark: SparkSession, kafka: KafkaBroker, driver_read_max_records: int
) -> None:
    topic = kafka.create_topic(partitions=3)
    _produce(kafka, topic, range(0, 300), f"a-{topic}")
    _abort(kafka, topic, range(1000, 1050), f"b-{topic}")
    holding = _produce(kafka, topic, range(300, 300), f"c-{topic}")
    holding.begin_transaction()
    for n in range(2000, 2030):
        holding.produce(topic, value=str(n).encode(), partition=n % 3)
    holding.flush(30)  # on the broker, not committed: its offsets are past the stable ones

    source = KafkaSource(
        kafka.bootstrap,
        [topic],
        max_rows_per_epoch=70,
        driver_read_max_records=driver_read_max_records,
    )
    values, offset = _drain(spark, source, source.initial_offset())
    assert sorted(values) == list(range(300)), "each committed record once, nothing else"

    holding.commit_transaction(30)
    _produce(kafka, topic, range(300, 330), f"a-{topic}")
    more, last = _drain(spark, source, offset)
    assert sorted(more) == [*range(300, 330), *range(2000, 2030)]

    # A range is fixed once decided: reading it again gives the same records.
    replay = source.read(spark, offset, last).collect()
    assert sorted(int(r["value"].decode()) for r in replay) == sorted(more)
    assert source.is_exhausted(last) is False  # unbounded: waits for more
    assert KafkaSource(kafka.bootstrap, [topic], bounded=True).is_exhausted(last)


def test_a_partition_added_while_running_is_read_from_its_start(
    spark: SparkSession, kafka: KafkaBroker
) -> None:
    topic = kafka.create_topic(partitions=3)
    _produce(kafka, topic, range(0, 30), f"a-{topic}")
    source = KafkaSource(kafka.bootstrap, [topic], max_rows_per_epoch=1000)
    values, offset = _drain(spark, source, source.initial_offset())
    assert sorted(values) == list(range(30))

    admin = kafka.admin()
    for future in admin.create_partitions([NewPartitions(topic, 4)]).values():
        future.result(timeout=30)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for n in range(30, 40):
        producer.produce(topic, value=str(n).encode(), partition=3)
    producer.flush(30)

    values, offset = _drain(spark, source, offset)
    assert sorted(values) == list(range(30, 40))
    assert offset[topic]["3"] == 10


def test_the_driver_reads_the_rows_spark_reads(spark: SparkSession, kafka: KafkaBroker) -> None:
    """Every column the same, over ranges that end on a transaction's commit and abort
    markers and skip its aborted records, keyed and unkeyed records, null values."""
    topic = kafka.create_topic(partitions=3)
    by_spark = KafkaSource(kafka.bootstrap, [topic], driver_read_max_records=0)
    by_driver = KafkaSource(kafka.bootstrap, [topic])
    _produce(kafka, topic, range(0, 40), f"a-{topic}")
    aborted_from = by_spark.next_offset(by_spark.initial_offset())
    aborted_from = by_spark.next_offset(aborted_from or {})
    _abort(kafka, topic, range(1000, 1020), f"b-{topic}")
    assert aborted_from is not None
    aborted_to = None
    deadline = time.monotonic() + 30
    while aborted_to is None:  # until the abort's markers are written and stable
        assert time.monotonic() < deadline, "the aborted transaction's offsets never got stable"
        time.sleep(0.1)
        aborted_to = by_spark.next_offset(aborted_from)
    plain = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for n in range(40, 60):
        plain.produce(
            topic, key=f"k{n}".encode(), value=None if n % 7 == 0 else b"v", partition=n % 3
        )
    plain.flush(30)

    start = by_spark.initial_offset()
    first = by_spark.next_offset(start)  # enters each partition at its earliest offset
    assert first is not None
    end = by_spark.next_offset(first)
    assert end is not None

    def in_log_order(rows: list[Row]) -> list[tuple[object, ...]]:
        return sorted((tuple(r) for r in rows), key=lambda r: (r[3], r[4]))

    spark_rows = in_log_order(by_spark.read(spark, first, end).collect())
    driver_frame = by_driver.read(spark, first, end)
    assert driver_frame.schema == kafka_source.KAFKA_SCHEMA
    driver_rows = in_log_order(driver_frame.collect())
    assert len(spark_rows) == 60
    assert driver_rows == spark_rows

    # Ranges of nothing but aborted records and the abort marker, with committed records
    # right after them in the log: no rows, and none of the records that follow.
    assert by_spark.read(spark, aborted_from, aborted_to).count() == 0
    assert by_driver.read(spark, aborted_from, aborted_to).count() == 0


def test_an_epoch_too_large_for_the_driver_is_read_by_spark(
    spark: SparkSession,
    kafka: KafkaBroker,
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    topic = kafka.create_topic(partitions=3)
    _produce(kafka, topic, range(0, 90), f"a-{topic}")
    monkeypatch.setattr(kafka_source, "DRIVER_READ_MAX_BYTES", 100)
    source = KafkaSource(kafka.bootstrap, [topic])
    with caplog.at_level("INFO", logger=kafka_source.__name__):
        values, _ = _drain(spark, source, source.initial_offset())
    assert sorted(values) == list(range(90))
    assert "Kafka epoch read by the executors instead reason=more than 100 bytes" in caplog.text


@_READERS
def test_a_range_whose_start_left_the_log_fails_the_read(
    spark: SparkSession, kafka: KafkaBroker, driver_read_max_records: int
) -> None:
    """As ``failOnDataLoss``: records removed from the log are an error, never skipped."""
    topic = kafka.create_topic(partitions=3)
    _produce(kafka, topic, range(0, 30), f"a-{topic}")
    source = KafkaSource(kafka.bootstrap, [topic], driver_read_max_records=driver_read_max_records)
    first = source.next_offset(source.initial_offset())
    assert first is not None
    end = source.next_offset(first)
    assert end is not None
    admin = kafka.admin()
    for future in admin.delete_records([TopicPartition(topic, 0, 5)]).values():
        future.result(timeout=30)
    with pytest.raises(Exception, match=r"data may have been lost|no longer in the log"):
        source.read(spark, first, end).collect()


def test_completed_snapshot_offsets_go_to_the_consumer_group(kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(partitions=3)
    _produce(kafka, topic, range(0, 30), f"a-{topic}")
    source = KafkaSource(kafka.bootstrap, [topic], group_id=f"g-{topic}")
    first = source.next_offset(source.initial_offset())
    assert first is not None
    end = source.next_offset(first)
    assert end is not None

    source.committed(end)

    reader = Consumer({"bootstrap.servers": kafka.bootstrap, "group.id": f"g-{topic}"})
    try:
        committed = reader.committed([TopicPartition(topic, p) for p in range(3)], timeout=30)
    finally:
        reader.close()
    assert {tp.partition: tp.offset for tp in committed} == {
        int(p): pos for p, pos in end[topic].items()
    }


def test_committing_to_a_lost_broker_holds_the_snapshot_up_for_a_bounded_time(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # No broker listens on this loopback port: a consumer's synchronous commit would wait
    # for the group's coordinator for good, in the snapshot's 2nd phase.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    source = KafkaSource(f"127.0.0.1:{port}", ["gone"], group_id="g-gone")
    started = time.monotonic()
    with caplog.at_level("WARNING", logger=kafka_source.__name__):
        source.committed({"gone": {"0": 5, "1": 7}})
        waited = time.monotonic() - started
        assert waited < kafka_source._COMMIT_WAIT_S + 1.0, waited
        # The request itself ends within its own timeout, and its failure is logged.
        deadline = time.monotonic() + kafka_source._TIMEOUT_S + 10
        while "Kafka offsets not committed" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.2)
    assert "Kafka offsets not committed to the group group=g-gone" in caplog.text


def test_a_restore_below_the_earliest_offset_stops_or_goes_on_from_it_as_the_spec_says(
    spark: SparkSession,
    kafka: KafkaBroker,
    tmp_path: Path,
    caplog: pytest.LogCaptureFixture,
) -> None:
    """In-process executions of one job (embedded store, record file, memory sink): a
    snapshot at offset 10 of each partition, then partition 0's records below offset 25
    deleted, as retention does while a job is suspended."""
    topic = kafka.create_topic(partitions=2)
    producer = Producer({"bootstrap.servers": kafka.bootstrap, "log_level": 0})
    for n in range(60):
        producer.produce(topic, value=str(n).encode(), partition=n % 2)
    producer.flush(30)
    sink = MemorySink()

    def define_pipeline(p: Pipeline) -> None:
        source = KafkaSource(kafka.bootstrap, [topic], max_rows_per_epoch=20, bounded=True)
        records = p.readStream(source, name="ids")
        ids = records.select(F.col("value").cast("string").cast("long").alias("id"))
        ids.writeStream(sink, name="out")

    job = PipelineTest(define_pipeline, tmp_path, spark=spark, timeout_s=120)
    # Epoch 0 enters both partitions at offset 0, epoch 1 reads 10 of each; a snapshot after each.
    assert job.run(epochs=2).exit is DriverExit.INTERRUPTED
    assert_exactly_once(sink, "id", range(20))
    admin = kafka.admin()  # referenced until the futures are done: its handle serves them
    for future in admin.delete_records([TopicPartition(topic, 0, 25)]).values():
        future.result(timeout=30)

    with pytest.raises(PipelineRunFailed) as failed:
        job.run()  # spec.expiredOffsets: Fail, the default
    assert failed.value.result.exit is DriverExit.SOURCE_DATA_LOST
    assert failed.value.result.epochs == 0
    assert f"{topic}-0 restored offset 10, earliest 25, 15 records gone" in str(
        failed.value.message
    )
    assert f"{topic}-1" not in str(failed.value.message), "partition 1 lost nothing"

    job.settings = dataclasses.replace(job.settings, expired_offsets=ExpiredOffsetsPolicy.EARLIEST)
    with caplog.at_level("WARNING", logger="spark_runtime.pipeline"):
        assert job.run().exit is DriverExit.COMPLETED
    gone = range(20, 50, 2)  # partition 0's offsets 10..24
    assert_exactly_once(sink, "id", sorted(set(range(60)) - set(gone)))
    assert (
        f"Skipped records no longer in the source source=ids records=15 partitions={topic}-0 "
        "restored offset 10, earliest 25, 15 records gone policy=Earliest"
    ) in caplog.text
    assert job.driver is not None
    skipped = job.driver.metrics.registry.get_sample_value(
        DRIVER_RECORDS_SKIPPED.name, {"source": "ids"}
    )
    assert skipped == 15
