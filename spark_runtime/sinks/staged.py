"""A staged sink's part in the snapshot protocol: stage in phase 1, publish in phase 2.

Some destinations can run a transaction but cannot keep it open across a restart of the
client that began it: Kafka's transactional producer aborts whatever its predecessor of the
same ``transactional.id`` left open, and no Python or Java client here can resume one
(Kafka's two-phase commit for external coordinators, KIP-939, is not in them). A prepared
transaction as the PostgreSQL sink keeps one is therefore not available, and the output
itself is what must survive a restart. So a :class:`~spark_runtime.sinks.base.StagedSink`
works like this (``docs/reference/runtime.md``, "Kafka"):

- **Phase 1** writes the output buffered since the last snapshot into the snapshot, as
  checksummed chunks of the sink's own operator name, one series per sink partition,
  straight from the executors (as state partitions are written). The validation record lists
  them, so the output is part of the snapshot's integrity like any state.
- **Phase 2** publishes each partition's chunks in one destination transaction together with
  a marker naming the snapshot, from an executor task per partition.
- **Restore step 5** publishes the restore point's chunks again: a partition whose marker
  already names that snapshot (or a later one) is skipped, so this is the "just in case"
  commit of the protocol, and a phase 2 cut short by a crash is finished here.

Output is published once per snapshot, as with every exactly-once sink here; it costs the
output's size in the snapshot store until the snapshot after next clears the map.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark import TaskContext

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter, SnapshotRef
from snapshot_protocol.ports import ChunkReader
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import (
    chunk_writer,
    descriptor_of_row,
    descriptor_struct,
    descriptors_batch,
    read_chunks,
    write_partition,
    writer_counts,
)
from spark_runtime.lineage import Checkpointed
from spark_runtime.sinks.base import EPOCH_COLUMN, StagedSink
from spark_runtime.sinks.participant import EpochOutput, RowsPublished, union_frames
from spark_runtime.state.keyed import StateContext

_log = logging.getLogger(__name__)


class StagedSinkParticipant(EpochOutput[StagedSink]):
    """A :class:`~spark_runtime.sinks.base.StagedSink` in the snapshot protocol.

    Under EXACTLY_ONCE the output is buffered (materialised in the executors) until the next
    snapshot stages it; if that snapshot fails, the output goes back into the buffer for the
    next one. Under the other guarantees every epoch is written at once with
    :meth:`~spark_runtime.sinks.base.Sink.write`.

    Args:
        name: The sink's operator name (chunk keys, markers).
        sink: The sink.
        guarantee: The job's processing guarantee.
        context: The session and where executors find the snapshot store.
        published: Told the rows the sink published, where it counted them: the staged rows
            each 2nd phase (or restore) publishes, which every staged sink counts.
    """

    def __init__(
        self,
        name: str,
        sink: StagedSink,
        guarantee: ProcessingGuarantee,
        context: StateContext,
        published: RowsPublished | None = None,
    ) -> None:
        super().__init__(name, sink, guarantee is ProcessingGuarantee.EXACTLY_ONCE, published)
        self._context = context
        self._staged: dict[int, tuple[SnapshotRef, list[Checkpointed]]] = {}

    def _buffered_frames(self) -> Iterable[Checkpointed]:
        """Pending output and output staged in a snapshot not finished yet."""
        yield from self._pending
        for _ref, frames in self._staged.values():
            yield from frames

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """Phase 1: writes the buffered output into the snapshot, one series per partition."""
        if not self.buffered or export_only or not self._pending:
            return []
        frames, self._pending = self._pending, []
        try:
            descriptors = self._stage(snapshot_id, writer.map_name, frames)
        except Exception:
            # The snapshot fails; the output waits for the next one.
            self._pending = frames + self._pending
            raise
        self._staged[snapshot_id] = (
            SnapshotRef(writer.map_name, snapshot_id, tuple(descriptors)),
            frames,
        )
        _log.info(
            "Staged sink output name=%s snapshotId=%d chunks=%d rows=%d",
            self._name,
            snapshot_id,
            len(descriptors),
            sum(d.num_keys for d in descriptors),
        )
        return descriptors

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """Phase 2: publishes the snapshot's staged output, or re-buffers it if it failed."""
        entry = self._staged.pop(snapshot_id, None)
        if entry is None:
            return
        ref, frames = entry
        if not success:
            self._pending = frames + self._pending
            return
        try:
            rows = self._publish(ref)
        finally:
            # Published, or left to the restore that a failed phase 2 leads to: either way
            # the staged chunks, not these frames, are what gets published.
            for frame in frames:
                frame.release()
        _log.info(
            "Published sink output name=%s snapshotId=%d rows=%d", self._name, snapshot_id, rows
        )
        self._count_published(rows)

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        """Restore step 5: drops buffered output, publishes the restore point's staged output
        wherever its marker is missing."""
        self._drop_buffers(frames for _ref, frames in self._staged.values())
        self._staged = {}
        if snapshot is None or not snapshot.chunks:
            return
        rows = self._publish(snapshot)
        _log.info(
            "Recovered sink name=%s snapshotId=%d publishedRows=%d",
            self._name,
            snapshot.snapshot_id,
            rows,
        )
        self._count_published(rows)

    def _stage(
        self, snapshot_id: int, map_name: str, frames: Sequence[Checkpointed]
    ) -> list[ChunkDescriptor]:
        sink = self.sink
        output = union_frames(frames)
        columns = list(sink.partition_columns())
        spread = (
            output.repartition(sink.partitions, *columns)
            if columns
            else output.repartition(sink.partitions)
        )
        # Epoch order within a partition: a key's later output is published after its earlier.
        ordered = spread.sortWithinPartitions(EPOCH_COLUMN)
        address, operator = self._context.store, self._name

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            context = TaskContext.get()
            assert context is not None, "runs inside a Spark task"
            written = write_partition(
                address, map_name, snapshot_id, operator, context.partitionId(), batches
            )
            yield descriptors_batch(written, chunk_writer())

        rows = [row.asDict() for row in ordered.mapInArrow(write, descriptor_struct()).collect()]
        _log.info(
            "Sink output chunks written snapshotId=%d operator=%s writers=%s",
            snapshot_id,
            operator,
            writer_counts(rows),
        )
        return [descriptor_of_row(row) for row in rows]

    def _publish(self, ref: SnapshotRef) -> int:
        """Publishes every partition of ``ref`` in parallel tasks; returns the rows published."""
        parts = staged_partitions(ref)
        if not parts:
            return 0
        # Another job's snapshot (this job started from its export): its markers decide.
        sink = self.sink.as_writer(ref.job_uid) if ref.job_uid else self.sink
        address = self._context.store
        map_name, snapshot_id = ref.map_name, ref.snapshot_id

        def publish(items: Iterable[tuple[int, list[ChunkDescriptor]]]) -> Iterator[int]:
            for partition, chunks in items:
                batches = read_chunks(address, map_name, snapshot_id, chunks)
                yield sink.publish(snapshot_id, partition, batches)

        spark = self._context.spark
        published = spark.sparkContext.parallelize(parts, len(parts)).mapPartitions(publish)
        return sum(published.collect())


def staged_partitions(ref: SnapshotRef) -> list[tuple[int, list[ChunkDescriptor]]]:
    """Each sink partition of ``ref`` with its chunks in the order they were written (by
    sequence number, so a key's output keeps its epochs' order), by partition."""
    by_partition: dict[int, list[ChunkDescriptor]] = {}
    for chunk in ref.chunks:
        by_partition.setdefault(chunk.key.partition, []).append(chunk)
    return [
        (partition, sorted(chunks, key=lambda chunk: chunk.key.seq))
        for partition, chunks in sorted(by_partition.items())
    ]
