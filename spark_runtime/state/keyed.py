"""The base of every keyed state operator: fixed hash partitions, saved and restored as chunks.

State is a DataFrame hash-partitioned by key into a fixed number of partitions (the job's
``state_partitions``), the way Jet partitions keyed state across processors. Fixing the count
is what makes a snapshot restorable: chunk ``<snapshot>/<operator>/<partition>/<seq>`` holds
exactly the keys that Spark's hash partitioner puts into ``partition``, and a restore
re-creates the same partitions. A snapshot taken with another partition count (after a change
of ``statePartitions``) is read whole and re-partitioned by key, the way Flink rescales keyed
state through its key groups. Each operator is a snapshot participant (taking step 4):
Spark tasks write their partition as Arrow IPC chunks straight from the executors, and the
driver writes one small chunk at partition ``state_partitions`` for values the driver keeps
(the partition count itself, a window operator's watermark). The operators differ only in
how :meth:`KeyedState.update` merges a batch, so all of the snapshot part lives here.
"""

from __future__ import annotations

import json
import logging
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, cast

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StructType

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter, SnapshotRef
from snapshot_protocol.incremental import ChainPolicy
from snapshot_protocol.ports import ChunkReader
from spark_runtime.chunk_io import (
    StoreAddress,
    chunk_writer,
    decode_batches,
    descriptor_of_row,
    descriptor_struct,
    descriptors_batch,
    partition_chunks,
    read_chunks,
    write_partition,
    writer_counts,
)
from spark_runtime.jvm_chunks import read_state, state_chunks, write_state
from spark_runtime.lineage import (
    Checkpointed,
    adopt,
    checkpoint,
    driver_snapshot_max_bytes,
    empty_frame,
    hash_partitioned,
    stored_bytes,
)
from spark_runtime.state.changes import ChangeLog, newest_rows
from spark_runtime.state.increments import builds_on, write_increment

_log = logging.getLogger(__name__)

DRIVER_RESTORE_MAX_CHUNKS = 16
"""A state of at most this many chunks is read by the driver first, to see if it is small."""

DRIVER_RESTORE_MAX_BYTES = 1024 * 1024
"""A state of at most this many bytes is restored through the driver: that saves starting
Python workers. A larger one is restored in executor tasks, since a DataFrame built from a
driver-side Arrow table is slow to repartition and materialise: ``bench.profile_restore``
measured a 10 MiB state taking several times longer through the driver."""

_META_SEQ = 0

_PARTITION_COLUMN = "_sj_partition"
"""Each row's state partition, in a state the driver collects to snapshot it."""


@dataclass(frozen=True)
class StateContext:
    """What every state operator of a job shares.

    Attributes:
        spark: The session.
        partitions: The fixed number of state partitions.
        store: Where executors find the snapshot store.
        incremental: Whether the job takes incremental snapshots: operators that can tell
            what each epoch changed (:attr:`KeyedState.tracks_changes`) keep a
            :class:`~spark_runtime.state.changes.ChangeLog`, and a snapshot that builds on
            the restore point writes deltas.
        chain_policy: The bounds of a partition's chain of deltas.
    """

    spark: SparkSession
    partitions: int
    store: StoreAddress
    incremental: bool = False
    chain_policy: ChainPolicy = field(default_factory=ChainPolicy)


class KeyedState(ABC):
    """A snapshot participant holding one operator's keyed state as a partitioned DataFrame.

    An operator whose epochs change only the keys they name sets :attr:`tracks_changes` and
    hands each epoch's changed rows to :meth:`_record_changes`; in a job with incremental
    snapshots its snapshots then write only those (``spark_runtime.state.increments``).

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
        tracked = context.incremental and self.tracks_changes
        self._changes = ChangeLog(self.keys) if tracked else None

    tracks_changes: ClassVar[bool] = False
    """Whether every change of an epoch is to a key the epoch names, and the operator reports
    the changed rows (:meth:`_record_changes`); False for operators that also drop keys on
    their own (a window the watermark closed), whose snapshots stay full."""

    @property
    def records_changes(self) -> bool:
        """Whether this operator keeps a change log (the job is incremental and it can)."""
        return self._changes is not None

    def _record_changes(self, rows: Checkpointed) -> None:
        """Takes one epoch's changed rows (state schema, one per key) into the change log."""
        assert self._changes is not None, "only with records_changes"
        self._changes.add(rows)

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

    @property
    def state_partitioned(self) -> bool:
        """Whether Spark knows the state to be hash-partitioned by key into the job's
        partitions (:func:`~spark_runtime.lineage.hash_partitioned`): true after a merge,
        false after a restore until the first merge."""
        return hash_partitioned(self._state, self.keys, self._context.partitions)

    def _checkpoint_state(self, frame: DataFrame, relied_on_partitioning: bool) -> Checkpointed:
        """Materialises a new state computed by a merge.

        A merge that relied on the state's partitioning (:attr:`state_partitioned`) shuffled
        only the batch; if Spark then planned the result partitioned otherwise (a session
        that changed ``spark.sql.unionOutputPartitioning`` or the shuffle partitions), its
        rows are re-placed by key here, so the state is always partitioned as its snapshot's
        chunks promise.
        """
        result = checkpoint(frame)
        if relied_on_partitioning and not hash_partitioned(
            result, self.keys, self._context.partitions
        ):
            _log.warning(
                "State re-partitioned after a merge operator=%s partitioning=%s",
                self._name,
                result.partitioning or "unknown",
            )
            placed = checkpoint(self._partitioned(result.frame))
            result.release()
            result = placed
        return result

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
        """Restores :meth:`driver_values` (the partition count is the snapshot's, not restored)."""
        return

    # Participant

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """Writes every state partition, then the driver values.

        A state the executors hold in at most :func:`driver_snapshot_max_bytes` is collected
        and written by the driver (one job, no Python worker); a larger one is written by the
        executors' tasks, each its own partition, so the driver never holds it.
        """
        spark = self._context.spark
        limit = driver_snapshot_max_bytes(spark)
        size = stored_bytes(self._state) if limit > 0 else None
        increment, beside_delta = "none", "none"
        if self._changes is not None and not export_only:
            self._changes.saving(snapshot_id)
        if size is not None and size <= limit:
            descriptors = self._save_on_driver(writer)
            writers, path = f"driver:{len(descriptors)}", "driver"
        else:
            jvm = state_chunks(spark)
            path = "python" if jvm is None else "jvm"
            if jvm is not None and builds_on(self._changes, writer, self._context.partitions):
                changes = self._changes
                assert changes is not None
                delta = None if changes.empty else changes.delta(self._context.partitions)
                written = write_increment(
                    jvm,
                    spark,
                    self.state,
                    delta,
                    self._context.store,
                    writer,
                    self._context.partitions,
                    self._context.chain_policy,
                )
                descriptors, writers, increment = written.chunks, written.writers, written.summary()
                beside_delta = ",".join(map(str, sorted(written.beside_delta))) or "none"
            else:
                descriptors, writers = self._save_on_executors(snapshot_id, writer, jvm)
        _log.info(
            "Snapshot chunks written snapshot_id=%d operator=%s writers=%s path=%s storedBytes=%s "
            "increment=%s fullBesideDelta=%s",
            snapshot_id,
            self._name,
            writers,
            path,
            "unknown" if size is None else size,
            increment,
            beside_delta,
        )
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

    def _save_on_driver(self, writer: ChunkWriter) -> list[ChunkDescriptor]:
        """Collects the state as Arrow with each row's partition and puts its chunks.

        The JVM converts the rows to Arrow as it does for a ``mapInArrow`` task, so the chunks
        are those the partitions' tasks would write (:func:`partition_chunks`).
        """
        tagged = self.state.withColumn(_PARTITION_COLUMN, F.spark_partition_id())
        # PySpark's own Arrow collect: ``toArrow`` less its cast of every time zone to UTC.
        # (A DataFrame's unknown attributes type as columns, hence the cast.)
        batches: list[pa.RecordBatch] = cast(Any, tagged)._collect_as_arrow()
        return writer.write_many(list(partition_chunks(batches, _PARTITION_COLUMN)))

    def _save_on_executors(
        self, snapshot_id: int, writer: ChunkWriter, jvm: Any | None
    ) -> tuple[list[ChunkDescriptor], str]:
        """Writes partition ``p`` from Spark task ``p``; returns the chunks and who wrote them.

        In the executors' JVMs through ``jvm`` (:func:`~spark_runtime.jvm_chunks.state_chunks`)
        if given, else in Python workers; the chunks are the same.
        """
        address = self._context.store
        map_name, operator = writer.map_name, writer.operator
        if jvm is not None:
            written = write_state(
                jvm, self._context.spark, self.state, address, map_name, snapshot_id, operator
            )
            return [chunk for chunk, _ in written], writer_counts(
                {"writer": who} for _, who in written
            )

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
            yield descriptors_batch(written, chunk_writer())

        rows = [row.asDict() for row in self.state.mapInArrow(write, descriptor_struct()).collect()]
        return [descriptor_of_row(row) for row in rows], writer_counts(rows)

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """State has no external transactions; a successful snapshot is the change log's new
        base."""
        if self._changes is not None:
            self._changes.committed(snapshot_id, success)

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int = -1
    ) -> None:
        """Reads the state back (restore step 5): a small one via the driver, else in tasks."""
        if self._changes is not None:
            self._changes.reset(None if snapshot is None else snapshot.snapshot_id)
        if snapshot is None:
            self._replace_state(empty_frame(self._context.spark, self.state_schema))
            self._reset_driver_values()
            return
        # The driver chunk sits at the partition after the snapshot's last state partition.
        taken_with = snapshot.state_partitions or max(k.partition for k in snapshot.chunk_keys)
        meta_keys = [k for k in snapshot.chunk_keys if k.partition == taken_with]
        if len(meta_keys) != 1:
            raise ValueError(
                f"Snapshot {snapshot.snapshot_id} of operator {self._name} has "
                f"{len(meta_keys)} driver chunks at partition {taken_with}, not 1"
            )
        self.load_driver_values(json.loads(snapshot.read(reader, meta_keys[0])))
        state = sorted(
            (c for c in snapshot.chunks if c.key.partition < taken_with), key=lambda c: c.key
        )
        restored, path = None, "driver"
        if len(state) <= DRIVER_RESTORE_MAX_CHUNKS:
            values = [snapshot.read(reader, chunk.key) for chunk in state]
            if sum(len(value) for value in values) <= DRIVER_RESTORE_MAX_BYTES:
                chained = any(chunk.delta for chunk in state)
                restored = checkpoint(self._partitioned(self._read_on_driver(values, chained)))
        if restored is None:
            jvm = state_chunks(self._context.spark)
            path = "python" if jvm is None else "jvm"
            restored = self._read_on_executors(snapshot, state, taken_with, jvm)
        self._replace_state(restored)
        _log.info(
            "Restored state operator=%s snapshotId=%d chunks=%d partitions=%d "
            "snapshotPartitions=%d path=%s",
            self._name,
            snapshot.snapshot_id,
            len(snapshot.chunks),
            self._context.partitions,
            taken_with,
            path,
        )

    def _read_on_driver(self, chunks: Sequence[bytes], chained: bool) -> DataFrame:
        """Builds a small state from chunks the driver read: no Python worker has to start.

        ``chained``: the chunks (in chain order) include deltas, applied by key."""
        batches = [batch for chunk in chunks for batch in decode_batches(chunk)]
        if chained:
            batches = newest_rows(batches, self.keys)
        if not batches:
            return empty_frame(self._context.spark, self.state_schema).frame
        table = self._context.spark.createDataFrame(pa.Table.from_batches(batches))
        # Arrow does not carry Spark's nullability; the state's schema stays the declared one.
        return table.select(*[F.col(f.name).cast(f.dataType) for f in self.state_schema.fields])

    def _read_on_executors(
        self,
        snapshot: SnapshotRef,
        chunks: Sequence[ChunkDescriptor],
        taken_with: int,
        jvm: Any | None,
    ) -> Checkpointed:
        """Reads state partition ``p`` of the snapshot in Spark task ``p``, from its chunks, and
        stores the result.

        ``parallelize`` puts its ``i``-th element in partition ``i`` and ``mapInArrow`` keeps
        the partitions, so with the partition count the snapshot was taken with, the frame
        holds each key in the partition :meth:`_partitioned` would have put it in: read in
        place, a shuffle would only copy a large state once more. One taken with another count
        is re-partitioned by key. A task verifies every chunk against its checksum before
        decoding it; a mismatch fails the task with a SnapshotCorrupted whose text the
        coordinator recognises.

        Args:
            snapshot: The snapshot.
            chunks: Its state chunks (not the driver's).
            taken_with: The number of state partitions it was taken with.
            jvm: :func:`~spark_runtime.jvm_chunks.state_chunks`: the tasks read in the
                executors' JVMs through it, or in Python workers if None.
        """
        in_place = taken_with == self._context.partitions
        if jvm is None:
            frame = self._read_in_python_workers(snapshot, chunks, taken_with)
        else:
            partitions: list[list[ChunkDescriptor]] = [[] for _ in range(taken_with)]
            for chunk in chunks:
                partitions[chunk.key.partition].append(chunk)
            # Read in place, the JVM stores the rows as it builds them (no scan, no copy).
            frame = read_state(
                jvm,
                self._context.spark,
                self._context.store,
                snapshot.map_name,
                snapshot.snapshot_id,
                partitions,
                self.state_schema,
                len(self.keys),
                checkpointed=in_place,
            )
            if in_place:
                return adopt(frame)
        return checkpoint(frame if in_place else self._partitioned(frame))

    def _read_in_python_workers(
        self, snapshot: SnapshotRef, chunks: Sequence[ChunkDescriptor], taken_with: int
    ) -> DataFrame:
        """The frame of :meth:`_read_on_executors` when the JVM's reader is not there: each
        task reads its partition's chunks in a Python worker (``mapInArrow``)."""
        address = self._context.store
        map_name, snapshot_id = snapshot.map_name, snapshot.snapshot_id
        listed: list[list[list[Any]]] = [[] for _ in range(taken_with)]
        for chunk in chunks:
            listed[chunk.key.partition].append(chunk.to_list())

        keys = self.keys

        def read(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            for batch in batches:
                for chunks_json in batch.column("chunks").to_pylist():
                    descriptors = [ChunkDescriptor.from_list(c) for c in json.loads(chunks_json)]
                    rows = read_chunks(address, map_name, snapshot_id, descriptors)
                    if any(d.delta for d in descriptors):
                        # A chain: its deltas applied by key, so the partition is read whole.
                        yield from newest_rows(list(rows), keys)
                    else:
                        yield from rows

        spark = self._context.spark
        tasks = spark.sparkContext.parallelize(
            [(p, json.dumps(c)) for p, c in enumerate(listed)], taken_with
        )
        return spark.createDataFrame(tasks, "partition int, chunks string").mapInArrow(
            read, self.state_schema
        )

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
    def semantics(self) -> str:
        """What else than keys and schema gives the state its meaning, for the restore check.

        A snapshot's state restored into an operator that computes it differently (another
        window length, another aggregate of the same type) would go on silently wrong, so
        this is part of :meth:`spark_runtime.pipeline.Pipeline.shape`. Empty by default.
        """
        return ""

    @property
    def output_schema(self) -> StructType:
        """The schema of :meth:`update`'s output; by default the state's."""
        return self.state_schema

    @abstractmethod
    def update(self, batch: DataFrame) -> DataFrame:
        """Merges one epoch's batch into the state and returns the epoch's output, materialised."""
