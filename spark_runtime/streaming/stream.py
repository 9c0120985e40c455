"""``EpochStream``: a DataFrame-like stream of epoch batches, written as Structured Streaming is.

An ``EpochStream`` stands for the batches a source yields, one per epoch. Its methods are
PySpark's DataFrame methods with the same arguments, and they are declared once: a stateless
one (``select``, ``filter``, ``withColumn``, ``join`` with a static DataFrame, ...) is applied to
every epoch's batch on its own, as in a micro-batch; a stateful one (``groupBy().agg()``,
``dropDuplicates``, ``applyInPandasWithState``) keeps state across epochs, saved in every
snapshot and restored with it. What an epoch's batch should go through that has no method here
is written per epoch with :meth:`EpochStream.transformEpoch`.

Every stream knows its schema when it is defined, so a wrong column name fails when the
pipeline is defined, not in the first epoch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import pandas as pd
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import StructField, StructType

from spark_runtime.sinks.base import Sink
from spark_runtime.sinks.foreach_batch import BatchFunction, ForeachBatchSink
from spark_runtime.state import Deduplicate, PandasState, RunningAggregate, TumblingWindow
from spark_runtime.state.pandas_state import OUTPUT_MODES
from spark_runtime.streaming.aggregation import (
    TumblingWindowSpec,
    aggregate_functions,
    column_name,
    window_spec,
)
from spark_runtime.streaming.durations import whole_seconds

if TYPE_CHECKING:
    from spark_runtime.pipeline import Pipeline


_STREAM_STATIC_JOINS = {
    "inner",
    "cross",
    "left",
    "leftouter",
    "semi",
    "leftsemi",
    "anti",
    "leftanti",
}
"""The joins of a stream (left) with a static DataFrame that Structured Streaming allows."""


@dataclass(frozen=True)
class Watermark:
    """A stream's event-time watermark, as ``withWatermark`` set it.

    Attributes:
        column: The event-time column.
        delay_seconds: How late rows may arrive.
    """

    column: str
    delay_seconds: int


class EpochStream:
    """The batches of a stream, one per epoch; build it as a streaming DataFrame.

    Made by ``p.readStream(source)``; never constructed by users.
    """

    def __init__(
        self,
        pipeline: Pipeline,
        node: int,
        template: DataFrame,
        watermark: Watermark | None = None,
    ) -> None:
        self._pipeline = pipeline
        self._node = node
        self._template = template
        self._watermark = watermark

    # --- what the stream looks like ---------------------------------------------------------

    @property
    def schema(self) -> StructType:
        """The schema every epoch's batch has."""
        schema: StructType = self._template.schema
        return schema

    @property
    def columns(self) -> list[str]:
        """The column names every epoch's batch has."""
        return list(self._template.columns)

    @property
    def watermark(self) -> Watermark | None:
        """The watermark ``withWatermark`` set on this stream or one it derives from."""
        return self._watermark

    def printSchema(self) -> None:
        """Prints the schema, as ``DataFrame.printSchema``."""
        self._template.printSchema()

    # --- stateless: applied to every epoch's batch -------------------------------------------

    def transformEpoch(self, function: Callable[[DataFrame], DataFrame]) -> EpochStream:
        """Applies ``function`` to every epoch's batch on its own, like ``DataFrame.transform``.

        The escape hatch for anything without a method here: the function sees one epoch's
        rows, so a sort or a limit in it sorts or limits that epoch only.
        """
        template = function(self._template)
        node = self._pipeline.add_node((self._node,), lambda inputs: function(inputs[0]))
        return EpochStream(self._pipeline, node, template, self._kept_watermark(template))

    def select(self, *cols: str | Column) -> EpochStream:
        """``DataFrame.select`` on every epoch's batch."""
        return self.transformEpoch(lambda batch: batch.select(*cols))

    def selectExpr(self, *expr: str) -> EpochStream:
        """``DataFrame.selectExpr`` on every epoch's batch."""
        return self.transformEpoch(lambda batch: batch.selectExpr(*expr))

    def filter(self, condition: str | Column) -> EpochStream:
        """``DataFrame.filter`` on every epoch's batch."""
        return self.transformEpoch(lambda batch: batch.filter(condition))

    where = filter

    def withColumn(self, colName: str, col: Column) -> EpochStream:
        """``DataFrame.withColumn`` on every epoch's batch."""
        return self.transformEpoch(lambda batch: batch.withColumn(colName, col))

    def withColumns(self, colsMap: Mapping[str, Column]) -> EpochStream:
        """``DataFrame.withColumns`` on every epoch's batch."""
        columns = dict(colsMap)
        return self.transformEpoch(lambda batch: batch.withColumns(columns))

    def withColumnRenamed(self, existing: str, new: str) -> EpochStream:
        """``DataFrame.withColumnRenamed`` on every epoch's batch."""
        return self.transformEpoch(lambda batch: batch.withColumnRenamed(existing, new))

    def drop(self, *cols: str) -> EpochStream:
        """``DataFrame.drop`` on every epoch's batch."""
        return self.transformEpoch(lambda batch: batch.drop(*cols))

    def join(
        self,
        other: DataFrame,
        on: str | list[str] | Column | None = None,
        how: str | None = None,
    ) -> EpochStream:
        """Joins every epoch's batch with a static DataFrame (a stream-static join).

        Raises:
            ValueError: If ``other`` is a stream: stream-stream joins are not supported.
        """
        if isinstance(other, EpochStream):
            raise ValueError(
                "Joining two streams is not supported: join a stream with a static DataFrame, "
                "or union the streams with unionByName and aggregate by key"
            )
        kind = (how or "inner").lower().replace("_", "")
        if kind not in _STREAM_STATIC_JOINS:
            raise ValueError(
                f"A {how} join of a stream with a static DataFrame would output the unmatched "
                "static rows in every epoch: use inner, left, left_semi, left_anti or cross, "
                "as Structured Streaming does"
            )
        return self.transformEpoch(lambda batch: batch.join(other, on, how))

    def unionByName(self, other: EpochStream, allowMissingColumns: bool = False) -> EpochStream:
        """Every epoch's batches of both streams together, matched by column name."""
        template = self._template.unionByName(other._template, allowMissingColumns)
        node = self._pipeline.add_node(
            (self._node, other._node),
            lambda inputs: inputs[0].unionByName(inputs[1], allowMissingColumns),
        )
        return EpochStream(self._pipeline, node, template, self._kept_watermark(template))

    def withWatermark(self, eventTime: str, delayThreshold: str) -> EpochStream:
        """Sets the event-time watermark: the latest event time seen minus ``delayThreshold``.

        Window aggregations close a window once the watermark passes its end, and drop rows
        of windows already closed; ``EventTimeTimeout`` keys time out against it. The
        watermark advances with each epoch's rows, and is saved with the snapshot.

        Raises:
            ValueError: If ``eventTime`` is not a timestamp column or the delay is malformed.
        """
        column = column_name(eventTime, self.columns, "The watermark's event-time column")
        if self.schema[column].dataType.typeName() not in ("timestamp", "timestamp_ntz"):
            raise ValueError(
                f"withWatermark({eventTime!r}, ...): the column is "
                f"{self.schema[column].dataType.simpleString()}, not a timestamp"
            )
        delay = whole_seconds(delayThreshold, "The watermark delay", minimum=0)
        return EpochStream(self._pipeline, self._node, self._template, Watermark(column, delay))

    # --- stateful: state kept across epochs, in snapshots ----------------------------------

    def dropDuplicates(
        self, subset: list[str] | None = None, *, name: str | None = None
    ) -> EpochStream:
        """Passes the first row of every key and drops later rows of a key seen in any epoch.

        The set of keys seen is state, kept in snapshots and never evicted (a watermark does
        not shorten it). Which row of one epoch wins for a new key is Spark's choice.

        Args:
            subset: The key columns; by default all of them.
            name: The operator's name in snapshots (default ``dedup-<n>``).
        """
        keys = [
            column_name(c, self.columns, "The dropDuplicates column")
            for c in subset or self.columns
        ]
        return self._stateful(
            "dedup",
            name,
            lambda op: Deduplicate(op, self._pipeline.state_context, keys, self.schema),
        )

    def distinct(self, *, name: str | None = None) -> EpochStream:
        """``dropDuplicates()`` over all columns."""
        return self.dropDuplicates(name=name)

    def dropDuplicatesWithinWatermark(self, subset: list[str] | None = None) -> EpochStream:
        """Not supported: raises with what to use instead."""
        raise ValueError(
            "dropDuplicatesWithinWatermark is not supported: use dropDuplicates, which keeps "
            "every key seen (the watermark does not evict keys)"
        )

    def groupBy(self, *cols: str | Column) -> GroupedEpochStream:
        """Groups the stream for a running aggregation, a window aggregation or keyed state."""
        return GroupedEpochStream(self, list(cols))

    groupby = groupBy

    def orderBy(self, *cols: str | Column) -> EpochStream:
        """Not supported: raises with what to use instead."""
        raise ValueError(
            "A stream cannot be sorted: sort in the sink's reader, or one epoch's rows with "
            "transformEpoch(lambda batch: batch.orderBy(...))"
        )

    sort = orderBy

    # --- output --------------------------------------------------------------------------

    def writeStream(self, sink: Sink, *, name: str | None = None) -> None:
        """Sends every epoch's output to ``sink``, published per the processing guarantee.

        Args:
            sink: Where the output goes.
            name: The sink's name in snapshots and transactions (default ``sink-<n>``).
        """
        self._pipeline.add_sink(sink, name, self._node, self._template)

    def foreachBatch(
        self,
        func: BatchFunction,
        *,
        name: str | None = None,
        key: Sequence[str] = (),
    ) -> None:
        """Calls ``func(batch_df, batch_id)`` with each batch of output, as Structured Streaming's
        ``foreachBatch`` does.

        A batch is the output one snapshot commits, and ``batch_id`` is that snapshot's id,
        which a restore does not change: ``func`` runs on the driver in the snapshot's 2nd
        phase, and a restore calls it again for the restore point's batch with the same id and
        rows, so a ``func`` that writes once per id is exactly once. A batch without rows is not
        handed over. Under AT_LEAST_ONCE ``func`` gets every epoch's output at once, with an id
        that only grows but is not stable across restores
        (:class:`~spark_runtime.sinks.foreach_batch.ForeachBatchSink`).

        Args:
            func: Takes the batch's DataFrame and its id, and, with a third parameter, the
                uid of the job whose snapshot the batch is: ids are a job's own, so a function
                that records what it applied keys it by ``(job_uid, batch_id)``.
            name: The sink's name in snapshots (default ``sink-<n>``, counted with
                ``writeStream``'s).
            key: For an update stream (``groupBy(...).agg(...)``): the columns that identify a
                row; the batch then holds each key's latest row, not a row per epoch.
        """
        self.writeStream(ForeachBatchSink(func, key=key), name=name)

    # --- plumbing ----------------------------------------------------------------------------

    def _kept_watermark(self, template: DataFrame) -> Watermark | None:
        if self._watermark is not None and self._watermark.column in template.columns:
            return self._watermark
        return None

    def _stateful(self, kind: str, name: str | None, make: Callable[[str], Any]) -> EpochStream:
        node, operator = self._pipeline.add_state(kind, name, self._node, make)
        template = self._pipeline.spark.createDataFrame([], operator.output_schema)
        return EpochStream(self._pipeline, node, template, self._kept_watermark(template))


class GroupedEpochStream:
    """A grouped stream: ``agg`` for running or window aggregates, or keyed state in pandas."""

    def __init__(self, stream: EpochStream, cols: list[str | Column]) -> None:
        if not cols:
            raise ValueError("groupBy() needs at least one key column")
        self._stream = stream
        self._windows = [(i, window_spec(c, stream.columns)) for i, c in enumerate(cols)]
        self._cols = cols

    def agg(self, *exprs: Column, name: str | None = None) -> EpochStream:
        """Running aggregates per key (``update`` mode), or per key and window (``append``).

        Without ``F.window`` among the group columns, every epoch outputs the new aggregates of
        each key the epoch touched, as Structured Streaming's update mode. With
        ``F.window(time, duration)``, a window is output once, when the watermark passes its
        end, as append mode; the stream needs ``withWatermark`` on that time column.

        Args:
            exprs: Aggregates the state store can merge: ``F.count``, ``F.sum``, ``F.min``,
                ``F.max`` of a column or expression, each best named with ``alias``.
            name: The operator's name in snapshots (default ``aggregate-<n>``/``window-<n>``).

        Raises:
            ValueError: For an aggregate the store cannot merge, a sliding window, or a window
                without a watermark; the message says what to write instead.
        """
        stream = self._stream
        windows = [(i, w) for i, w in self._windows if w is not None]
        if len(windows) > 1:
            raise ValueError("groupBy() takes at most one F.window column")
        keys = [
            column_name(c, stream.columns, "The groupBy column")
            for i, c in enumerate(self._cols)
            if all(i != w for w, _ in windows)
        ]
        if not windows:
            aggs = aggregate_functions(stream._template, keys, exprs)
            return stream._stateful(
                "aggregate",
                name,
                lambda op: RunningAggregate(
                    op, stream._pipeline.state_context, keys, aggs, stream.schema
                ),
            )
        position, spec = windows[0]
        return self._window_aggregate(keys, position, spec, exprs, name)

    def count(self, *, name: str | None = None) -> EpochStream:
        """``agg(F.count("*").alias("count"))``, as ``GroupedData.count``."""
        return self.agg(F.count(F.lit(1)).alias("count"), name=name)

    def _window_aggregate(
        self,
        keys: list[str],
        position: int,
        spec: TumblingWindowSpec,
        exprs: Sequence[Column],
        name: str | None,
    ) -> EpochStream:
        stream = self._stream
        watermark = stream.watermark
        if watermark is None or watermark.column != spec.time_column:
            raise ValueError(
                f"A window aggregation over {spec.time_column!r} needs "
                f"withWatermark({spec.time_column!r}, delay) on the stream: the watermark says "
                "when a window is complete and is output"
            )
        windowed = stream._template.withColumn(
            TumblingWindow.WINDOW_START,
            F.window(F.col(spec.time_column), f"{spec.seconds} seconds").start,
        )
        aggs = aggregate_functions(windowed, [*keys, TumblingWindow.WINDOW_START], exprs)
        windows = stream._stateful(
            "window",
            name,
            lambda op: TumblingWindow(
                op,
                stream._pipeline.state_context,
                keys,
                spec.time_column,
                spec.seconds,
                aggs,
                watermark.delay_seconds,
                stream.schema,
            ),
        )
        # Structured Streaming's shape: the window as a struct where F.window stood.
        window = F.struct(
            F.col(TumblingWindow.WINDOW_START).alias("start"),
            F.col(TumblingWindow.WINDOW_END).alias("end"),
        ).alias("window")
        ordered: list[str | Column] = list(keys)
        ordered.insert(position, window)
        return windows.select(*ordered, *aggs)

    def applyInPandasWithState(
        self,
        func: Callable[[Any, Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]],
        outputStructType: StructType | str,
        stateStructType: StructType | str,
        outputMode: str,
        timeoutConf: str = GroupStateTimeout.NoTimeout,
        *,
        name: str | None = None,
    ) -> EpochStream:
        """Keyed state in a pandas function, as ``GroupedData.applyInPandasWithState``.

        ``func(key, batches, state)`` is called in every epoch for every key of the epoch's
        batch, and for each key whose timeout passed (``state.hasTimedOut``); ``state`` is
        PySpark's ``GroupState``. The key's value (a tuple of ``stateStructType``) and its
        timeout are saved with every snapshot.

        Args:
            func: The state function.
            outputStructType: The schema of the frames ``func`` yields.
            stateStructType: The schema of a key's state value.
            outputMode: ``"append"`` or ``"update"``; both output what ``func`` yields.
            timeoutConf: A ``GroupStateTimeout``; ``EventTimeTimeout`` needs ``withWatermark``.
            name: The operator's name in snapshots (default ``pandas-<n>``).
        """
        if outputMode.lower() not in OUTPUT_MODES:
            raise ValueError(f"outputMode {outputMode!r} is not one of {', '.join(OUTPUT_MODES)}")
        stream = self._stream
        if any(w is not None for _, w in self._windows):
            raise ValueError("applyInPandasWithState groups by columns, not by F.window")
        keys = [column_name(c, stream.columns, "The groupBy column") for c in self._cols]
        watermark = stream.watermark
        event_time = (watermark.column, watermark.delay_seconds) if watermark else None
        output_schema = _schema(stream, outputStructType)
        state_schema = _schema(stream, stateStructType)
        return stream._stateful(
            "pandas",
            name,
            lambda op: PandasState(
                op,
                stream._pipeline.state_context,
                keys,
                func,
                state_schema,
                output_schema,
                stream.schema,
                timeoutConf,
                event_time,
            ),
        )


def _schema(stream: EpochStream, schema: StructType | str) -> StructType:
    if isinstance(schema, StructType):
        return schema
    parsed: StructType = stream._pipeline.spark.createDataFrame([], schema).schema
    return StructType([StructField(f.name, f.dataType, True) for f in parsed.fields])
