"""Kafka topics as a replayable source: per-partition offsets in the snapshot, Spark reads.

A Kafka partition is replayable by construction: an offset range always holds the same
records. So the source's offset is the position reached in every partition (the next offset
to read, Kafka's own convention, in the JSON shape of Spark's ``startingOffsets``), it goes
into every snapshot with the rest of the job's state, and each epoch reads one offset range
per partition with Spark's own Kafka connector (``spark-sql-kafka``), so executors read the
partitions in parallel; a small epoch is read by the driver's own consumer instead
(:mod:`spark_runtime.sources.kafka_fetch` says why), with the same rows. Where the next
range ends is decided in the driver from the brokers' *last stable offsets*
(``read_committed``): records of open transactions are never in a range, and aborted ones
are skipped by the reader, so a transactional producer upstream is read exactly once too.

Restores never look at the consumer group: after each snapshot's second phase the offsets of
that snapshot are committed to ``group_id`` for monitoring (consumer lag in the usual tools)
only. A partition added to a topic while the job runs is picked up at the next epoch, from
its earliest offset.

Retention may delete records the job has not read yet, most often while a job stays
suspended or failed for longer than the topic keeps them. So the first epoch of each execution
compares each restored position with its partition's earliest offset (:meth:`KafkaSource.expired`)
and ``spec.expiredOffsets`` decides: stop, naming what is gone, or go on from the earliest.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping, Sequence
from concurrent.futures import Future, wait
from typing import Any

from confluent_kafka import (
    ConsumerGroupTopicPartitions,
    IsolationLevel,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient
from confluent_kafka.admin._listoffsets import OffsetSpec  # re-exported there, untyped
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import (
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from spark_runtime.kafka_security import ClientErrors, KafkaSecurity
from spark_runtime.sources.base import ExpiredOffsets, ExpiredRange, Offset, Source
from spark_runtime.sources.kafka_fetch import DriverFetcher, Ranges, TooLargeForDriverError
from spark_runtime.sources.kafka_lag import LatestOffsets

_log = logging.getLogger(__name__)

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
)
"""The rows' schema: Spark's Kafka source's, without headers."""

_TIMEOUT_S = 10.0
"""How long one admin call (metadata, offsets) may take; the epoch loop retries a failure."""
_COMMIT_WAIT_S = 2.0
"""How long a snapshot's 2nd phase waits for the consumer group's offsets to be committed."""
_LATEST: OffsetSpec = OffsetSpec.latest()  # type: ignore[no-untyped-call]
"""With READ_COMMITTED: each partition's last stable offset."""
_EARLIEST: OffsetSpec = OffsetSpec.earliest()  # type: ignore[no-untyped-call]

DRIVER_READ_MAX_RECORDS = 10_000
"""Epochs of at most this many records are read in the driver by default."""
DRIVER_READ_MAX_BYTES = 32 * 1024 * 1024
"""Keys and values a driver-side read may hold; a larger epoch is read by the executors."""
_DRIVER_READ_TIMEOUT_S = 10.0
"""A driver-side read that takes longer gives the epoch to Spark's reader."""

Positions = dict[str, dict[str, int]]
"""topic -> partition (as a string, as in JSON) -> the next offset to read."""


class KafkaSource(LatestOffsets, Source):
    """One or more Kafka topics, read in offset ranges per partition.

    Args:
        bootstrap_servers: The brokers' ``host:port`` list.
        topics: The topics to read, every partition of each.
        max_rows_per_epoch: Records per epoch at most, shared evenly by the partitions that
            have new records (one record each if there are more such partitions).
        group_id: The consumer group the offsets of each completed snapshot are committed to,
            for monitoring; None commits nothing.
        bounded: End the job once every committed record present has been read, instead of
            waiting for more (for tests and backfills).
        options: More Kafka client settings, given as they are to the driver's clients
            (librdkafka) and, prefixed with ``kafka.``, to Spark's reader (Java); they win over
            ``security``'s.
        security: How to connect to secured brokers, translated for each client; by default
            the job's ``spec.kafka`` (:meth:`KafkaSecurity.from_environment`), if any.
        driver_read_max_records: An epoch of at most this many records is read by the
            driver's own consumer (:mod:`spark_runtime.sources.kafka_fetch`) instead of by a
            Spark job, which costs hundreds of milliseconds however few records it reads;
            larger epochs, and any whose keys and values exceed
            :data:`DRIVER_READ_MAX_BYTES`, are read by the executors. 0 always uses Spark.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topics: Sequence[str],
        *,
        max_rows_per_epoch: int = 10_000,
        group_id: str | None = None,
        bounded: bool = False,
        options: Mapping[str, str] | None = None,
        driver_read_max_records: int = DRIVER_READ_MAX_RECORDS,
        security: KafkaSecurity | None = None,
    ) -> None:
        if not topics:
            raise ValueError("KafkaSource needs at least one topic")
        if max_rows_per_epoch <= 0:
            raise ValueError(f"max_rows_per_epoch must be positive, got {max_rows_per_epoch}")
        if driver_read_max_records < 0:
            raise ValueError(
                f"driver_read_max_records must be 0 or more, got {driver_read_max_records}"
            )
        self.bootstrap_servers = bootstrap_servers
        self.topics = list(topics)
        self.max_rows_per_epoch = max_rows_per_epoch
        self.group_id = group_id
        self.bounded = bounded
        self.options = dict(options or {})
        self.driver_read_max_records = driver_read_max_records
        self.security = security if security is not None else KafkaSecurity.from_environment()
        self._errors = ClientErrors(self.security, bootstrap_servers)
        self._admin: AdminClient | None = None
        self._fetcher: DriverFetcher | None = None

    # --- the driver's view of the brokers ----------------------------------------------------

    def _client_settings(self) -> dict[str, Any]:
        secured = self.security.librdkafka_settings() if self.security is not None else {}
        return {
            "bootstrap.servers": self.bootstrap_servers,
            "log_level": 3,
            **secured,
            **self.options,
        }

    def admin(self) -> AdminClient:
        """The driver's admin client (created on first use, then kept)."""
        if self._admin is None:
            settings: dict[str, Any] = {**self._client_settings(), "error_cb": self._errors}
            self._admin = AdminClient(settings)
        return self._admin

    def _partitions(self) -> list[TopicPartition]:
        """The partitions of every topic.

        Raises:
            KafkaConnectionRefused: The brokers refused the credentials or the certificate.
            KafkaException: Any other failure (an outage), retried by the epoch loop.
        """
        try:
            metadata = self.admin().list_topics(timeout=_TIMEOUT_S)
        except KafkaException as failure:
            self.admin().poll(0)  # serves error_cb: the call's error says only "transport"
            self._errors.raise_if_refused(failure)
            raise
        self._errors.clear()
        found: list[TopicPartition] = []
        for topic in self.topics:
            described = metadata.topics.get(topic)
            if described is None or described.error is not None:
                error = "not found" if described is None else str(described.error)
                raise RuntimeError(f"Kafka topic {topic} cannot be read: {error}")
            found.extend(TopicPartition(topic, p) for p in sorted(described.partitions))
        return found

    def _list_offsets(self, partitions: Sequence[TopicPartition], spec: OffsetSpec) -> Positions:
        requests = {tp: spec for tp in partitions}
        futures = self.admin().list_offsets(
            requests, isolation_level=IsolationLevel.READ_COMMITTED, request_timeout=_TIMEOUT_S
        )
        positions: Positions = {}
        for tp, future in futures.items():
            positions.setdefault(tp.topic, {})[str(tp.partition)] = int(
                future.result(timeout=_TIMEOUT_S).offset
            )
        return positions

    # --- Source -----------------------------------------------------------------------------

    def schema(self, spark: SparkSession) -> StructType:
        """Spark's Kafka record schema (:data:`KAFKA_SCHEMA`)."""
        return KAFKA_SCHEMA

    def initial_offset(self) -> Offset:
        """No partition yet: each is taken from its earliest offset when first seen."""
        return {topic: {} for topic in self.topics}

    def next_offset(self, offset: Offset) -> Offset | None:
        """Up to ``max_rows_per_epoch`` committed records further, spread over the partitions.

        A partition seen for the first time enters at its earliest offset with an empty range,
        so every range the job ever reads has both ends in a snapshot.
        """
        current: Positions = {t: dict(p) for t, p in offset.items()}
        partitions = self._partitions()
        stable = self._list_offsets(partitions, _LATEST)
        self.remember_latest(stable)  # the records-behind gauge's input (kafka_lag)
        new = [tp for tp in partitions if str(tp.partition) not in current.get(tp.topic, {})]
        earliest = self._list_offsets(new, _EARLIEST) if new else {}
        end: Positions = {t: dict(p) for t, p in current.items()}
        for tp in new:
            start = earliest[tp.topic][str(tp.partition)]
            end.setdefault(tp.topic, {})[str(tp.partition)] = start
            _log.info(
                "Kafka partition found topic=%s partition=%d offset=%d",
                tp.topic,
                tp.partition,
                start,
            )
        # Only partitions the offset already has: a new one's range starts at the next epoch.
        behind = [
            (topic, part, stable[topic][part] - pos)
            for topic, parts in current.items()
            for part, pos in parts.items()
            if stable.get(topic, {}).get(part, pos) > pos
        ]
        if not behind and not new:
            return None
        # An even share each (at least one record), the remainder to the first partitions.
        share, extra = divmod(self.max_rows_per_epoch, len(behind)) if behind else (0, 0)
        for index, (topic, part, lag) in enumerate(behind):
            end[topic][part] += min(lag, max(1, share + (1 if index < extra else 0)))
        return end

    def expired(self, offset: Offset) -> ExpiredOffsets | None:
        """The partitions whose position in ``offset`` is below their earliest offset.

        Their records from the position up to the earliest offset were deleted (retention,
        ``deleteRecords``) before the job read them. A partition of ``offset`` that the topics
        no longer have is left to :meth:`next_offset`, as always.

        Raises:
            KafkaConnectionRefused: The brokers refused the credentials or the certificate.
            KafkaException: The brokers did not answer (retried by the epoch loop).
        """
        positions = {
            (topic, int(part)): int(position)
            for topic, parts in offset.items()
            for part, position in parts.items()
        }
        if not positions:
            return None
        present = [tp for tp in self._partitions() if (tp.topic, tp.partition) in positions]
        earliest = self._list_offsets(present, _EARLIEST) if present else {}
        resumed: Positions = {topic: dict(parts) for topic, parts in offset.items()}
        ranges: list[ExpiredRange] = []
        for tp in present:
            restored = positions[(tp.topic, tp.partition)]
            start = earliest[tp.topic][str(tp.partition)]
            if restored < start:
                ranges.append(ExpiredRange(f"{tp.topic}-{tp.partition}", restored, start))
                resumed[tp.topic][str(tp.partition)] = start
        return ExpiredOffsets(tuple(ranges), resumed) if ranges else None

    def is_exhausted(self, offset: Offset) -> bool:
        """A bounded source ends when no committed record is left unread; else never."""
        return self.bounded and self.next_offset(offset) is None

    def rows_between(self, start: Offset, end: Offset) -> int:
        """The offsets in the ranges of every partition.

        That is the records read, except in a topic with a transactional producer: its commit
        and abort markers take offsets too, and the reader skips them and aborted records, so
        there this counts more than is read. Counting exactly would take a Spark job.
        """
        return sum(
            max(0, stop - start.get(topic, {}).get(part, stop))
            for topic, parts in end.items()
            for part, stop in parts.items()
        )

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """The records in ``[start, end)`` of every partition whose range is not empty."""
        starting: Positions = {}
        ending: Positions = {}
        for topic, parts in end.items():
            for part, stop in parts.items():
                begin = start.get(topic, {}).get(part, stop)
                if stop > begin:
                    starting.setdefault(topic, {})[part] = begin
                    ending.setdefault(topic, {})[part] = stop
        if not starting:
            return spark.createDataFrame([], KAFKA_SCHEMA)
        records = sum(
            ending[t][p] - begin for t, parts in starting.items() for p, begin in parts.items()
        )
        if records <= self.driver_read_max_records:
            read = self._read_on_driver(spark, starting, ending)
            if read is not None:
                return read
        assign = {topic: sorted(int(p) for p in parts) for topic, parts in starting.items()}
        reader = (
            spark.read.format("kafka")
            .option("kafka.bootstrap.servers", self.bootstrap_servers)
            .option("kafka.isolation.level", "read_committed")
            .option("assign", json.dumps(assign))
            .option("startingOffsets", json.dumps(starting))
            .option("endingOffsets", json.dumps(ending))
            .option("failOnDataLoss", "true")
        )
        secured = self.security.java_settings() if self.security is not None else {}
        for key, value in {**secured, **self.options}.items():
            reader = reader.option(f"kafka.{key}", value)
        return reader.load().select(*(field.name for field in KAFKA_SCHEMA.fields))

    def _read_on_driver(
        self, spark: SparkSession, starting: Positions, ending: Positions
    ) -> DataFrame | None:
        """The ranges read by the driver's consumer, or None where Spark must read them."""
        if self._fetcher is None:
            self._fetcher = DriverFetcher(
                self._client_settings(), _DRIVER_READ_TIMEOUT_S, DRIVER_READ_MAX_BYTES
            )
        ranges: Ranges = {
            topic: {part: (begin, ending[topic][part]) for part, begin in parts.items()}
            for topic, parts in starting.items()
        }
        try:
            table = self._fetcher.fetch(ranges)
        except (TooLargeForDriverError, TimeoutError) as reason:
            _log.info("Kafka epoch read by the executors instead reason=%s", reason)
            return None
        return spark.createDataFrame(table, KAFKA_SCHEMA)

    def committed(self, offset: Offset) -> None:
        """Commits a completed snapshot's offsets to ``group_id``, for monitoring only.

        It runs in the snapshot's 2nd phase, so it waits for the broker at most
        :data:`_COMMIT_WAIT_S`: a commit still in flight then goes on (its request ends within
        its own timeout) and is logged if it fails. (A consumer's synchronous commit waits
        for the group's coordinator without a bound, and hung a driver whose broker was
        killed right before it.) A failure is logged, never raised: restores never read the
        group's offsets.
        """
        if self.group_id is None:
            return
        positions = [
            TopicPartition(topic, int(part), int(pos))
            for topic, parts in offset.items()
            for part, pos in parts.items()
        ]
        if not positions:
            return
        try:
            futures = list(
                self.admin()
                .alter_consumer_group_offsets(
                    [ConsumerGroupTopicPartitions(self.group_id, positions)],
                    request_timeout=_TIMEOUT_S,
                )
                .values()
            )
        except Exception as error:  # monitoring only: never fail a snapshot over it
            self._commit_failed(error)
            return
        wait(futures, timeout=_COMMIT_WAIT_S)
        for future in futures:
            future.add_done_callback(self._commit_done)

    def _commit_done(self, future: Future[Any]) -> None:
        error = future.exception()
        if error is not None:
            self._commit_failed(error)

    def _commit_failed(self, error: BaseException) -> None:
        _log.warning(
            "Kafka offsets not committed to the group group=%s error=%s", self.group_id, error
        )
