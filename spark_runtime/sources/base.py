"""What a replayable source is: it decides where each epoch's range ends, never what it holds.

Exactly-once and at-least-once both rest on the source being replayable
(``docs/concepts/protocol.md``, "Processing guarantees"): after a restore the job must read again
exactly what it read after the snapshot. So a source never decides *what* a range holds at read
time; it decides only *where the next range ends* (:meth:`Source.next_offset`), and
:meth:`Source.read` of the same two offsets always yields the same rows. The offset reached by the
last epoch is the source's snapshot state (see :mod:`spark_runtime.sources.participant`).

Replayable has a limit: an upstream that deletes old data (Kafka's retention) can no longer
replay a range whose start it deleted. A source that can tell says so in :meth:`Source.expired`;
the pipeline asks it once per execution, before the restored offset is first used, and
``spec.expiredOffsets`` decides whether the execution stops (:class:`OffsetsExpired`, exit 71)
or goes on without those records.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

Offset = Any
"""A JSON-serialisable position in a source."""


@dataclass(frozen=True)
class ExpiredRange:
    """One part of a source (a Kafka partition) whose offset points at data that is gone.

    Attributes:
        part: The part's name, ``topic-partition`` for Kafka.
        restored: The offset the job would read on from (the restored one).
        earliest: The earliest offset the upstream still holds.
    """

    part: str
    restored: int
    earliest: int

    @property
    def lost(self) -> int:
        """Offsets between the two: records the job never read and never can."""
        return self.earliest - self.restored

    def describe(self) -> str:
        """The facts for people: ``orders-0 restored offset 10, earliest 25, 15 records gone``."""
        return (
            f"{self.part} restored offset {self.restored}, earliest {self.earliest}, "
            f"{self.lost} records gone"
        )


@dataclass(frozen=True)
class ExpiredOffsets:
    """What :meth:`Source.expired` found: the parts whose data is gone, and where to go on.

    Attributes:
        ranges: Every part whose offset is below its earliest retained one.
        resumed: The offset with each of those parts moved to its earliest offset, the rest
            as they were: where the source goes on from when that is allowed.
    """

    ranges: tuple[ExpiredRange, ...]
    resumed: Offset

    @property
    def lost(self) -> int:
        """Records lost over all the parts."""
        return sum(expired.lost for expired in self.ranges)


class OffsetsExpired(Exception):  # noqa: N818 - names the condition, like the protocol's errors
    """A source's restored offset points below what its upstream still holds, and
    ``spec.expiredOffsets`` is Fail: the driver ends the execution with exit 71
    (``SOURCE_DATA_LOST``) and this message.

    Args:
        source: The source's operator name.
        ranges: The parts whose data is gone.
    """

    def __init__(self, source: str, ranges: Sequence[ExpiredRange]) -> None:
        self.source = source
        self.ranges = tuple(ranges)
        lost = sum(expired.lost for expired in self.ranges)
        super().__init__(
            f"Source {source}: the restored offsets are below the earliest offsets the log "
            f"still holds, so {lost} records the job never read are gone (retention or "
            f"deleted records): {'; '.join(expired.describe() for expired in self.ranges)}. "
            "Set spec.expiredOffsets to Earliest (local mode: --expired-offsets Earliest) to "
            "go on from the earliest offsets without them, or restore another snapshot"
        )


class Source(ABC):
    """A replayable source of rows."""

    @abstractmethod
    def schema(self, spark: SparkSession) -> StructType:
        """The schema of every batch."""

    @abstractmethod
    def initial_offset(self) -> Offset:
        """Where a job without snapshot starts."""

    @abstractmethod
    def next_offset(self, offset: Offset) -> Offset | None:
        """Where the next epoch's range ends, or None if there is nothing new right now."""

    @abstractmethod
    def is_exhausted(self, offset: Offset) -> bool:
        """Whether no row will ever come after ``offset`` (a bounded source's end)."""

    @abstractmethod
    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """The rows after ``start`` up to and including ``end``; the same every time."""

    def rows_between(self, start: Offset, end: Offset) -> int | None:
        """How many rows :meth:`read` of this range yields, if the offsets tell without reading.

        For the driver's rows-read metric, which must cost no Spark job: a source that could
        only count by reading returns None (the default) and is not counted.
        """
        return None

    def expired(self, offset: Offset) -> ExpiredOffsets | None:
        """Which parts of ``offset`` point below the earliest data the upstream still holds.

        Asked once per execution, before ``offset`` (the restored one) is first used; an
        exception is retried as :meth:`next_offset`'s is. A source whose upstream never
        deletes what it has not read returns None (the default).
        """
        return None

    def records_behind(self, offset: Offset) -> int | None:
        """How many records the source holds past ``offset``, if it knows without asking.

        For the driver's records-behind gauge, asked right after each :meth:`next_offset`
        (an epoch's plan) with the position the job has read to: a source whose
        ``next_offset`` learnt where its upstream ends (Kafka's latest offsets) answers from
        that, at no cost. None (the default) is unknown, and the source gets no series. Must
        not raise.
        """
        return None

    def committed(self, offset: Offset) -> None:  # noqa: B027 - optional, no-op by default
        """Told after a snapshot's second phase that ``offset`` is in a completed snapshot.

        For acknowledging upstream for monitoring (a Kafka consumer group's offsets); a
        restore never depends on it. Must not raise.
        """
