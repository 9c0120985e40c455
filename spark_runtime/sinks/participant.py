"""A sink's part in the snapshot protocol: buffer, prepare in phase 1, commit in phase 2.

The participant sits between the pipeline and a sink, so a sink only has to know how to
write, prepare, commit and roll back its own transactions
(:class:`~spark_runtime.sinks.base.TransactionalSink`), and never when: the snapshot
coordinator calls :meth:`SinkParticipant.save_and_prepare` in phase 1,
:meth:`SinkParticipant.commit_finish` in phase 2 and :meth:`SinkParticipant.restore` in
restore step 5.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Generic, TypeVar

from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter, SnapshotRef
from snapshot_protocol.ports import ChunkReader
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.lineage import Checkpointed, checkpoint, hold
from spark_runtime.sinks.base import EPOCH_COLUMN, Sink, TransactionalSink

_log = logging.getLogger(__name__)


SinkT = TypeVar("SinkT", bound=Sink)

HELD_STATE_MAX_BYTES = 64 * 1024 * 1024
"""Buffered output may hold up to this many bytes of the states it is computed from (one
state copy per buffered epoch: each epoch's merge stores a new one) instead of being
materialised every epoch. ``bench.epoch_floor`` measured the materialising job at about a
sixth of a near-empty EXACTLY_ONCE epoch; a state too large to hold for a snapshot's epochs
pays it as before."""

RowsPublished = Callable[[str, int], None]
"""Told the rows a sink published: ``(sink name, rows)``."""


class EpochOutput(Generic[SinkT]):
    """What every sink participant does with an epoch's output: buffer it, or write it now.

    Args:
        name: The sink's operator name (chunk keys).
        sink: The sink.
        buffered: Whether output waits for a snapshot (materialised in the executors, tagged
            with its epoch) instead of being written every epoch.
        published: Told the rows the sink published, where it counted them.
    """

    def __init__(
        self, name: str, sink: SinkT, buffered: bool, published: RowsPublished | None = None
    ) -> None:
        self._name = name
        self.sink = sink
        self.buffered = buffered
        self._pending: list[Checkpointed] = []
        self._published = published

    @property
    def name(self) -> str:
        """The operator name in chunk keys."""
        return self._name

    def accept(self, epoch: int, frame: DataFrame) -> None:
        """Takes one epoch's output: buffers it, or writes it now.

        Buffered output computed from stored state alone (an operator's output) holds that
        state until the snapshot writes it, while the states held stay within
        :data:`HELD_STATE_MAX_BYTES`; other output is materialised now, a Spark job per epoch.
        """
        if not self.buffered:
            self._count_published(self.sink.write(frame))
            return
        tagged = frame.withColumn(EPOCH_COLUMN, F.lit(epoch))
        budget = HELD_STATE_MAX_BYTES - sum(f.held_bytes for f in self._buffered_frames())
        self._pending.append(hold(tagged, budget) or checkpoint(tagged))

    def _buffered_frames(self) -> Iterable[Checkpointed]:
        """Every buffered frame: pending, and prepared in a snapshot not finished yet."""
        return self._pending

    def _count_published(self, rows: int | None) -> None:
        """Reports rows the sink published; None (not counted) is not reported."""
        if rows is not None and self._published is not None:
            self._published(self._name, rows)

    def _drop_buffers(self, held: Iterable[Sequence[Checkpointed]]) -> None:
        """Releases the pending output and every list in ``held`` (restore step 5)."""
        for frame in self._pending:
            frame.release()
        for frames in held:
            for frame in frames:
                frame.release()
        self._pending = []


class SinkParticipant(EpochOutput[Sink]):
    """A sink in the snapshot protocol.

    Under EXACTLY_ONCE a transactional sink's output is buffered (materialised in the
    executors) until the next snapshot prepares it in phase 1 and commits it in phase 2. If
    the snapshot fails, its transactions are rolled back and the output goes back into the
    buffer for the next snapshot, so nothing is lost without a restart. Other sinks write
    every epoch.

    Args:
        name: The sink's operator name.
        sink: The sink.
        guarantee: The job's processing guarantee.
        published: Told the rows the sink published, where it counted them: at each write,
            or when a snapshot's 2nd phase commits them.
    """

    def __init__(
        self,
        name: str,
        sink: Sink,
        guarantee: ProcessingGuarantee,
        published: RowsPublished | None = None,
    ) -> None:
        super().__init__(
            name,
            sink,
            guarantee is ProcessingGuarantee.EXACTLY_ONCE and isinstance(sink, TransactionalSink),
            published,
        )
        # snapshot id -> (transaction ids, the buffered output in them, its rows if counted)
        self._prepared: dict[int, tuple[list[str], list[Checkpointed], int | None]] = {}

    def _buffered_frames(self) -> Iterable[Checkpointed]:
        """Pending output and output prepared in a snapshot not finished yet."""
        yield from self._pending
        for _gids, frames, _rows in self._prepared.values():
            yield from frames

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """Prepares the buffered output in transactions and saves their ids."""
        if not self.buffered or export_only:
            return []
        sink = self.sink
        assert isinstance(sink, TransactionalSink)
        frames, self._pending = self._pending, []
        try:
            gids = sink.prepare(union_frames(frames), snapshot_id) if frames else []
        except Exception:
            # Some partitions may have prepared: undo them now, the buffer keeps the output.
            self._pending = frames + self._pending
            sink.abort(snapshot_id)
            raise
        self._prepared[snapshot_id] = (gids, frames, sink.prepared_rows(gids))
        _log.info(
            "Prepared sink name=%s snapshotId=%d transactions=%d",
            self._name,
            snapshot_id,
            len(gids),
        )
        return [writer.write(0, 0, json.dumps(gids).encode(), len(gids))]

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """Commits the snapshot's transactions, or rolls them back and re-buffers the output."""
        entry = self._prepared.pop(snapshot_id, None)
        if entry is None:
            return
        sink = self.sink
        assert isinstance(sink, TransactionalSink)
        gids, frames, rows = entry
        if success:
            sink.commit(gids)
            self._count_published(rows)
            for frame in frames:
                frame.release()
            stale = sink.roll_back_older(snapshot_id)
            if stale:
                _log.warning(
                    "Rolled back transactions a replaced execution left prepared name=%s "
                    "snapshotId=%d transactions=%d",
                    self._name,
                    snapshot_id,
                    len(stale),
                )
        else:
            sink.rollback(gids)
            self._pending = frames + self._pending
        _log.info(
            "Finished sink name=%s snapshotId=%d committed=%s transactions=%d",
            self._name,
            snapshot_id,
            success,
            len(gids),
        )

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        """Drops buffered output and settles this sink's prepared transactions (restore step 5)
        of snapshots up to ``through_snapshot_id``."""
        self._drop_buffers(frames for _gids, frames, _rows in self._prepared.values())
        self._prepared = {}
        if not isinstance(self.sink, TransactionalSink):
            return
        committed: list[str] = []
        if snapshot is not None and snapshot.chunk_keys:
            committed = json.loads(snapshot.read(reader, snapshot.chunk_keys[0]))
        done, rolled_back = self.sink.recover(committed, through_snapshot_id)
        _log.info(
            "Recovered sink name=%s committed=%d rolledBack=%d",
            self._name,
            len(done),
            len(rolled_back),
        )


def union_frames(frames: Sequence[Checkpointed]) -> DataFrame:
    """The buffered epochs' output as one DataFrame (``frames`` must not be empty)."""
    result = frames[0].frame
    for other in frames[1:]:
        result = result.unionByName(other.frame)
    return result
