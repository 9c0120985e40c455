"""A generated sequence: replayable by construction, for tests, examples and benchmarks.

Row ``n`` is a function of ``n`` alone, so any range can be read again and yields the same
rows; a paced sequence keeps its start time in the offset, so that property survives a
restore too.
"""

from __future__ import annotations

import time

from pyspark import SparkContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import LongType, StructField, StructType, TimestampType

from spark_runtime.sources.base import Offset, Source


class SequenceSource(Source):
    """A deterministic sequence 0, 1, 2, ... with an event time, for tests and benchmarks.

    Row ``n`` is ``value = n`` and ``timestamp = n * event_time_step_ms`` milliseconds after the
    Unix epoch, whatever the epoch boundaries: a replay yields the same rows.

    Args:
        rows_per_epoch: Rows each epoch reads (exclusive with ``rows_per_second``).
        rows_per_second: Paces the sequence in wall-clock time; the start time is part of the
            offset, so a restored job catches up instead of starting over.
        end: Stop after ``end`` rows; None for an endless sequence.
        max_rows_per_epoch: Caps an epoch when a paced sequence catches up.
        event_time_step_ms: Event-time distance between consecutive rows.
        partitions: Spark partitions of each batch.
    """

    def __init__(
        self,
        *,
        rows_per_epoch: int | None = None,
        rows_per_second: float | None = None,
        end: int | None = None,
        max_rows_per_epoch: int = 1_000_000,
        event_time_step_ms: int = 1000,
        partitions: int = 2,
    ) -> None:
        if (rows_per_epoch is None) == (rows_per_second is None):
            raise ValueError("Give exactly one of rows_per_epoch and rows_per_second")
        if (rows_per_epoch or 1) <= 0 or (rows_per_second or 1) <= 0:
            raise ValueError("The sequence's rate must be positive")
        self.rows_per_epoch = rows_per_epoch
        self.rows_per_second = rows_per_second
        self.end = end
        self.max_rows_per_epoch = max_rows_per_epoch
        self.event_time_step_ms = event_time_step_ms
        self.partitions = partitions
        # A paced sequence's clock, from the first look at an offset that has none: the offset
        # only carries it once a row was read, so it must outlive the epochs that read nothing.
        self._clock_started_ms: int | None = None
        # The read's columns, built once per SparkContext: each is a few py4j round trips.
        self._columns: tuple[SparkContext, list[Column]] | None = None

    def schema(self, spark: SparkSession) -> StructType:
        """``value long, timestamp timestamp``."""
        return StructType(
            [StructField("value", LongType(), False), StructField("timestamp", TimestampType())]
        )

    def initial_offset(self) -> Offset:
        """Nothing read yet; a paced sequence starts its clock on the first epoch."""
        return {"next": 0, "startedMs": None}

    def next_offset(self, offset: Offset) -> Offset | None:
        """Advances by the rate, capped by ``end`` and ``max_rows_per_epoch``."""
        first = int(offset["next"])
        started = offset["startedMs"]
        if self.rows_per_epoch is not None:
            last = first + self.rows_per_epoch
        else:
            assert self.rows_per_second is not None
            if started is None:
                if self._clock_started_ms is None:
                    self._clock_started_ms = int(time.time() * 1000)
                started = self._clock_started_ms
            elapsed_s = max(0.0, time.time() - started / 1000)
            last = int(elapsed_s * self.rows_per_second)
        last = min(last, first + self.max_rows_per_epoch)
        if self.end is not None:
            last = min(last, self.end)
        if last <= first:
            return None
        return {"next": last, "startedMs": started}

    def is_exhausted(self, offset: Offset) -> bool:
        """True once ``end`` rows were read."""
        return self.end is not None and int(offset["next"]) >= self.end

    def rows_between(self, start: Offset, end: Offset) -> int:
        """Exactly the values in the range."""
        return int(end["next"]) - int(start["next"])

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """Values ``start.next`` to ``end.next - 1``."""
        rows = spark.range(int(start["next"]), int(end["next"]), numPartitions=self.partitions)
        context = spark.sparkContext
        if self._columns is None or self._columns[0] is not context:
            self._columns = (
                context,
                [
                    F.col("id").alias("value"),
                    F.timestamp_millis(F.col("id") * F.lit(self.event_time_step_ms)).alias(
                        "timestamp"
                    ),
                ],
            )
        return rows.select(*self._columns[1])
