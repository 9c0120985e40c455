"""Reading a small epoch's offset ranges in the driver, with one long-lived consumer.

Spark's Kafka reader is built for volume: every read plans through a new admin client and its
tasks open new consumers on the executors (a batch query's consumers belong to a group named
for that query, so none is reused from the last epoch). That costs hundreds of milliseconds
however few records an epoch has, and at a steady trickle of input it is most of an epoch.
An epoch of a few thousand records is read faster by the driver, which already talks to the
brokers for the offsets: one consumer, kept across epochs, is re-pointed at the epoch's ranges
and the records become a DataFrame through Arrow.

Both readers give the same rows for the same ranges: ``read_committed``, so aborted records
of a transactional producer are skipped and its markers take offsets but give no rows; a range
whose start is gone from the log (retention) fails the read, as ``failOnDataLoss`` does in
Spark's. A fetch that would hold more than its byte bound in the driver gives up and says so,
and the caller reads the epoch with Spark instead.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Mapping
from typing import Any

import pyarrow as pa
from confluent_kafka import OFFSET_INVALID, Consumer, KafkaError, KafkaException, TopicPartition

Ranges = dict[str, dict[str, tuple[int, int]]]
"""topic -> partition (as a string) -> ``[start, end)`` offsets."""

ARROW_SCHEMA = pa.schema(
    [
        pa.field("key", pa.binary()),
        pa.field("value", pa.binary()),
        pa.field("topic", pa.string()),
        pa.field("partition", pa.int32()),
        pa.field("offset", pa.int64()),
        pa.field("timestamp", pa.timestamp("ms", tz="UTC")),
        pa.field("timestampType", pa.int32()),
    ]
)
"""The Kafka source's rows (``KAFKA_SCHEMA``) as Arrow."""

_POLL_BATCH = 1000
_POLL_WAIT_S = 0.005


class RecordsLostError(Exception):
    """A range starts below the partition's log start: its records were deleted unread."""


class TooLargeForDriverError(Exception):
    """The ranges hold more bytes than a driver-side read may keep."""


class DriverFetcher:
    """One ``read_committed`` consumer of the driver, assigned anew to each epoch's ranges.

    Args:
        settings: Client settings (``bootstrap.servers`` and the source's options).
        timeout_s: How long one fetch may take before it fails.
        max_bytes: Keys and values a fetch may hold; beyond it :class:`TooLargeForDriverError`.
    """

    def __init__(self, settings: Mapping[str, Any], timeout_s: float, max_bytes: int) -> None:
        self._settings = dict(settings)
        self._timeout_s = timeout_s
        self._max_bytes = max_bytes
        self._consumer: Consumer | None = None

    def _open(self) -> Consumer:
        if self._consumer is None:
            self._consumer = Consumer(
                {
                    **self._settings,
                    # Never joins or commits: the group only satisfies the client.
                    "group.id": f"sj-driver-read-{uuid.uuid4().hex[:12]}",
                    "isolation.level": "read_committed",
                    "enable.auto.commit": False,
                    "enable.auto.offset.store": False,
                    "enable.partition.eof": False,
                    # A start that retention removed is an error, not a silent jump.
                    "auto.offset.reset": "error",
                }
            )
        return self._consumer

    def fetch(self, ranges: Ranges) -> pa.Table:
        """Every committed record in ``ranges``, as :data:`ARROW_SCHEMA` rows.

        Raises:
            TooLargeForDriverError: The records exceed ``max_bytes``; nothing is kept.
            TimeoutError: The ranges were not read in ``timeout_s``.
            RecordsLostError: A range's records are no longer in the log.
            KafkaException: The brokers refused the read otherwise.
        """
        consumer = self._open()
        wanted = {
            (topic, int(part)): (start, end)
            for topic, parts in ranges.items()
            for part, (start, end) in parts.items()
            if end > start
        }
        columns: dict[str, list[Any]] = {name: [] for name in ARROW_SCHEMA.names}
        if not wanted:
            return pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)
        consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in wanted.items()])
        try:
            self._fill(consumer, wanted, columns)
        finally:
            consumer.unassign()
        return pa.Table.from_pydict(columns, schema=ARROW_SCHEMA)

    def _fill(
        self,
        consumer: Consumer,
        wanted: dict[tuple[str, int], tuple[int, int]],
        columns: dict[str, list[Any]],
    ) -> None:
        open_ranges = dict(wanted)
        held = 0
        deadline = time.monotonic() + self._timeout_s
        while open_ranges:
            if time.monotonic() > deadline:
                left = ", ".join(f"{t}[{p}]" for t, p in sorted(open_ranges))
                raise TimeoutError(f"Kafka ranges not read in {self._timeout_s:.0f} s: {left}")
            for message in consumer.consume(_POLL_BATCH, _POLL_WAIT_S):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._AUTO_OFFSET_RESET:
                        raise RecordsLostError(
                            f"Records of {message.topic()}[{message.partition()}] in the "
                            "epoch's range are no longer in the log (retention or deletion), "
                            f"so they would be lost: {error.str()}"
                        )
                    raise KafkaException(error)
                topic, partition, offset = message.topic(), message.partition(), message.offset()
                if topic is None or partition is None or offset is None:
                    continue  # only error events lack them
                place = (topic, partition)
                bounds = open_ranges.get(place)
                if bounds is None or offset >= bounds[1]:
                    continue
                key, value = message.key(), message.value()
                held += len(key or b"") + len(value or b"")
                if held > self._max_bytes:
                    raise TooLargeForDriverError(
                        f"more than {self._max_bytes} bytes of keys and values"
                    )
                kind, stamp = message.timestamp()
                columns["key"].append(key)
                columns["value"].append(value)
                columns["topic"].append(place[0])
                columns["partition"].append(place[1])
                columns["offset"].append(offset)
                columns["timestamp"].append(stamp if stamp >= 0 else None)
                # librdkafka counts types from 0 = none; Kafka (and Spark) from -1 = none.
                columns["timestampType"].append(kind - 1)
                if offset + 1 >= bounds[1]:
                    del open_ranges[place]
            # A transaction's marker can be a range's last offset: no record has it, but the
            # consumer's position moves past it.
            done = [
                place
                for place, position in self._positions(consumer, open_ranges).items()
                if position >= open_ranges[place][1]
            ]
            for place in done:
                del open_ranges[place]

    @staticmethod
    def _positions(
        consumer: Consumer, open_ranges: Mapping[tuple[str, int], tuple[int, int]]
    ) -> dict[tuple[str, int], int]:
        if not open_ranges:
            return {}
        found = consumer.position([TopicPartition(t, p) for t, p in open_ranges])
        return {(tp.topic, tp.partition): tp.offset for tp in found if tp.offset != OFFSET_INVALID}
