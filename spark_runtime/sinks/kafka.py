"""A Kafka topic as an exactly-once sink: output staged in the snapshot, published in phase 2.

A Kafka transaction cannot be prepared by one process and committed by the next: a producer
that starts with the same ``transactional.id`` aborts whatever its predecessor left open, and
neither confluent-kafka nor the Java client here has KIP-939's API for resuming a prepared
transaction. So this sink is a :class:`~spark_runtime.sinks.base.StagedSink`: the snapshot
itself holds the output (:mod:`spark_runtime.sinks.staged`), and each sink partition's share
is published in one Kafka transaction together with a *marker* record in the sink's commit
topic: key the partition's ``transactional.id``, value the snapshot's id. Before publishing,
the producer's ``init_transactions`` fences every earlier producer of the partition (a zombie
driver's, a crashed task's) and aborts its open transaction; then the partition's latest
committed marker is read, and if it names the snapshot or a later one the output is there
already and nothing is written. Consumers that read ``read_committed`` see every record once.

Under AT_LEAST_ONCE and NONE every epoch is written at once with Spark's own Kafka writer.

The commit topic (``sj-commits-<job uid>-<sink>`` unless named) has a partition per sink
partition, so each partition's markers sit alone in one topic partition and the latest is
among its last few records; it is created compacted when the job starts. It must not be
shared: another producer's open transaction in a partition would hold back
``read_committed`` reads below the latest marker.
"""

from __future__ import annotations

import copy
import json
import logging
import re
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

import pyarrow as pa
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient
from confluent_kafka.cimpl import NewTopic
from pyspark.sql import DataFrame
from pyspark.sql.types import BinaryType, StringType, StructType

from spark_runtime.kafka_security import ClientErrors, KafkaSecurity
from spark_runtime.sinks.base import StagedSink

_log = logging.getLogger(__name__)

_TIMEOUT_S = 30.0
"""How long one producer or admin call (init, commit, metadata) may take before it fails
the publish; phase 2 then fails and the restart publishes again."""
MARKER_WINDOW = 64
"""Offsets read back from the end of a commit-topic partition at first; doubled until a
marker of the partition is found or the start is reached. Each publish takes two offsets
(the marker and the transaction's commit marker)."""


def commit_topic_name(job_uid: str, sink: str) -> str:
    """The default commit topic of one sink of one job: Kafka's legal characters only."""
    return "sj-commits-" + re.sub(r"[^a-zA-Z0-9-]", "-", f"{job_uid}-{sink}")[:200]


def transactional_id(job_uid: str, sink: str, partition: int) -> str:
    """The ``transactional.id`` of one sink partition: the same in every execution, so each
    execution's producer fences the previous one's."""
    return f"sj-{job_uid}-{sink}-{partition}"


def marker_value(snapshot_id: int, rows: int) -> bytes:
    """A marker's value: the snapshot whose output the transaction published."""
    return json.dumps({"snapshotId": snapshot_id, "rows": rows}).encode()


def latest_marker(records: Iterable[tuple[bytes | None, bytes | None]], txn_id: str) -> int | None:
    """The snapshot id of the last marker of ``txn_id`` among committed ``(key, value)`` records,
    in offset order; None if there is none."""
    wanted = txn_id.encode()
    latest: int | None = None
    for key, value in records:
        if key == wanted and value is not None:
            latest = int(json.loads(value)["snapshotId"])
    return latest


def check_schema(schema: StructType, topic: str) -> bool:
    """Checks the output's columns as Spark's Kafka writer does; returns whether it has a key.

    Raises:
        ValueError: Without a ``value`` column, or with a ``key`` or ``value`` that is neither
            string nor binary.
    """
    fields = {field.name: field.dataType for field in schema.fields}
    if "value" not in fields:
        raise ValueError(
            f"The Kafka sink for topic {topic} needs a 'value' column (string or binary); the "
            f"output has {sorted(fields)}. Select or alias one, e.g. "
            "F.to_json(F.struct(...)).alias('value')"
        )
    for column in ("key", "value"):
        if column in fields and not isinstance(fields[column], StringType | BinaryType):
            raise ValueError(
                f"The Kafka sink for topic {topic} needs '{column}' as string or binary, not "
                f"{fields[column].simpleString()}; cast it, e.g. F.col('{column}').cast('string')"
            )
    return "key" in fields


class KafkaSink(StagedSink):
    """A Kafka topic; rows are records with a ``value`` and an optional ``key`` column.

    Exactly once under EXACTLY_ONCE for consumers reading ``read_committed``: a snapshot's
    output appears when its phase 2 (or, after a crash, the next restore) publishes it, in one
    transaction per sink partition. Rows with the same key go to the same sink partition, in
    epoch order.

    Args:
        bootstrap_servers: The brokers' ``host:port`` list.
        topic: The topic written; it must exist.
        partitions: Sink partitions: transactional producers publishing in parallel.
        commit_topic: The topic for the markers; by default ``sj-commits-<job uid>-<sink>``.
            Created (compacted, one partition per sink partition) if missing. It must be
            this sink's alone: each of its partitions must see no producer but the sink
            partition's own.
        options: More producer settings (``compression.type``, ...), librdkafka's names;
            they win over ``security``'s.
        security: How to connect to secured brokers, translated for each client; by default
            the job's ``spec.kafka`` (:meth:`KafkaSecurity.from_environment`), if any.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        *,
        partitions: int = 4,
        commit_topic: str | None = None,
        options: Mapping[str, str] | None = None,
        security: KafkaSecurity | None = None,
    ) -> None:
        if partitions < 1:
            raise ValueError(f"A Kafka sink needs at least 1 partition, not {partitions}")
        self.bootstrap_servers = bootstrap_servers
        self.topic = topic
        self.partitions = partitions
        self.commit_topic = commit_topic or ""
        self._given_commit_topic = self.commit_topic
        self.options = dict(options or {})
        self.security = security if security is not None else KafkaSecurity.from_environment()
        self._job_uid = ""
        self._name = ""
        self._keyed = False
        self._commit_partitions = partitions

    def _settings(self) -> dict[str, Any]:
        secured = self.security.librdkafka_settings() if self.security is not None else {}
        return {"bootstrap.servers": self.bootstrap_servers, **secured, **self.options}

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Checks the columns and the topic, and creates the commit topic if missing.

        Raises:
            ValueError: The columns do not fit, the topic does not exist, or the commit topic
                has fewer partitions than the sink.
            KafkaConnectionRefused: The brokers refused the credentials or the certificate.
        """
        self._keyed = check_schema(schema, self.topic)
        self._job_uid, self._name = job_uid, name
        self.commit_topic = self.commit_topic or commit_topic_name(job_uid, name)
        errors = ClientErrors(self.security, self.bootstrap_servers)
        settings: dict[str, Any] = {**self._settings(), "error_cb": errors}
        admin = AdminClient(settings)
        try:
            topics = admin.list_topics(timeout=_TIMEOUT_S).topics
        except KafkaException as error:
            admin.poll(0)  # serves error_cb: the call's error says only "transport"
            errors.raise_if_refused(error)
            raise
        if self.topic not in topics:
            raise ValueError(
                f"Kafka topic {self.topic} does not exist on {self.bootstrap_servers}; create "
                "it (kafka-topics.sh --create) before the job starts"
            )
        if self.commit_topic not in topics:
            futures = admin.create_topics(
                [
                    NewTopic(
                        self.commit_topic,
                        num_partitions=self.partitions,
                        config={"cleanup.policy": "compact"},
                    )
                ],
                request_timeout=_TIMEOUT_S,
            )
            try:
                futures[self.commit_topic].result(_TIMEOUT_S)
            except Exception as error:
                # Another driver (a replaced execution) may have created it meanwhile.
                if "TOPIC_ALREADY_EXISTS" not in str(error):
                    raise
            _log.info(
                "Created commit topic topic=%s partitions=%d", self.commit_topic, self.partitions
            )
        have = self._partitions_of(admin, self.commit_topic)
        self._commit_partitions = have
        if have < self.partitions:
            raise ValueError(
                f"Commit topic {self.commit_topic} has {have} partitions, fewer than the "
                f"sink's {self.partitions}; give the sink partitions={have} or a new "
                "commit_topic"
            )

    def _partitions_of(self, admin: AdminClient, topic: str) -> int:
        """The partition count of ``topic``, once the broker's metadata has it: a topic just
        created may be missing from it for a moment.

        Raises:
            TimeoutError: The topic was not in the metadata for :data:`_TIMEOUT_S`.
        """
        deadline = time.monotonic() + _TIMEOUT_S
        while True:
            found = admin.list_topics(topic=topic, timeout=_TIMEOUT_S).topics.get(topic)
            if found is not None and found.error is None and found.partitions:
                return len(found.partitions)
            if time.monotonic() > deadline:
                raise TimeoutError(f"Kafka topic {topic} not in the brokers' metadata")
            time.sleep(0.2)

    def partition_columns(self) -> Sequence[str]:
        """Rows with the same key share a partition, so their order is kept."""
        return ("key",) if self._keyed else ()

    def as_writer(self, job_uid: str) -> KafkaSink:
        """This sink with the transactional ids and commit topic of the job ``job_uid``
        (:meth:`StagedSink.as_writer`): another job's staged output is published under its
        markers, once."""
        if job_uid == self._job_uid:
            return self
        writer = copy.copy(self)
        writer._job_uid = job_uid
        writer.commit_topic = self._given_commit_topic or commit_topic_name(job_uid, self._name)
        return writer

    def write(self, frame: DataFrame) -> None:
        """Writes one epoch now with Spark's Kafka writer (the at-least-once path)."""
        columns = ["key", "value"] if self._keyed else ["value"]
        writer = frame.select(*columns).write.format("kafka")
        writer = writer.option("kafka.bootstrap.servers", self.bootstrap_servers)
        secured = self.security.java_settings() if self.security is not None else {}
        for key, value in {**secured, **self.options}.items():
            writer = writer.option(f"kafka.{key}", value)
        writer.option("topic", self.topic).save()

    def publish(self, snapshot_id: int, partition: int, batches: Iterator[pa.RecordBatch]) -> int:
        """Publishes one partition's staged rows with its marker, unless the marker is there.

        Raises:
            confluent_kafka.KafkaException: The producer was fenced by a newer one, or a write
                or the commit failed; nothing of this call is visible to ``read_committed``.
        """
        txn_id = transactional_id(self._job_uid, self._name, partition)
        producer = Producer(
            {
                **self._settings(),
                "transactional.id": txn_id,
                "enable.idempotence": True,
                "linger.ms": 5,
            }
        )
        producer.init_transactions(_TIMEOUT_S)
        published = self._latest_marker(partition, txn_id)
        if published is not None and published >= snapshot_id:
            _log.info(
                "Output already published partition=%d snapshotId=%d marker=%d",
                partition,
                snapshot_id,
                published,
            )
            return 0
        producer.begin_transaction()
        rows = 0
        try:
            for batch in batches:
                values = batch.column("value").to_pylist()
                keys = batch.column("key").to_pylist() if self._keyed else [None] * len(values)
                for key, value in zip(keys, values, strict=True):
                    _produce(producer, self.topic, key, value)
                rows += batch.num_rows
            producer.produce(
                self.commit_topic,
                key=txn_id,
                value=marker_value(snapshot_id, rows),
                partition=self._marker_partition(partition),
            )
            producer.commit_transaction(_TIMEOUT_S)
        except Exception:
            try:
                producer.abort_transaction(_TIMEOUT_S)
            except Exception as error:
                # The first error is the one to report; the next producer aborts anyway.
                _log.warning("Could not abort transaction id=%s error=%s", txn_id, error)
            raise
        return rows

    def _marker_partition(self, partition: int) -> int:
        """Where a partition's markers go: its own commit-topic partition, so that no other
        producer's open transaction can hold back the read of its latest marker.

        Raises:
            ValueError: A snapshot staged with more partitions than the commit topic has.
        """
        if partition >= self._commit_partitions:
            raise ValueError(
                f"Staged output of sink partition {partition} has no partition of its own in "
                f"commit topic {self.commit_topic} ({self._commit_partitions} partitions); "
                "add partitions to the commit topic (kafka-topics.sh --alter)"
            )
        return partition

    def _latest_marker(self, partition: int, txn_id: str) -> int | None:
        """The partition's latest committed marker, read back from the end of its partition."""
        consumer = Consumer(
            {
                **self._settings(),
                "group.id": f"{txn_id}-markers",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
                "enable.partition.eof": True,
                # The end is reached with an empty fetch; the default waits 500 ms for one.
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            marker_partition = self._marker_partition(partition)
            low, high = consumer.get_watermark_offsets(
                TopicPartition(self.commit_topic, marker_partition), timeout=_TIMEOUT_S
            )
            window = MARKER_WINDOW
            while True:
                start = max(low, high - window)
                records = _read_range(consumer, self.commit_topic, marker_partition, start)
                found = latest_marker(records, txn_id)
                if found is not None or start == low:
                    return found
                window *= 2
        finally:
            consumer.close()


def _produce(
    producer: Producer, topic: str, key: str | bytes | None, value: str | bytes | None
) -> None:
    """Queues one record, waiting for room when the producer's queue is full.

    Raises:
        TimeoutError: The queue stayed full for :data:`_TIMEOUT_S` (the broker takes nothing).
    """
    deadline = time.monotonic() + _TIMEOUT_S
    while True:
        try:
            producer.produce(topic, value=value, key=key)
            producer.poll(0)
            return
        except BufferError:
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"The producer's queue for topic {topic} stayed full for {_TIMEOUT_S:.0f} s"
                ) from None
            producer.poll(0.1)


def _read_range(
    consumer: Consumer, topic: str, partition: int, start: int
) -> list[tuple[bytes | None, bytes | None]]:
    """Every committed record of one partition from ``start`` to its last stable offset."""

    consumer.assign([TopicPartition(topic, partition, start)])
    records: list[tuple[bytes | None, bytes | None]] = []
    while True:
        message = consumer.poll(_TIMEOUT_S)
        if message is None:
            raise TimeoutError(
                f"No end of commit topic {topic} partition {partition} in {_TIMEOUT_S:.0f} s"
            )
        error = message.error()
        if error is not None:
            if error.code() == KafkaError._PARTITION_EOF:
                return records
            raise KafkaException(error)
        records.append((message.key(), message.value()))
