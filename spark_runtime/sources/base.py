"""What a replayable source is: it decides where each epoch's range ends, never what it holds.

Exactly-once and at-least-once both rest on the source being replayable
(``docs/concepts/protocol.md``, "Processing guarantees"): after a restore the job must read again
exactly what it read after the snapshot. So a source never decides *what* a range holds at read
time; it decides only *where the next range ends* (:meth:`Source.next_offset`), and
:meth:`Source.read` of the same two offsets always yields the same rows. The offset reached by the
last epoch is the source's snapshot state (see :mod:`spark_runtime.sources.participant`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

Offset = Any
"""A JSON-serialisable position in a source."""


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

    def committed(self, offset: Offset) -> None:  # noqa: B027 - optional, no-op by default
        """Told after a snapshot's second phase that ``offset`` is in a completed snapshot.

        For acknowledging upstream for monitoring (a Kafka consumer group's offsets); a
        restore never depends on it. Must not raise.
        """
