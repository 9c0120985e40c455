"""``foreachBatch``: a function called with each batch's DataFrame and an id stable across restores.

Structured Streaming's ``foreachBatch(func)`` calls ``func(batch_df, batch_id)`` once per
micro-batch, and a function that writes idempotently by ``batch_id`` is exactly once. Here an
epoch cannot be that batch: after a restore, the epochs after the restored snapshot are planned
again from the sources' offsets at that time, so "epoch 7" may cover another range than before
the crash, and its number means nothing. What is stable is the output a snapshot commits. So
under EXACTLY_ONCE a *batch* is the output one snapshot commits, and its id is that snapshot's
id (``docs/guides/custom-sources-and-sinks.md``, "foreachBatch"):

- **Phase 1** (taking step 4) stages the output buffered since the last snapshot in the
  snapshot, as checksummed chunks, exactly as a staged sink does
  (:class:`~spark_runtime.sinks.staged.StagedSinkParticipant`, whose buffering and staging this
  participant inherits).
- **Phase 2** (taking step 9), once the snapshot is the restore point, calls the function on
  the driver with a DataFrame read from those chunks by Spark tasks (never collected to the
  driver) and the snapshot's id.
- **Restore step 5** calls it again for the restore point's output, "just in case" (phase 2 may
  not have run, or not to its end): the same id, the same rows. A function that writes once per
  id, as the guide's example does, is exactly once.

A batch without rows has no chunks, and the function is not called for it: a restore could not
tell it from no output at all, so it could not repeat such a call as it repeats every other
until one succeeds. A function that raises fails phase 2: the execution
restarts (a transient failure, exit 69) and the restore calls it again with the same batch,
until it succeeds or the job's restarts run out.

Under AT_LEAST_ONCE and NONE no output is staged: the function is called after every epoch with
that epoch's output and an id that only grows (:meth:`ForeachBatchSink.write`).
"""

from __future__ import annotations

import inspect
import json
import logging
import time
from collections.abc import Callable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import ArrayType, MapType, StructType

from snapshot_protocol.chunks import ChunkDescriptor, SnapshotRef
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress, read_chunks
from spark_runtime.sinks.base import EPOCH_COLUMN, StagedSink
from spark_runtime.sinks.participant import RowsPublished
from spark_runtime.sinks.staged import StagedSinkParticipant, staged_partitions
from spark_runtime.state.changes import newest_rows
from spark_runtime.state.keyed import StateContext

_log = logging.getLogger(__name__)

BatchFunction = Callable[..., None]
"""``func(batch_df, batch_id)``, PySpark's ``foreachBatch`` signature, or
``func(batch_df, batch_id, job_uid)`` to know whose snapshot the batch is (see
:class:`ForeachBatchSink`)."""


class ForeachBatchSink(StagedSink):
    """Output handed to a function of the batch's DataFrame and its id; see the module.

    ``stream.foreachBatch(func)`` makes one; ``stream.writeStream(ForeachBatchSink(func))`` is
    the same, with the staging partitions to choose. The function runs on the driver; it may
    start Spark jobs on the DataFrame (a JDBC write, ``toLocalIterator``), and should use the
    DataFrame within the call only: it reads the snapshot's chunks, which a later snapshot
    removes.

    Args:
        function: ``func(batch_df, batch_id)``, or ``func(batch_df, batch_id, job_uid)``.
            Under EXACTLY_ONCE ``batch_id`` is the id of the snapshot that committed the batch,
            and a restore calls the function again with the same id and rows; under the other
            guarantees, see :meth:`write`. Ids are a job's own: a job started from another's
            export numbers its snapshots from 0 again, and restores the export's batch under
            the exporting job's uid and id. So a function that records the batches it applied
            records ``(job_uid, batch_id)``, which is unique.
        key: Columns identifying a row of an update stream (``groupBy(...).agg(...)``): under
            EXACTLY_ONCE a batch holds the output of every epoch since the previous snapshot,
            where a key may have a row per epoch; with ``key`` the batch holds each key's latest
            row only, as one micro-batch of Structured Streaming's update mode would. Without
            it, every row of every epoch, in no set order.
        partitions: Sink partitions: the staged output is written and read back as this many
            parts, in parallel.

    Raises:
        TypeError: If ``function`` is not callable.
        ValueError: If ``partitions`` is below 1.
    """

    def __init__(
        self, function: BatchFunction, *, key: Sequence[str] = (), partitions: int = 4
    ) -> None:
        if not callable(function):
            raise TypeError(
                f"foreachBatch takes a function of (batch_df, batch_id), not a "
                f"{type(function).__name__}"
            )
        if partitions < 1:
            raise ValueError(f"A foreachBatch sink needs at least 1 partition, not {partitions}")
        self.function = function
        self.takes_job_uid = _takes_three_arguments(function)
        self.job_uid = ""
        self.key = tuple(key)
        self.partitions = partitions
        self._schema: StructType | None = None
        self._last_unstaged_id = 0

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Keeps the output's schema, which the batches read back from chunks have.

        Raises:
            ValueError: If a ``key`` column is not in the output, or is a struct, array or map.
        """
        self.job_uid = job_uid
        columns = [field.name for field in schema.fields if field.name != EPOCH_COLUMN]
        missing = [column for column in self.key if column not in columns]
        if missing:
            raise ValueError(
                f"foreachBatch {name}: key columns {missing} are not in the output, whose "
                f"columns are {columns}"
            )
        nested = [
            f"{f.name} ({f.dataType.simpleString()})"
            for f in schema.fields
            if f.name in self.key and isinstance(f.dataType, StructType | ArrayType | MapType)
        ]
        if nested:
            # The latest row of a key is found with Arrow's group_by, which takes flat keys.
            raise ValueError(
                f"foreachBatch {name}: key columns must be flat, not {', '.join(nested)}; a "
                "window's output is emitted once per window and needs no key"
            )
        self._schema = StructType([field for field in schema.fields if field.name in columns])

    @property
    def schema(self) -> StructType:
        """The schema of every batch.

        Raises:
            RuntimeError: If the sink was not opened (the pipeline adds and opens it).
        """
        if self._schema is None:
            raise RuntimeError("The foreachBatch sink was not opened: its output schema is unknown")
        return self._schema

    def partition_columns(self) -> Sequence[str]:
        """With a key, a key's rows are staged in one partition, in epoch order, so its latest
        row is found without a shuffle."""
        return self.key

    def write(self, frame: DataFrame) -> None:
        """AT_LEAST_ONCE and NONE: calls the function with one epoch's output now.

        The id is not stable across restores, since no snapshot holds this output: after a
        restore the epochs since the snapshot are called again, under new ids. It is the call's
        time in microseconds since 1970, kept growing within the execution: so it never repeats
        and is never a snapshot's id, and a function that skips ids it applied (written for
        EXACTLY_ONCE) skips nothing new here. Rows are not counted (None).
        """
        now = time.time_ns() // 1000
        self._last_unstaged_id = max(now, self._last_unstaged_id + 1)
        self.call(frame, self._last_unstaged_id, self.job_uid)

    def call(self, batch: DataFrame, batch_id: int, job_uid: str) -> None:
        """Calls the function, with ``job_uid`` if it takes three arguments."""
        if self.takes_job_uid:
            self.function(batch, batch_id, job_uid)
        else:
            self.function(batch, batch_id)

    def publish(self, snapshot_id: int, partition: int, batches: Iterator[pa.RecordBatch]) -> int:
        """Not used: a batch is handed to the function whole, on the driver
        (:class:`ForeachBatchParticipant`), not published partition by partition in tasks.

        Raises:
            TypeError: Always.
        """
        raise TypeError(
            "A foreachBatch sink is driven by ForeachBatchParticipant, which calls its function "
            "with the whole batch on the driver; it has no per-partition publish"
        )


class ForeachBatchParticipant(StagedSinkParticipant):
    """A :class:`ForeachBatchSink` in the snapshot protocol: staged in phase 1 as a staged
    sink's output is; in phase 2 and restore step 5 the function is called with the batch.

    Args:
        name: The sink's operator name (chunk keys).
        sink: The sink.
        guarantee: The job's processing guarantee.
        context: The session and where executors find the snapshot store.
        published: Told the rows each call handed over: the rows staged (with a ``key``, the
            function saw each key's latest of them).
    """

    def __init__(
        self,
        name: str,
        sink: ForeachBatchSink,
        guarantee: ProcessingGuarantee,
        context: StateContext,
        published: RowsPublished | None = None,
    ) -> None:
        super().__init__(name, sink, guarantee, context, published)
        self._foreach = sink

    def _publish(self, ref: SnapshotRef) -> int:
        """Calls the function with ``ref``'s staged output and its snapshot id, unless it has
        no rows; returns the rows staged."""
        if not ref.chunks:
            return 0
        sink = self._foreach
        batch = batch_frame(self._context.spark, self._context.store, ref, sink.schema, sink.key)
        rows = sum(chunk.num_keys for chunk in ref.chunks)
        started = time.monotonic()
        try:
            # Another job's snapshot (this job started from its export) keeps its writer's id.
            sink.call(batch, ref.snapshot_id, ref.job_uid or sink.job_uid)
        except Exception as error:
            # Phase 2 or the restore fails and the execution restarts; its restore calls the
            # function again with this batch.
            _log.error(
                "foreachBatch function failed name=%s batchId=%d rows=%d error=%s",
                self._name,
                ref.snapshot_id,
                rows,
                error,
            )
            raise
        _log.info(
            "Called foreachBatch name=%s batchId=%d rows=%d seconds=%.2f",
            self._name,
            ref.snapshot_id,
            rows,
            time.monotonic() - started,
        )
        return rows


def batch_frame(
    spark: SparkSession,
    address: StoreAddress,
    ref: SnapshotRef,
    schema: StructType,
    key: Sequence[str] = (),
) -> DataFrame:
    """The staged output of ``ref`` as a DataFrame of ``schema``, read by Spark tasks.

    Task ``i`` reads the chunks of the ``i``-th staged partition, each verified against its
    checksum before it is decoded (``chunk_io.read_chunks``, as a state restore reads), and
    drops the epoch column; with ``key``, it keeps each key's last row in the partition, which
    is the key's latest since staging put every row of a key in one partition in epoch order.
    Every action on the frame reads the chunks again, so the frame is the same rows each time
    and the same in phase 2 and in a restore.

    Args:
        spark: The session.
        address: Where the executors find the snapshot store.
        ref: The snapshot and this sink's chunks in it.
        schema: The output's schema, without the epoch column.
        key: Columns identifying an update stream's row; none to keep every row.
    """
    parts = staged_partitions(ref)
    listed = [(p, json.dumps([chunk.to_list() for chunk in chunks])) for p, chunks in parts]
    map_name, snapshot_id = ref.map_name, ref.snapshot_id
    columns = [field.name for field in schema.fields]
    keys = list(key)

    def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for chunks_json in batch.column("chunks").to_pylist():
                descriptors = [ChunkDescriptor.from_list(c) for c in json.loads(chunks_json)]
                rows: Iterator[pa.RecordBatch] = read_chunks(
                    address, map_name, snapshot_id, descriptors
                )
                if keys:
                    rows = iter(newest_rows(list(rows), keys))
                for staged in rows:
                    yield staged.select(columns)

    tasks = spark.sparkContext.parallelize(listed, max(1, len(listed)))
    return spark.createDataFrame(tasks, "partition int, chunks string").mapInArrow(read, schema)


def _takes_three_arguments(function: BatchFunction) -> bool:
    """Whether ``function`` takes a third positional argument (the job's uid)."""
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):  # a builtin without a signature: PySpark's two arguments
        return False
    positional = [
        p
        for p in parameters
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]
    variadic = any(p.kind is inspect.Parameter.VAR_POSITIONAL for p in parameters)
    return variadic or len(positional) >= 3
