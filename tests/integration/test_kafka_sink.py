"""KafkaSink on a real broker, real Hazelcast members and Spark (issue 15, item 3).

Exactly once for ``read_committed`` consumers, through everything a restart can cut short:
a job interrupted after snapshots and again after epochs without one; a crash after phase 1
(output staged in the snapshot, nothing published); a crash halfway through phase 2 (one
partition published, the other not); a restore of an already published snapshot (the "just
in case" publish writes nothing); and a zombie publisher of the same partition, whose open
transaction the next publish aborts. Output is checked record by record: every value once,
and each key's output in epoch order.

The interrupted and at-least-once tests run the real driver in-process. The restore test
plays the driver: it calls the participant's phase 1, phase 2 and restore by hand, to stop
between them where a crash would. The driver as a separate process, killed for real, runs
the sink in ``test_kafka_exactly_once.py``.
"""

from __future__ import annotations

import uuid

import pytest
from confluent_kafka import KafkaException, Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StructType

from snapshot_protocol import ChunkWriter, SnapshotRef
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import decode_batches
from spark_runtime.sinks import KafkaSink, StagedSinkParticipant
from spark_runtime.sinks.kafka import transactional_id
from spark_runtime.sources import SequenceSource
from spark_runtime.state import StateContext
from spark_runtime.streaming import Pipeline
from testbed.kafka import KafkaBroker
from tests.fixtures.in_process_driver import Build, Runner

pytestmark = pytest.mark.integration

KEYS = 5
ROWS_PER_EPOCH = 300


def check_exactly_once(records: list[tuple[str | None, str]], end: int) -> None:
    """Every value below ``end`` once; within a key, epoch after epoch.

    Within one epoch a key's values come from several Spark partitions, in no set order (as
    in Structured Streaming); across epochs a key's output must keep the epochs' order.
    """
    values = [int(value) for _, value in records]
    assert len(values) == len(set(values)), "a value was published twice"
    assert sorted(values) == list(range(end)), f"missing={sorted(set(range(end)) - set(values))}"
    epochs: dict[str | None, list[int]] = {}
    for key, value in records:
        epochs.setdefault(key, []).append(int(value) // ROWS_PER_EPOCH)
    for key, in_order in epochs.items():
        assert in_order == sorted(in_order), f"key {key}: epochs out of order {in_order}"


def _build(bootstrap: str, topic: str, end: int) -> Build:
    def build(p: Pipeline) -> None:
        numbers = p.readStream(
            SequenceSource(rows_per_epoch=ROWS_PER_EPOCH, end=end), name="numbers"
        )
        records = numbers.select(
            (F.col("value") % KEYS).cast("string").alias("key"),
            F.col("value").cast("string").alias("value"),
        )
        records.writeStream(KafkaSink(bootstrap, topic, partitions=3), name="out")

    return build


def test_interrupted_runs_publish_every_record_once_in_key_order(
    runner: Runner, kafka: KafkaBroker
) -> None:
    topic = kafka.create_topic(partitions=4)
    build = _build(kafka.bootstrap, topic, 1800)
    runner.interrupted(build, f"ksink-{uuid.uuid4().hex[:8]}", ProcessingGuarantee.EXACTLY_ONCE)
    check_exactly_once(kafka.read_committed(topic), 1800)


def test_at_least_once_writes_every_epoch_with_sparks_writer(
    runner: Runner, kafka: KafkaBroker
) -> None:
    topic = kafka.create_topic(partitions=2)
    build = _build(kafka.bootstrap, topic, 900)
    runner.clean(build, f"ksink-{uuid.uuid4().hex[:8]}", ProcessingGuarantee.AT_LEAST_ONCE)
    check_exactly_once(kafka.read_committed(topic), 900)


def _participant(
    spark: SparkSession, runner: Runner, kafka: KafkaBroker, topic: str, job: str
) -> StagedSinkParticipant:
    sink = KafkaSink(kafka.bootstrap, topic, partitions=2)
    schema = StructType.fromJson(
        {
            "type": "struct",
            "fields": [
                {"name": "key", "type": "string", "nullable": True, "metadata": {}},
                {"name": "value", "type": "string", "nullable": True, "metadata": {}},
            ],
        }
    )
    sink.open(schema, job, "out")
    context = StateContext(spark, 4, runner.address)
    return StagedSinkParticipant("out", sink, ProcessingGuarantee.EXACTLY_ONCE, context)


def _epoch(spark: SparkSession, values: range) -> DataFrame:
    return spark.createDataFrame(
        [(str(n % KEYS), str(n)) for n in values], "key string, value string"
    )


def test_restores_publish_staged_output_once_where_phase_2_did_not(
    spark: SparkSession, runner: Runner, kafka: KafkaBroker
) -> None:
    """Phase 1 done, then: nothing published (crash), half published, all published."""
    topic = kafka.create_topic(partitions=3)
    job = f"ksink-{uuid.uuid4().hex[:8]}"
    map_name = f"__sj.test.{job}.0"
    first = _participant(spark, runner, kafka, topic, job)
    first.accept(0, _epoch(spark, range(0, 300)))
    first.accept(1, _epoch(spark, range(300, 600)))
    staged = first.save_and_prepare(1, ChunkWriter(runner.store, map_name, 1, "out"), False)
    assert {chunk.key.partition for chunk in staged} == {0, 1}
    assert sum(chunk.num_keys for chunk in staged) == 600
    assert kafka.read_committed(topic) == [], "phase 1 publishes nothing"
    ref = SnapshotRef(map_name, 1, tuple(staged))

    # The driver crashed here. Half of a phase 2 first: partition 0 only.
    sink = first.sink
    part_0 = sorted((c for c in staged if c.key.partition == 0), key=lambda c: c.key.seq)
    # Read with the test's own client: chunk_io's would outlive the session's members.
    batches = (
        batch for c in part_0 for batch in decode_batches(runner.store.read_chunk(map_name, c.key))
    )
    published_0 = sink.publish(1, 0, batches)
    assert 0 < published_0 < 600

    # A zombie publisher of partition 1 with a transaction open: the next publish fences it.
    zombie = Producer(
        {"bootstrap.servers": kafka.bootstrap, "transactional.id": transactional_id(job, "out", 1)}
    )
    zombie.init_transactions(30)
    zombie.begin_transaction()
    zombie.produce(topic, key=b"0", value=b"999999")
    zombie.flush(30)

    second = _participant(spark, runner, kafka, topic, job)
    second.restore(ref, runner.store, 1)
    records = kafka.read_committed(topic)
    check_exactly_once(records, 600)
    with pytest.raises(KafkaException):
        zombie.commit_transaction(30)

    # Restoring the same snapshot again, and a full phase 2 of it, publish nothing more.
    third = _participant(spark, runner, kafka, topic, job)
    third.restore(ref, runner.store, 1)
    third.accept(2, _epoch(spark, range(600, 700)))
    more = third.save_and_prepare(2, ChunkWriter(runner.store, map_name, 2, "out"), False)
    third.commit_finish(2, True)
    assert sum(chunk.num_keys for chunk in more) == 100
    check_exactly_once(kafka.read_committed(topic), 700)


def test_a_missing_topic_or_value_column_is_refused_when_the_job_starts(
    kafka: KafkaBroker,
) -> None:
    missing = f"absent-{uuid.uuid4().hex[:8]}"
    schema = StructType.fromJson(
        {
            "type": "struct",
            "fields": [{"name": "value", "type": "string", "nullable": True, "metadata": {}}],
        }
    )
    with pytest.raises(ValueError, match=f"Kafka topic {missing} does not exist"):
        KafkaSink(kafka.bootstrap, missing).open(schema, "uid", "out")
