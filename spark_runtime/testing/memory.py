"""A memory source and a memory sink: a pipeline's input and output held in the test process.

Why they exist: a test of a pipeline should need no Kafka, no PostgreSQL and no files, and still
run the pipeline the way the driver runs it, snapshots and restores included. So
:class:`MemorySource` is replayable like any real source (its offset is the number of rows
read, and reading the same two offsets always gives the same rows) and :class:`MemorySink` is a
real two-phase sink: phase 1 keeps an epoch's output aside under transaction ids that name the
job, the sink and the snapshot, phase 2 makes it visible, and a restore commits or rolls back
what a crash left prepared. Both live in the test process, not in the driver, so what they hold
outlives a driver "crashed" at a failpoint, as a database or a topic outlives a driver process.

A Structured Streaming user knows them as ``MemoryStream`` (``add`` is ``addData``) and the
memory sink; unlike the memory sink, :class:`MemorySink` shows only committed output.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql.types import StructType

from spark_runtime.sinks.base import EPOCH_COLUMN, TransactionalSink
from spark_runtime.sources.base import Offset, Source

_log = logging.getLogger(__name__)

RowLike = Mapping[str, Any] | Sequence[Any]
"""One input row: a dict by column name, a ``pyspark.sql.Row``, or a tuple in schema order."""


class MemorySource(Source):
    """Rows held in memory, read in epochs: a replayable source for tests.

    The offset is ``{"rows": n}``, the rows read so far, so a restored job reads again exactly
    the rows after its snapshot. By default each batch of rows (the constructor's, then each
    :meth:`add`) is one epoch, as each ``MemoryStream.addData`` is one micro-batch;
    ``rows_per_epoch`` cuts the rows into epochs of that many instead.

    Args:
        rows: The first rows: dicts by column name, ``Row`` objects, or tuples in the schema's
            column order.
        schema: A ``StructType`` or a DDL string (``"id long, word string"``). Without one it
            is inferred from the rows, once, by Spark; give one for a source that starts empty
            or has columns that may be null.
        rows_per_epoch: Rows each epoch reads at most; None for one epoch per batch of rows.
        bounded: Whether the job ends once every row added so far is read (the default, so a
            test run ends by itself); False for a stream that waits for :meth:`add`.
    """

    def __init__(
        self,
        rows: Iterable[RowLike] = (),
        *,
        schema: StructType | str | None = None,
        rows_per_epoch: int | None = None,
        bounded: bool = True,
    ) -> None:
        if rows_per_epoch is not None and rows_per_epoch <= 0:
            raise ValueError(f"rows_per_epoch must be positive, not {rows_per_epoch}")
        self.rows_per_epoch = rows_per_epoch
        self.bounded = bounded
        self._given_schema = schema
        self._schema: StructType | None = schema if isinstance(schema, StructType) else None
        self._lock = threading.Lock()
        self._rows: list[RowLike] = []
        # Where each batch of rows ends: without rows_per_epoch, an epoch reads one batch.
        self._batch_ends: list[int] = []
        self.add(rows)

    def add(self, rows: Iterable[RowLike]) -> int:
        """Appends rows as one more batch (``MemoryStream.addData``); a running job reads them.

        Returns:
            The offset (``rows`` count) at the end of the batch.
        """
        batch = list(rows)
        with self._lock:
            if batch:
                self._rows.extend(batch)
                self._batch_ends.append(len(self._rows))
            return len(self._rows)

    @property
    def row_count(self) -> int:
        """How many rows were given so far."""
        with self._lock:
            return len(self._rows)

    def schema(self, spark: SparkSession) -> StructType:
        """The given schema, or the one Spark infers from the rows (kept from then on).

        Raises:
            ValueError: If there is no schema and no row to infer one from.
        """
        if self._schema is not None:
            return self._schema
        if isinstance(self._given_schema, str):
            parsed: StructType = spark.createDataFrame([], self._given_schema).schema
            self._schema = parsed
            return parsed
        with self._lock:
            sample = list(self._rows)
        if not sample:
            raise ValueError(
                "A MemorySource without rows needs schema=..., e.g. 'id long, word string'"
            )
        columns = _column_names(sample[0])
        if columns is None:
            inferred = spark.createDataFrame([tuple(r) for r in sample]).schema
        else:
            inferred = spark.createDataFrame(
                [_as_tuple(r, columns) for r in sample], schema=list(columns)
            ).schema
        self._schema = inferred
        return inferred

    def initial_offset(self) -> Offset:
        """No row read yet."""
        return {"rows": 0}

    def next_offset(self, offset: Offset) -> Offset | None:
        """The end of the next batch (or of ``rows_per_epoch`` rows); None if all are read."""
        start = int(offset["rows"])
        with self._lock:
            total = len(self._rows)
            if total <= start:
                return None
            if self.rows_per_epoch is not None:
                return {"rows": min(total, start + self.rows_per_epoch)}
            return {"rows": next(end for end in self._batch_ends if end > start)}

    def is_exhausted(self, offset: Offset) -> bool:
        """Bounded, and every row given so far is read."""
        return self.bounded and int(offset["rows"]) >= self.row_count

    def rows_between(self, start: Offset, end: Offset) -> int:
        """The rows in the range, without reading them."""
        return int(end["rows"]) - int(start["rows"])

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """Rows ``start`` up to ``end`` (exclusive), the same every time."""
        schema = self.schema(spark)
        columns = tuple(schema.fieldNames())
        with self._lock:
            rows = self._rows[int(start["rows"]) : int(end["rows"])]
        return spark.createDataFrame([_as_tuple(r, columns) for r in rows], schema)


def _column_names(row: RowLike) -> tuple[str, ...] | None:
    """The column names a row carries (a dict's keys, a ``Row``'s fields); None for a tuple."""
    if isinstance(row, Row):
        fields = getattr(row, "__fields__", None)
        return tuple(fields) if fields else None
    if isinstance(row, Mapping):
        return tuple(str(key) for key in row)
    return None


def _as_tuple(row: RowLike, columns: Sequence[str]) -> tuple[Any, ...]:
    """The row's values in ``columns`` order; a dict may leave out nullable columns.

    Raises:
        ValueError: If a dict has a key that is not a column, or a tuple the wrong length.
    """
    if isinstance(row, Row) and getattr(row, "__fields__", None):
        row = row.asDict()
    if isinstance(row, Mapping):
        unknown = set(row) - set(columns)
        if unknown:
            raise ValueError(
                f"Row {dict(row)!r} has keys that are not columns: {sorted(unknown)}; "
                f"the columns are {list(columns)}"
            )
        return tuple(row.get(column) for column in columns)
    values = tuple(row)
    if len(values) != len(columns):
        raise ValueError(f"Row {values!r} has {len(values)} values for columns {list(columns)}")
    return values


@dataclass(frozen=True)
class CommittedBatch:
    """Output a :class:`MemorySink` made visible at once.

    Attributes:
        transaction_id: ``sj:<job uid>:<sink>:<snapshot id>`` for a committed transaction;
            ``sj:<job uid>:<sink>:write-<n>`` for a write of an at-least-once job.
        snapshot_id: The snapshot whose phase 2 (or whose restore) committed it; None for a
            write.
        rows: The rows, as dicts by column name, in epoch order.
    """

    transaction_id: str
    snapshot_id: int | None
    rows: tuple[dict[str, Any], ...]


class MemorySink(TransactionalSink):
    """Output kept in memory with two-phase commit: exactly once, and honest about it.

    Under ``EXACTLY_ONCE`` the runtime hands a snapshot's buffered epochs to :meth:`prepare`,
    which keeps them aside as a prepared transaction ``sj:<job uid>:<sink>:<snapshot id>``
    (the naming of ``PostgresSink``, without its partitions: one transaction per snapshot);
    only :meth:`commit` (phase 2, or a restore committing "just in case") makes them visible
    in :meth:`rows`. Under ``AT_LEAST_ONCE`` and ``NONE`` every epoch's :meth:`write` is
    visible at once. The sink object lives in the test, not in the driver, so its committed
    and prepared transactions survive a driver crashed at a failpoint.

    Rows are collected to the driver: small outputs only.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._prefix = ""
        self._name = ""
        self._schema: StructType | None = None
        self._committed: list[CommittedBatch] = []
        self._committed_ids: set[str] = set()
        # Transaction id -> (snapshot id, rows): prepared, neither committed nor rolled back.
        self._prepared: dict[str, tuple[int, tuple[dict[str, Any], ...]]] = {}
        self._writes = 0

    # --- what a test reads ---------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The sink's operator name, once a pipeline opened it; empty before."""
        return self._name

    def rows(self) -> list[dict[str, Any]]:
        """Every committed row, in commit order (and epoch order within a transaction)."""
        with self._lock:
            return [row for batch in self._committed for row in batch.rows]

    @property
    def committed_batches(self) -> list[CommittedBatch]:
        """The committed transactions and writes, in the order they became visible."""
        with self._lock:
            return list(self._committed)

    @property
    def prepared_transactions(self) -> list[str]:
        """Ids of transactions prepared and not yet committed or rolled back, sorted.

        After a completed run there must be none; after a crash between the phases there may
        be some, for the next restore to settle.
        """
        with self._lock:
            return sorted(self._prepared)

    def to_pandas(self) -> pd.DataFrame:
        """The committed rows as a pandas DataFrame, with the sink's columns in order."""
        rows = self.rows()
        columns = None
        if self._schema is not None:
            columns = [name for name in self._schema.fieldNames() if name != EPOCH_COLUMN]
        return pd.DataFrame(rows, columns=columns)

    def latest(self, *key: str) -> dict[Any, dict[str, Any]]:
        """The last committed row per key: what an upserting sink's table would hold.

        An aggregation's output is an update stream (each epoch, the new value of every key
        it touched); this is its result table.

        Args:
            key: The key columns.

        Returns:
            Key -> its last row; the key is the value itself for one column, a tuple for more.
        """
        if not key:
            raise ValueError("latest() needs the key column(s), e.g. latest('word')")
        table: dict[Any, dict[str, Any]] = {}
        for row in self.rows():
            value = row[key[0]] if len(key) == 1 else tuple(row[k] for k in key)
            table[value] = row
        return table

    # --- the runtime's side ---------------------------------------------------------------------

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Names the transactions of this job and sink; keeps what earlier executions left."""
        with self._lock:
            self._schema = schema
            self._name = name
            self._prefix = f"sj:{job_uid}:{name}:"

    def write(self, frame: DataFrame) -> int:
        """Makes an epoch's rows visible at once (``AT_LEAST_ONCE``, ``NONE``)."""
        rows = _collect(frame)
        with self._lock:
            self._writes += 1
            transaction_id = f"{self._prefix}write-{self._writes}"
            self._committed.append(CommittedBatch(transaction_id, None, rows))
            self._committed_ids.add(transaction_id)
        return len(rows)

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Phase 1: keeps the buffered epochs aside, invisible, as one prepared transaction."""
        rows = _collect(frame)
        transaction_id = f"{self._prefix}{snapshot_id}"
        with self._lock:
            self._prepared[transaction_id] = (snapshot_id, rows)
        return [transaction_id]

    def prepared_rows(self, transaction_ids: Sequence[str]) -> int | None:
        """The rows the prepared transactions hold (for the rows-written metric)."""
        with self._lock:
            if any(t not in self._prepared for t in transaction_ids):
                return None
            return sum(len(self._prepared[t][1]) for t in transaction_ids)

    def commit(self, transaction_ids: Sequence[str]) -> None:
        """Phase 2: makes prepared transactions visible; committed ones are skipped."""
        with self._lock:
            for transaction_id in transaction_ids:
                self._commit_locked(transaction_id)

    def _commit_locked(self, transaction_id: str) -> None:
        entry = self._prepared.pop(transaction_id, None)
        if entry is not None:
            snapshot_id, rows = entry
            self._committed.append(CommittedBatch(transaction_id, snapshot_id, rows))
            self._committed_ids.add(transaction_id)
        elif transaction_id not in self._committed_ids:
            # Neither prepared nor committed: rolled back earlier, so its rows are lost unless
            # they are in a later transaction. The test's id check will say which are missing.
            _log.warning("Commit of a transaction that is not prepared id=%s", transaction_id)

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """Discards prepared transactions; ids already gone are skipped."""
        with self._lock:
            for transaction_id in transaction_ids:
                self._prepared.pop(transaction_id, None)

    def abort(self, snapshot_id: int) -> None:
        """Discards what a failed :meth:`prepare` of ``snapshot_id`` kept."""
        self.rollback([f"{self._prefix}{snapshot_id}"])

    def _ours(self, below_or_at: int) -> list[str]:
        """This job's and sink's prepared transactions of snapshots up to ``below_or_at``."""
        return sorted(
            t
            for t, (snapshot_id, _rows) in self._prepared.items()
            if t.startswith(self._prefix) and snapshot_id <= below_or_at
        )

    def roll_back_older(self, snapshot_id: int) -> list[str]:
        """Discards this job's transactions prepared under ids below ``snapshot_id``."""
        with self._lock:
            older = self._ours(snapshot_id - 1)
            for transaction_id in older:
                del self._prepared[transaction_id]
            return older

    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        """Commits ``committed`` if still prepared; discards this job's other prepared
        transactions of snapshots up to ``through_snapshot_id``."""
        with self._lock:
            done = [t for t in committed if t in self._prepared]
            for transaction_id in done:
                self._commit_locked(transaction_id)
            others = [t for t in self._ours(through_snapshot_id) if t not in set(committed)]
            for transaction_id in others:
                del self._prepared[transaction_id]
            return done, others


def _collect(frame: DataFrame) -> tuple[dict[str, Any], ...]:
    """The frame's rows as dicts on the driver, in epoch order, without the epoch column.

    Buffered output is a union of epochs tagged with :data:`EPOCH_COLUMN`; a stable sort by it
    keeps a key's updates in the order they were made.
    """
    rows = frame.collect()
    if EPOCH_COLUMN in frame.columns:
        rows = sorted(rows, key=lambda row: int(row[EPOCH_COLUMN]))
    result = []
    for row in rows:
        values = row.asDict(recursive=True)
        values.pop(EPOCH_COLUMN, None)
        result.append(values)
    return tuple(result)
