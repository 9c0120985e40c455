"""What a sink is, and what a sink must do to take part in two-phase commit.

Exactly-once output needs a transactional or an idempotent sink (``docs/concepts/protocol.md``,
"Processing guarantees"). A transactional sink here follows Jet's two-phase sinks
(``docs/concepts/protocol.md``, "The PostgreSQL two-phase sink"): output since the last snapshot is
published only in the snapshot's 2nd phase. In phase 1 each sink partition writes its share into
its own transaction and *prepares* it, and the ids of the prepared transactions go into the
snapshot; phase 2 commits them; a restore commits the ids of the restored snapshot "just in
case" and rolls back every other prepared transaction of the job (``docs/concepts/protocol.md``,
restore step 5). One transaction per sink partition per snapshot means transactions never overlap.

A sink whose destination cannot keep a prepared transaction across a restart of its client
(Kafka: no client available here can resume one) is a :class:`StagedSink` instead: phase 1
stages its output *in the snapshot*, as checksummed chunks, and phase 2 publishes them in one
destination transaction per sink partition together with a marker that says so; restore
publishes the restore point's staged output again unless its marker is there. Sinks that
cannot take part (console) or need not (the idempotent Hazelcast map) write every epoch. How
a sink's output is buffered and handed to these methods is the business of
:mod:`spark_runtime.sinks.participant` and :mod:`spark_runtime.sinks.staged`.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

EPOCH_COLUMN = "_sj_epoch"
"""Buffered output carries its epoch, so a keyed sink applies upserts in epoch order."""


class Sink(ABC):
    """Where a pipeline writes a DataFrame each epoch."""

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Prepares the destination for rows of ``schema`` (e.g. creates the table)."""
        return

    @abstractmethod
    def write(self, frame: DataFrame) -> int | None:
        """Publishes ``frame`` now (every epoch; the at-least-once path).

        Returns:
            The rows written, if the sink counted them while writing (for the driver's
            rows-written metric); None if only another Spark job could count them.
        """


class TransactionalSink(Sink):
    """A sink with two-phase commit, identified per job and sink by a transaction id prefix."""

    @abstractmethod
    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Phase 1: writes ``frame`` into prepared transactions and returns their ids."""

    def prepared_rows(self, transaction_ids: Sequence[str]) -> int | None:
        """The rows the last :meth:`prepare` wrote into these transactions, if it counted them
        (for the driver's rows-written metric); None if it did not (the default)."""
        return None

    @abstractmethod
    def commit(self, transaction_ids: Sequence[str]) -> None:
        """Phase 2: commits the prepared transactions; ids already committed are skipped."""

    @abstractmethod
    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """Rolls back the prepared transactions; ids already gone are skipped."""

    @abstractmethod
    def abort(self, snapshot_id: int) -> None:
        """Rolls back whatever a failed :meth:`prepare` of ``snapshot_id`` left prepared."""

    @abstractmethod
    def roll_back_older(self, snapshot_id: int) -> list[str]:
        """Rolls back this job's transactions still prepared under ids below ``snapshot_id``.

        Called in the 2nd phase of successful snapshot ``snapshot_id``: the record is safe at
        that id, so no restore will ever commit an older transaction. Left prepared, one would
        hold its locks for good; only a replaced execution (fenced at taking step 7a) leaves
        them.

        Returns:
            The ids rolled back.
        """

    @abstractmethod
    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        """Restore step 5: commits ``committed`` if still prepared, rolls back all others of
        snapshots up to ``through_snapshot_id`` (higher ones are a newer execution's).

        Returns:
            The ids committed and the ids rolled back.
        """


class StagedSink(Sink):
    """A sink whose exactly-once output is staged in the snapshot and published in phase 2.

    Each sink partition's output of a snapshot is published atomically with a marker naming
    the snapshot, and only if no marker for that snapshot or a later one is there yet: so a
    publish may run any number of times (phase 2, then restore step 5 "just in case") and the
    output appears once. Instances are pickled into the executors' tasks, so they hold
    settings, never clients.

    Attributes:
        partitions: Sink partitions: a snapshot's output is staged and published as this many
            parts, in parallel.
    """

    partitions: int

    def partition_columns(self) -> Sequence[str]:
        """Columns whose hash picks a row's sink partition (none: spread evenly)."""
        return ()

    def as_writer(self, job_uid: str) -> StagedSink:
        """This sink, publishing as the job ``job_uid`` does (its markers, its transactions).

        A job started from another job's export restores that job's snapshot, and restore
        step 5 publishes its staged output "just in case". Whether it was published is in the
        other job's markers, so that publish must look there and write under the other job's
        identity: published, it is skipped; not published (that job stopped before its
        second phase), it is published once. A sink whose markers do not depend on the job
        returns itself (the default).
        """
        return self

    @abstractmethod
    def publish(self, snapshot_id: int, partition: int, batches: Iterator[pa.RecordBatch]) -> int:
        """Publishes one sink partition's staged output of ``snapshot_id``, once.

        Runs inside a Spark task. Does nothing if the partition's marker already names
        ``snapshot_id`` or a later snapshot; otherwise writes the rows and the marker in one
        transaction, after fencing any earlier writer of the same partition.

        Returns:
            The rows published; 0 if they had been already.
        """
