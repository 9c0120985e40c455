"""Tumbling event-time windows with a watermark kept on the driver and saved with the state."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StructField, StructType, TimestampType

from spark_runtime.lineage import Checkpointed
from spark_runtime.state.aggregates import (
    FLAG_COLUMN,
    MergePlan,
    check_aggregates,
    describe_aggregates,
    partial_aggregates,
)
from spark_runtime.state.keyed import KeyedState, StateContext


class TumblingWindow(KeyedState):
    """Aggregates per key and event-time window; emits each window once the watermark passed it.

    The watermark is the highest event time seen minus ``watermark_delay_s``; rows of windows
    already closed by the watermark are dropped as late. The watermark is driver-side state,
    saved with the snapshot so a restore closes windows exactly where the original run did.
    When a bounded input ends, the pipeline runs one closing epoch in which the watermark is
    +infinity (:meth:`end_input`), so the windows still open are emitted once, before the final
    snapshot.

    Args:
        name: Operator name.
        context: Shared state settings.
        keys: Key columns (besides the window).
        time_column: The event-time column (timestamp).
        window_s: Window length in seconds.
        aggs: Output column -> (function, input column).
        watermark_delay_s: How late rows may arrive.
        input_schema: The schema of the batches.
    """

    WINDOW_START = "window_start"
    WINDOW_END = "window_end"

    def __init__(
        self,
        name: str,
        context: StateContext,
        keys: Sequence[str],
        time_column: str,
        window_s: int,
        aggs: Mapping[str, tuple[str, str | None]],
        watermark_delay_s: int,
        input_schema: StructType,
    ) -> None:
        if window_s <= 0 or watermark_delay_s < 0:
            raise ValueError("window_s must be > 0 and watermark_delay_s >= 0")
        check_aggregates(aggs)
        self.time_column = time_column
        self.window_s = window_s
        self.aggs = dict(aggs)
        self.watermark_delay_s = watermark_delay_s
        self._groups = [*keys, self.WINDOW_START]
        empty = self._windowed(context.spark.createDataFrame([], input_schema))
        probe = partial_aggregates(empty, self._groups, self.aggs)
        super().__init__(name, context, keys, probe.schema)
        self._merge = MergePlan(
            self._groups, self.aggs, probe.schema, context.partitions, self.keys
        )
        self.watermark_s: float | None = None
        self.input_ended = False

    def _windowed(self, batch: DataFrame) -> DataFrame:
        start = F.window(F.col(self.time_column), f"{self.window_s} seconds").start
        return batch.withColumn(self.WINDOW_START, start)

    def driver_values(self) -> dict[str, Any]:
        """Adds the watermark (epoch seconds or None) and whether the input ended."""
        return {
            **super().driver_values(),
            "watermark": self.watermark_s,
            "inputEnded": self.input_ended,
        }

    def load_driver_values(self, values: Mapping[str, Any]) -> None:
        """Restores the watermark and the end-of-input flag (absent in older snapshots)."""
        super().load_driver_values(values)
        self.watermark_s = values["watermark"]
        self.input_ended = bool(values.get("inputEnded", False))

    def _reset_driver_values(self) -> None:
        self.watermark_s = None
        self.input_ended = False

    @property
    def semantics(self) -> str:
        """The window's length and the aggregates (not the delay: it may change)."""
        return f"window={self.window_s}s; {describe_aggregates(self.aggs)}"

    @property
    def holds_open_output(self) -> bool:
        """Open windows wait for the end of the input until :meth:`end_input` was served.

        Saved with the snapshot: a restore from a snapshot taken after the closing epoch does
        not emit the windows again, one taken before it emits them in its own closing epoch.
        """
        return not self.input_ended

    def end_input(self) -> None:
        """Moves the watermark to +infinity: the next update closes and emits every window."""
        self.input_ended = True

    @property
    def output_schema(self) -> StructType:
        """The state's columns and ``window_end``."""
        return StructType(
            [*self.state_schema.fields, StructField(self.WINDOW_END, TimestampType(), True)]
        )

    def update(self, batch: DataFrame) -> DataFrame:
        """Merges the batch and returns the windows it closed with ``window_end``."""
        windowed = self._windowed(batch)
        start_s = F.unix_timestamp(F.col(self.WINDOW_START))
        if self.watermark_s is not None:
            windowed = windowed.filter(start_s + self.window_s > F.lit(self.watermark_s))
        latest = batch.agg(F.max(F.unix_micros(F.col(self.time_column)))).first()
        if latest is not None and latest[0] is not None:
            candidate = latest[0] / 1e6 - self.watermark_delay_s
            if self.watermark_s is None or candidate > self.watermark_s:
                self.watermark_s = candidate
        partitioned = self.state_partitioned
        merged = self._merge.apply(self.state, windowed, partitioned).drop(FLAG_COLUMN)
        if self.input_ended:
            closed_flag = F.lit(True)
        elif self.watermark_s is None:
            closed_flag = F.lit(False)
        else:
            closed_flag = start_s + self.window_s <= F.lit(self.watermark_s)
        # The merge's output is partitioned as the state must be: no repartition needed.
        combined = self._checkpoint_state(merged.withColumn(FLAG_COLUMN, closed_flag), partitioned)
        self._replace_state(
            Checkpointed(
                combined.frame.filter(~F.col(FLAG_COLUMN)).drop(FLAG_COLUMN),
                combined.rdd_ids,
                combined.partitioning,
            )
        )
        closed = combined.frame.filter(F.col(FLAG_COLUMN)).drop(FLAG_COLUMN)
        return closed.withColumn(
            self.WINDOW_END,
            F.timestamp_seconds(F.unix_timestamp(F.col(self.WINDOW_START)) + self.window_s),
        )
