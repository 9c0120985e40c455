"""What a keyed state changed since its restore point: the rows incremental snapshots write.

An incremental snapshot (docs/concepts/protocol.md, "Incremental snapshots") writes, for a state
partition with updates since the snapshot it builds on, a delta: the newest row of every key
updated since then. Scanning the state for them would cost what writing it costs, so an
operator that knows which rows an epoch changed (a running aggregate's updated groups, the
keys a deduplication saw first) hands them to its :class:`ChangeLog` as the epoch ends, and
the snapshot takes the log's :meth:`ChangeLog.delta`. Operators that also drop keys no epoch
names (windows closed by the watermark, timeouts) keep no log, and their snapshots are full.

:func:`newest_rows` is the other side: a restore that reads a chain through Python (the
driver, or Python workers) applies its deltas with it; the executors' JVMs do the same in
``jvm/src/main/java/io/snapshotjob/chunks/ChainRows.java``.
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
from pyspark.sql import DataFrame, Window
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.lineage import Checkpointed, checkpoint

MAX_EPOCHS = 32
"""Epochs' changes kept apart at most; beyond, they are merged into one frame, so a job whose
snapshots keep failing holds a bounded number of frames (and at most the state's keys)."""

_EPOCH = "_sj_epoch"
_RANK = "_sj_rank"
_ORDER = "_sj_order"


class ChangeLog:
    """The rows of the keys an operator updated since its base snapshot, epoch by epoch.

    Args:
        keys: The state's key columns.

    Attributes:
        base_id: The snapshot the log's changes are relative to: the one restored, or the
            last one that became the restore point; None before either (a snapshot must then
            be full).
    """

    def __init__(self, keys: Sequence[str]) -> None:
        self._keys = list(keys)
        self._epochs: list[Checkpointed] = []
        self._saving: tuple[int, int] | None = None
        self.base_id: int | None = None

    def reset(self, base_id: int | None) -> None:
        """Forgets every change: the state is the snapshot ``base_id`` (after a restore)."""
        for epoch in self._epochs:
            epoch.release()
        self._epochs = []
        self._saving = None
        self.base_id = base_id

    def add(self, rows: Checkpointed) -> None:
        """Takes one epoch's changed rows (state schema, one per key), which it now owns."""
        self._epochs.append(rows)
        if len(self._epochs) > MAX_EPOCHS:
            merged = checkpoint(self._newest(self._epochs))
            for epoch in self._epochs:
                epoch.release()
            self._epochs = [merged]
            if self._saving is not None:
                # A snapshot in flight took all of them (it holds its own frame meanwhile).
                self._saving = (self._saving[0], 1)

    def delta(self, partitions: int) -> DataFrame:
        """The newest row of every key changed since the base, hash-partitioned by key into
        ``partitions`` as the state is (so its partition ``p`` holds the state partition's
        keys)."""
        if not self._epochs:
            raise ValueError("No changes: the snapshot inherits every partition as it is")
        return self._newest(self._epochs, partitions)

    @property
    def empty(self) -> bool:
        """Whether no epoch changed anything since the base."""
        return not self._epochs

    def saving(self, snapshot_id: int) -> None:
        """Marks the changes a snapshot in flight covers (all there are now)."""
        self._saving = (snapshot_id, len(self._epochs))

    def committed(self, snapshot_id: int, success: bool) -> None:
        """After phase 2: a successful snapshot is the new base, and what it covered goes."""
        saving, self._saving = self._saving, None
        if not success or saving is None or saving[0] != snapshot_id:
            return
        for epoch in self._epochs[: saving[1]]:
            epoch.release()
        self._epochs = self._epochs[saving[1] :]
        self.base_id = snapshot_id

    def _newest(self, epochs: Sequence[Checkpointed], partitions: int | None = None) -> DataFrame:
        frames = [epoch.frame.withColumn(_EPOCH, F.lit(i)) for i, epoch in enumerate(epochs)]
        rows = frames[0]
        for frame in frames[1:]:
            rows = rows.unionByName(frame)
        if partitions is not None:
            # Placed first, the window's clustering by key reuses this shuffle.
            rows = rows.repartition(partitions, *self._keys)
        if len(frames) == 1:
            return rows.drop(_EPOCH)
        newest = Window.partitionBy(*self._keys).orderBy(F.col(_EPOCH).desc())
        return (
            rows.withColumn(_RANK, F.row_number().over(newest))
            .filter(F.col(_RANK) == 1)
            .drop(_RANK, _EPOCH)
        )


def newest_rows(batches: Sequence[pa.RecordBatch], keys: Sequence[str]) -> list[pa.RecordBatch]:
    """Applies a chain read in order (full version, then deltas): the last row of each key.

    Args:
        batches: The rows of a chain's chunks, in chain order.
        keys: The key columns.

    Returns:
        One row per key, its newest; in no particular order.
    """
    if not batches:
        return []
    table = pa.Table.from_batches(batches)
    numbered = table.append_column(_ORDER, pa.array(range(table.num_rows), pa.int64()))
    last = numbered.group_by(list(keys), use_threads=False).aggregate([(_ORDER, "max")])
    newest: list[pa.RecordBatch] = table.take(last.column(f"{_ORDER}_max")).to_batches()
    return newest
