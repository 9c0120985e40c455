"""Keyed state operators: running aggregations, de-duplication, tumbling windows, pandas state.

State is a DataFrame hash-partitioned by key into a fixed number of partitions (the job's
``state_partitions``), the way Jet partitions keyed state across processors. Fixing the count
is what makes a snapshot restorable: chunk ``<snapshot>/<operator>/<partition>/<seq>`` holds
exactly the keys that Spark's hash partitioner puts into ``partition``, and a restore
re-creates the same partitions. Each operator is a snapshot participant (taking step 4):
Spark tasks write their partition as Arrow IPC chunks straight from the executors, and the
driver writes one small chunk at partition ``state_partitions`` for values the driver keeps
(the partition count itself, a window operator's watermark).

Every update materialises the new state (``localCheckpoint``) before the epoch's output is
used, so an epoch computes each operator once and the plan never grows with the epoch count.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StringType, StructField, StructType, TimestampType

from spark_runtime.chunk_io import (
    DESCRIPTOR_SCHEMA,
    StoreAddress,
    decode_batches,
    descriptors_batch,
    read_chunks,
    write_partition,
)
from spark_runtime.protocol.chunks import ChunkDescriptor, ChunkKey, ChunkWriter, SnapshotRef
from spark_runtime.protocol.ports import ChunkReader
from spark_runtime.lineage import Checkpointed, checkpoint, empty_frame

_log = logging.getLogger(__name__)

AGGREGATES = ("count", "sum", "min", "max")
"""The running aggregates: each merges a batch's partial result into the stored one."""

DRIVER_RESTORE_MAX_CHUNKS = 16
"""A state of at most this many chunks is read by the driver first, to see if it is small."""

DRIVER_RESTORE_MAX_BYTES = 1024 * 1024
"""A state of at most this many bytes is restored through the driver: that saves starting
Python workers. A larger one is restored in executor tasks, since a DataFrame built from a
driver-side Arrow table is slow to repartition and materialise: ``bench.profile_restore``
measured a 10 MiB state taking several times longer through the driver."""

_FLAG = "_sj_flag"
_META_SEQ = 0


@dataclass(frozen=True)
class StateContext:
    """What every state operator of a job shares.

    Attributes:
        spark: The session.
        partitions: The fixed number of state partitions.
        store: Where executors find the snapshot store.
    """

    spark: SparkSession
    partitions: int
    store: StoreAddress


class KeyedState(ABC):
    """A snapshot participant holding one operator's keyed state as a partitioned DataFrame.

    Args:
        name: The operator's unique name (used in chunk keys).
        context: The job's shared state settings.
        keys: The key columns.
        state_schema: The stored state's schema, key columns first.
    """

    def __init__(
        self, name: str, context: StateContext, keys: Sequence[str], state_schema: StructType
    ) -> None:
        if not keys:
            raise ValueError(f"Operator {name} needs at least one key column")
        self._name = name
        self._context = context
        self.keys = tuple(keys)
        self.state_schema = state_schema
        self._state = empty_frame(context.spark, state_schema)
        self._output: Checkpointed | None = None

    @property
    def name(self) -> str:
        """The operator name in chunk keys."""
        return self._name

    @property
    def state(self) -> DataFrame:
        """The current state, materialised."""
        return self._state.frame

    def _partitioned(self, frame: DataFrame) -> DataFrame:
        return frame.repartition(self._context.partitions, *self.keys)

    def _keep_output(self, output: Checkpointed) -> DataFrame:
        """Holds an epoch's separately materialised output until the next update frees it.

        Sinks read an epoch's output within the epoch (buffering sinks take their own copy),
        so it is only needed until the operator runs again.
        """
        if self._output is not None:
            self._output.release()
        self._output = output
        return output.frame

    def _replace_state(self, new_state: Checkpointed) -> None:
        old, self._state = self._state, new_state
        if old.rdd_ids != new_state.rdd_ids:
            old.release()

    # Driver-side values, saved next to the state partitions.

    def driver_values(self) -> dict[str, Any]:
        """Values the operator keeps on the driver; subclasses add theirs."""
        return {"partitions": self._context.partitions}

    def load_driver_values(self, values: Mapping[str, Any]) -> None:
        """Restores :meth:`driver_values`.

        Raises:
            ValueError: If the snapshot was taken with another partition count.
        """
        if int(values["partitions"]) != self._context.partitions:
            raise ValueError(
                f"Operator {self._name}'s snapshot has {values['partitions']} state partitions "
                f"but the job now has {self._context.partitions}; keep state_partitions unchanged "
                "or start the job without its snapshot"
            )

    # Participant

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """Writes every state partition from the executors, then the driver values."""
        address = self._context.store
        map_name, operator = writer.map_name, writer.operator

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            context = TaskContext.get()
            assert context is not None, "runs inside a Spark task"
            written = write_partition(
                address,
                map_name,
                snapshot_id,
                operator,
                context.partitionId(),
                batches,
            )
            yield descriptors_batch(written)

        rows = self.state.mapInArrow(write, _descriptor_struct()).collect()
        descriptors = [
            ChunkDescriptor(ChunkKey.parse(row["key"]), row["num_bytes"], row["num_keys"])
            for row in rows
        ]
        meta = json.dumps(self.driver_values()).encode()
        descriptors.append(writer.write(self._context.partitions, _META_SEQ, meta, 0))
        _log.info(
            "Saved state operator=%s snapshotId=%d chunks=%d keys=%d",
            self._name,
            snapshot_id,
            len(descriptors),
            sum(d.num_keys for d in descriptors),
        )
        return descriptors

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """State has no external transactions: nothing to commit."""
        return

    def restore(self, snapshot: SnapshotRef | None, reader: ChunkReader) -> None:
        """Reads the state back (restore step 5): a small one via the driver, else in tasks."""
        if snapshot is None:
            self._replace_state(empty_frame(self._context.spark, self.state_schema))
            self._reset_driver_values()
            return
        partitions = self._context.partitions
        meta_keys = [k for k in snapshot.chunk_keys if k.partition == partitions]
        if len(meta_keys) != 1:
            raise ValueError(
                f"Snapshot {snapshot.snapshot_id} of operator {self._name} has "
                f"{len(meta_keys)} driver chunks at partition {partitions}; was it taken with "
                "another state_partitions?"
            )
        self.load_driver_values(json.loads(reader.read_chunk(snapshot.map_name, meta_keys[0])))
        state_keys = sorted(k for k in snapshot.chunk_keys if k.partition < partitions)
        restored = None
        if len(state_keys) <= DRIVER_RESTORE_MAX_CHUNKS:
            chunks = [reader.read_chunk(snapshot.map_name, key) for key in state_keys]
            if sum(len(chunk) for chunk in chunks) <= DRIVER_RESTORE_MAX_BYTES:
                restored = self._read_on_driver(chunks)
        if restored is None:
            restored = self._read_on_executors(snapshot.map_name, state_keys)
        self._replace_state(checkpoint(self._partitioned(restored)))
        _log.info(
            "Restored state operator=%s snapshotId=%d chunks=%d",
            self._name,
            snapshot.snapshot_id,
            len(snapshot.chunk_keys),
        )

    def _read_on_driver(self, chunks: Sequence[bytes]) -> DataFrame:
        """Builds a small state from chunks the driver read: no Python worker has to start."""
        batches = [batch for chunk in chunks for batch in decode_batches(chunk)]
        if not batches:
            return empty_frame(self._context.spark, self.state_schema).frame
        table = self._context.spark.createDataFrame(pa.Table.from_batches(batches))
        # Arrow does not carry Spark's nullability; the state's schema stays the declared one.
        return table.select(*[F.col(f.name).cast(f.dataType) for f in self.state_schema.fields])

    def _read_on_executors(self, map_name: str, keys: Sequence[ChunkKey]) -> DataFrame:
        """Reads the state partitions in parallel Spark tasks, each from its chunks."""
        by_partition: dict[int, list[str]] = {}
        for key in keys:
            by_partition.setdefault(key.partition, []).append(str(key))
        address = self._context.store

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for keys_json in batch.column("chunk_keys").to_pylist():
                    chunk_keys = [ChunkKey.parse(k) for k in json.loads(keys_json)]
                    yield from read_chunks(address, map_name, chunk_keys)

        tasks = self._context.spark.createDataFrame(
            [(p, json.dumps(k)) for p, k in sorted(by_partition.items())],
            "partition int, chunk_keys string",
        )
        tasks = tasks.repartition(len(by_partition), "partition")
        return tasks.mapInArrow(read, self.state_schema)

    def _reset_driver_values(self) -> None:
        """Sets driver values for a start without snapshot; subclasses with some override."""
        return

    # End of a bounded input

    @property
    def holds_open_output(self) -> bool:
        """Whether state still holds output that only the end of the input would release.

        A tumbling window emits a window once the watermark passes it; at the end of bounded
        input no later event moves the watermark, so the pipeline runs one more epoch after
        :meth:`end_input` to emit the rest. False for operators that emit as they go.
        """
        return False

    def end_input(self) -> None:
        """Marks the input as ended: the next :meth:`update` releases everything held open."""
        return

    @property
    def output_schema(self) -> StructType:
        """The schema of :meth:`update`'s output; by default the state's."""
        return self.state_schema

    @abstractmethod
    def update(self, batch: DataFrame) -> DataFrame:
        """Merges one epoch's batch into the state and returns the epoch's output, materialised."""


def _descriptor_struct() -> StructType:
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(DESCRIPTOR_SCHEMA)


# Running aggregations ----------------------------------------------------------------------


def _aggregate(function: str, column: str | None) -> Column:
    if function == "count":
        return F.count(F.lit(1) if column is None else F.col(column))
    if column is None:
        raise ValueError(f"Aggregate {function} needs a column")
    return {"sum": F.sum, "min": F.min, "max": F.max}[function](F.col(column))


def _contribution(function: str, column: str | None) -> Column:
    """What one input row adds to a running aggregate (a count adds 1 per non-null value)."""
    if function == "count":
        if column is None:
            return F.lit(1)
        return F.when(F.col(column).isNull(), F.lit(0)).otherwise(F.lit(1))
    if column is None:
        raise ValueError(f"Aggregate {function} needs a column")
    return F.col(column)


def _combine(function: str, column: Column) -> Column:
    """Aggregates stored values and row contributions of one group into the new value."""
    if function == "count":
        return F.coalesce(F.sum(column), F.lit(0))
    # sum/min/max skip nulls, which is what a running aggregate over sparse data needs.
    return {"sum": F.sum, "min": F.min, "max": F.max}[function](column)


def _check_aggregates(aggs: Mapping[str, tuple[str, str | None]]) -> None:
    if not aggs:
        raise ValueError("Give at least one aggregate, e.g. {'total': ('sum', 'value')}")
    for out, (function, _column) in aggs.items():
        if function not in AGGREGATES:
            raise ValueError(f"Aggregate {out}: {function!r} is not one of {AGGREGATES}")


def _partial(
    batch: DataFrame, groups: Sequence[str], aggs: Mapping[str, tuple[str, str | None]]
) -> DataFrame:
    return batch.groupBy(*groups).agg(
        *[_aggregate(fn, col).alias(out) for out, (fn, col) in aggs.items()]
    )


def _merged(
    state: DataFrame,
    rows: DataFrame,
    groups: Sequence[str],
    aggs: Mapping[str, tuple[str, str | None]],
    state_schema: StructType,
    partitions: int,
    partition_keys: Sequence[str],
) -> DataFrame:
    """The new aggregates of every group; ``_FLAG`` marks the groups ``rows`` touched.

    The stored aggregates and the batch's rows are unioned, hash-partitioned by
    ``partition_keys`` into the state's ``partitions`` and aggregated per group: one shuffle,
    whose partitioning the aggregation reuses, so the new state comes out partitioned as
    the state must be. (A full outer join of the state with the batch's partial aggregates
    needs three: the batch's, the state's, and the join output's repartitioning.)
    """
    types = {f.name: f.dataType for f in state_schema.fields}
    stored = state.select(
        *groups, *[F.col(out).alias(f"_v_{out}") for out in aggs], F.lit(False).alias(_FLAG)
    )
    fresh = rows.select(
        *[F.col(g).cast(types[g]).alias(g) for g in groups],
        *[
            _contribution(fn, col).cast(types[out]).alias(f"_v_{out}")
            for out, (fn, col) in aggs.items()
        ],
        F.lit(True).alias(_FLAG),
    )
    combined = stored.unionByName(fresh).repartition(partitions, *partition_keys)
    return combined.groupBy(*groups).agg(
        *[
            _combine(fn, F.col(f"_v_{out}")).cast(types[out]).alias(out)
            for out, (fn, _c) in aggs.items()
        ],
        F.max(F.col(_FLAG)).alias(_FLAG),
    )


class RunningAggregate(KeyedState):
    """Running count/sum/min/max by key; each epoch outputs the new totals of keys it touched.

    Args:
        name: Operator name.
        context: Shared state settings.
        keys: Key columns.
        aggs: Output column -> (function, input column); ``count`` may take None.
        input_schema: The schema of the batches, to derive the state's types.
    """

    def __init__(
        self,
        name: str,
        context: StateContext,
        keys: Sequence[str],
        aggs: Mapping[str, tuple[str, str | None]],
        input_schema: StructType,
    ) -> None:
        _check_aggregates(aggs)
        self.aggs = dict(aggs)
        probe = _partial(context.spark.createDataFrame([], input_schema), keys, self.aggs)
        super().__init__(name, context, keys, probe.schema)

    def update(self, batch: DataFrame) -> DataFrame:
        """Adds the batch to the totals; returns ``keys + aggs`` of every key in the batch."""
        merged = checkpoint(
            _merged(
                self.state,
                batch,
                self.keys,
                self.aggs,
                self.state_schema,
                self._context.partitions,
                self.keys,
            )
        )
        self._replace_state(Checkpointed(merged.frame.drop(_FLAG), merged.rdd_ids))
        return merged.frame.filter(F.col(_FLAG)).drop(_FLAG)


class Deduplicate(KeyedState):
    """Passes the first row of every key and drops later rows with a key seen before.

    Which row of one batch wins for a key is Spark's choice; give rows with equal keys equal
    content if replays must reproduce the output exactly.
    """

    def __init__(
        self, name: str, context: StateContext, keys: Sequence[str], input_schema: StructType
    ) -> None:
        key_fields = [input_schema[k] for k in keys]
        super().__init__(name, context, keys, StructType(key_fields))
        self._input_schema = input_schema

    @property
    def output_schema(self) -> StructType:
        """The input's schema: output rows are input rows."""
        return self._input_schema

    def update(self, batch: DataFrame) -> DataFrame:
        """Returns the batch's rows whose key was never seen, one per key."""
        unseen = batch.dropDuplicates(list(self.keys)).join(
            self.state, list(self.keys), "left_anti"
        )
        # A join on column names puts the keys first; output rows keep the input's order.
        fresh = checkpoint(unseen.select(*batch.columns))
        seen = self.state.unionByName(fresh.frame.select(*self.keys))
        self._replace_state(checkpoint(self._partitioned(seen)))
        return self._keep_output(fresh)


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
        _check_aggregates(aggs)
        self.time_column = time_column
        self.window_s = window_s
        self.aggs = dict(aggs)
        self.watermark_delay_s = watermark_delay_s
        self._groups = [*keys, self.WINDOW_START]
        empty = self._windowed(context.spark.createDataFrame([], input_schema))
        probe = _partial(empty, self._groups, self.aggs)
        super().__init__(name, context, keys, probe.schema)
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
        merged = _merged(
            self.state,
            windowed,
            self._groups,
            self.aggs,
            self.state_schema,
            self._context.partitions,
            self.keys,
        ).drop(_FLAG)
        if self.input_ended:
            closed_flag = F.lit(True)
        elif self.watermark_s is None:
            closed_flag = F.lit(False)
        else:
            closed_flag = start_s + self.window_s <= F.lit(self.watermark_s)
        # _merged's output is partitioned as the state must be: no repartition needed.
        combined = checkpoint(merged.withColumn(_FLAG, closed_flag))
        self._replace_state(
            Checkpointed(combined.frame.filter(~F.col(_FLAG)).drop(_FLAG), combined.rdd_ids)
        )
        closed = combined.frame.filter(F.col(_FLAG)).drop(_FLAG)
        return closed.withColumn(
            self.WINDOW_END,
            F.timestamp_seconds(F.unix_timestamp(F.col(self.WINDOW_START)) + self.window_s),
        )


StateFunction = Callable[
    [tuple[Any, ...], pd.DataFrame, pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]
]
"""``fn(key, batch_rows, state_rows) -> (new_state_rows, output_rows)`` for one key.

``state_rows`` and ``new_state_rows`` have the state schema without the key columns; an empty
``new_state_rows`` removes the key's state. Called only for keys present in the batch."""

_KIND = "_sj_kind"


class PandasState(KeyedState):
    """A general per-key state function over pandas, like Spark's ``applyInPandasWithState``.

    Each epoch cogroups the batch and the state by key and calls the function for every key in
    the batch; keys only in the state keep their state untouched.

    Args:
        name: Operator name.
        context: Shared state settings.
        keys: Key columns.
        function: The state function.
        state_schema: Schema of the per-key state rows, without the key columns.
        output_schema: Schema of the output rows.
        input_schema: The schema of the batches.
    """

    def __init__(
        self,
        name: str,
        context: StateContext,
        keys: Sequence[str],
        function: StateFunction,
        state_schema: StructType,
        output_schema: StructType,
        input_schema: StructType,
    ) -> None:
        key_fields = [input_schema[k] for k in keys]
        super().__init__(name, context, keys, StructType([*key_fields, *state_schema.fields]))
        self.function = function
        self.value_schema = state_schema
        self._output_schema = output_schema
        self._combined = StructType(
            [
                *key_fields,
                StructField(_KIND, StringType(), False),
                *[StructField(f"_st_{f.name}", f.dataType, True) for f in state_schema.fields],
                *[StructField(f"_out_{f.name}", f.dataType, True) for f in output_schema.fields],
            ]
        )

    @property
    def output_schema(self) -> StructType:
        """The schema the function's output rows have."""
        return self._output_schema

    def update(self, batch: DataFrame) -> DataFrame:
        """Runs the function per key and returns its output rows."""
        key_names = list(self.keys)
        value_names = [f.name for f in self.value_schema.fields]
        output_names = [f.name for f in self.output_schema.fields]
        combined_names = [f.name for f in self._combined.fields]
        function = self.function

        def per_key(key: tuple[Any, ...], rows: pd.DataFrame, stored: pd.DataFrame) -> pd.DataFrame:
            stored_values = stored[value_names].reset_index(drop=True)
            if rows.empty:
                new_state, output = stored_values, pd.DataFrame(columns=output_names)
            else:
                new_state, output = function(key, rows.reset_index(drop=True), stored_values)
            parts = []
            if len(new_state):
                part = pd.DataFrame({f"_st_{c}": new_state[c].to_numpy() for c in value_names})
                part[_KIND] = "s"
                parts.append(part)
            if len(output):
                part = pd.DataFrame({f"_out_{c}": output[c].to_numpy() for c in output_names})
                part[_KIND] = "o"
                parts.append(part)
            if not parts:
                return pd.DataFrame(columns=combined_names)
            frame = pd.concat(parts, ignore_index=True)
            for name, value in zip(key_names, key, strict=True):
                frame[name] = value
            return frame.reindex(columns=combined_names)

        grouped = batch.groupBy(*key_names).cogroup(self.state.groupBy(*key_names))
        combined = checkpoint(self._partitioned(grouped.applyInPandas(per_key, self._combined)))
        is_state = F.col(_KIND) == F.lit("s")
        new_state = combined.frame.filter(is_state).select(
            *key_names,
            *[F.col(f"_st_{f.name}").cast(f.dataType).alias(f.name) for f in self.value_schema],
        )
        self._replace_state(Checkpointed(new_state, combined.rdd_ids))
        return combined.frame.filter(~is_state).select(
            *[F.col(f"_out_{f.name}").cast(f.dataType).alias(f.name) for f in self.output_schema]
        )
