"""A PostgreSQL table as a two-phase-commit sink: ``PREPARE TRANSACTION``, ``COMMIT PREPARED``.

PostgreSQL's prepared transactions survive a crash of the client and of the server, and can
be found again by name in ``pg_prepared_xacts``: exactly what phase 2 and restore step 5
need. Each sink partition writes from its executor task in its own transaction. This is the
only sink that needs psycopg.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

import psycopg
import pyarrow as pa
from psycopg import sql
from pyspark import TaskContext
from pyspark.sql import DataFrame
from pyspark.sql.types import (
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from spark_runtime.sinks.base import EPOCH_COLUMN, TransactionalSink

_log = logging.getLogger(__name__)

_PG_TYPES: Mapping[type[DataType], str] = {
    LongType: "bigint",
    IntegerType: "integer",
    ShortType: "smallint",
    DoubleType: "double precision",
    FloatType: "real",
    StringType: "text",
    BooleanType: "boolean",
    TimestampType: "timestamptz",
    DateType: "date",
}


def _pg_type(data_type: DataType) -> str:
    for spark_type, pg in _PG_TYPES.items():
        if isinstance(data_type, spark_type):
            return pg
    return "text"


_COMMIT = "COMMIT PREPARED {}"
_ROLLBACK = "ROLLBACK PREPARED {}"


def _prepared_gids(conn: psycopg.Connection[Any], prefix: str) -> list[str]:
    """The gids starting with ``prefix`` now prepared in the connection's database, sorted."""
    rows = conn.execute(
        "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
        "AND starts_with(gid, %s) ORDER BY gid",
        (prefix,),
    ).fetchall()
    return [row[0] for row in rows]


def _roll_back_earlier_attempts(conn: psycopg.Connection[Any], gid: str) -> None:
    """Rolls back the transactions earlier attempts of this task left prepared.

    Spark runs a task again when its executor is lost after the task prepared its
    transaction but before the driver heard of it. That transaction stays prepared and keeps
    its row locks: the new attempt's upserts of the same keys would wait for it forever. Each
    attempt's transaction is named by its task attempt id (:meth:`PostgresSink.gid`), which
    the driver hands out in increasing order, and an attempt rolls back only those of the same
    snapshot and partition with a smaller id: never a newer attempt's, whose transaction may
    be the one the driver commits, even if an older attempt runs late on an executor already
    given up on. The driver commits only the ids its tasks returned, so nothing commits an
    earlier attempt's transaction; one of an older (zombie) execution under the same snapshot
    id is fenced out of phase 2 anyway.
    """
    partition_prefix, attempt = gid.rsplit(":", 1)
    conn.autocommit = True
    try:
        for earlier in _prepared_gids(conn, f"{partition_prefix}:"):
            suffix = earlier[len(partition_prefix) + 1 :]
            if suffix.isdigit() and int(suffix) < int(attempt):
                conn.execute(sql.SQL(_ROLLBACK).format(sql.Literal(earlier)))
                _log.warning(
                    "Rolled back an earlier attempt's prepared transaction gid=%s attempt=%s",
                    earlier,
                    attempt,
                )
    finally:
        conn.autocommit = False


class MaxPreparedTransactionsDisabled(ValueError):  # noqa: N818 - names the condition
    """The PostgreSQL server cannot prepare transactions: a setup error no restart fixes."""


class SpeculationEnabled(ValueError):  # noqa: N818 - names the condition
    """Speculative task copies would undo each other's prepared transactions: a setup error."""


class PostgresSink(TransactionalSink):
    """A PostgreSQL table, with ``PREPARE TRANSACTION`` / ``COMMIT PREPARED`` for exactly-once.

    Transaction ids (gids) are ``sj:<job uid>:<sink>:<snapshot>:<partition>:<task attempt>``,
    so restore can find every prepared transaction of this job and sink in
    ``pg_prepared_xacts``, and a task run again can tell its earlier attempts' transactions.

    Args:
        dsn: libpq connection string of the database.
        table: The table; created from the DataFrame's schema if missing.
        key: Key columns: rows are upserted on them (idempotent); without a key rows are
            appended, which duplicates output on replay unless the guarantee is exactly-once.
        partitions: Sink partitions, each one transaction per snapshot.
    """

    def __init__(
        self, dsn: str, table: str, key: Sequence[str] = (), *, partitions: int = 4
    ) -> None:
        self.dsn = dsn
        self.table = table
        self.key = tuple(key)
        self.partitions = partitions
        self._prefix = ""
        self._columns: list[str] = []
        self._statement = ""
        # Rows per transaction of the last prepare, as its tasks counted them.
        self._prepared_rows: dict[str, int] = {}

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Checks that the server can prepare transactions and creates the table if missing.

        Raises:
            MaxPreparedTransactionsDisabled: If ``max_prepared_transactions`` is 0.
        """
        self._prefix = f"sj:{job_uid}:{name}:"
        self._columns = [f.name for f in schema.fields if f.name != EPOCH_COLUMN]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute("SHOW max_prepared_transactions").fetchone()
            if row is None or int(row[0]) == 0:
                raise MaxPreparedTransactionsDisabled(
                    "PostgreSQL has max_prepared_transactions = 0, so the exactly-once sink "
                    f"for table {self.table} cannot prepare transactions. Set "
                    "max_prepared_transactions to at least the sink partitions times 2 "
                    f"(here {self.partitions * 2}) in postgresql.conf and restart the server, "
                    "or run the job AT_LEAST_ONCE"
                )
            columns = [
                sql.SQL("{} {}").format(sql.Identifier(f.name), sql.SQL(_pg_type(f.dataType)))
                for f in schema.fields
                if f.name != EPOCH_COLUMN
            ]
            if self.key:
                columns.append(
                    sql.SQL("PRIMARY KEY ({})").format(
                        sql.SQL(", ").join(map(sql.Identifier, self.key))
                    )
                )
            conn.execute(
                sql.SQL("CREATE TABLE IF NOT EXISTS {} ({})").format(
                    sql.Identifier(*self.table.split(".")), sql.SQL(", ").join(columns)
                )
            )
        # Rendered once, without a connection (psycopg >= 3.2 quotes identifiers itself, in
        # UTF-8): every write used to connect on the driver only to render it.
        self._statement = self._compose_statement().as_string(None)

    def gid(self, snapshot_id: int, partition: int, attempt: int) -> str:
        """The transaction id of one task attempt at a sink partition's share of a snapshot.

        Args:
            snapshot_id: The snapshot.
            partition: The sink partition.
            attempt: The Spark task attempt's id (``TaskContext.taskAttemptId()``), unique in
                the driver's SparkContext and increasing with each attempt it launches.
        """
        return f"{self._prefix}{snapshot_id}:{partition}:{attempt}"

    def _compose_statement(self) -> sql.Composed:
        table = sql.Identifier(*self.table.split("."))
        columns = sql.SQL(", ").join(map(sql.Identifier, self._columns))
        values = sql.SQL(", ").join(sql.Placeholder() for _ in self._columns)
        insert = sql.SQL("INSERT INTO {} ({}) VALUES ({})").format(table, columns, values)
        if self.key:
            updates = [c for c in self._columns if c not in self.key]
            action = (
                sql.SQL("DO UPDATE SET {}").format(
                    sql.SQL(", ").join(
                        sql.SQL("{0} = EXCLUDED.{0}").format(sql.Identifier(c)) for c in updates
                    )
                )
                if updates
                else sql.SQL("DO NOTHING")
            )
            insert = sql.SQL("{} ON CONFLICT ({}) {}").format(
                insert, sql.SQL(", ").join(map(sql.Identifier, self.key)), action
            )
        return insert

    def _run_partitions(self, frame: DataFrame, gid_template: str | None) -> list[tuple[str, int]]:
        """Writes each sink partition in its own transaction from the executors.

        With ``gid_template`` (``...{partition}:{attempt}``) each transaction is prepared, not
        committed.

        Returns:
            Each partition's transaction id (empty if not prepared) and rows written, for
            the partitions that had rows.
        """
        if not self._statement:
            raise RuntimeError(f"The PostgreSQL sink for table {self.table} was not opened")
        dsn, statement, columns = self.dsn, self._statement, list(self._columns)
        if self.key:
            ordered = frame.repartition(self.partitions, *self.key)
        else:
            ordered = frame.repartition(self.partitions)
        if EPOCH_COLUMN in frame.columns:
            ordered = ordered.sortWithinPartitions(EPOCH_COLUMN)

        def write(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            context = TaskContext.get()
            assert context is not None, "runs inside a Spark task"
            rows: list[tuple[Any, ...]] = []
            for batch in batches:
                data = batch.select(columns).to_pylist()
                rows.extend(tuple(row[c] for c in columns) for row in data)
            if not rows:
                yield pa.RecordBatch.from_pydict({"gid": [], "rows": []}, schema=_RESULT_SCHEMA)
                return
            gid = (
                None
                if gid_template is None
                else gid_template.format(
                    partition=context.partitionId(), attempt=context.taskAttemptId()
                )
            )
            with psycopg.connect(dsn) as conn:
                if gid is not None:
                    _roll_back_earlier_attempts(conn, gid)
                with conn.cursor() as cursor:
                    cursor.executemany(statement, rows)
                if gid is not None:
                    conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            yield pa.RecordBatch.from_pydict(
                {"gid": [gid or ""], "rows": [len(rows)]}, schema=_RESULT_SCHEMA
            )

        result = ordered.mapInArrow(write, "gid string, rows long").collect()
        return [(row["gid"], int(row["rows"])) for row in result]

    def write(self, frame: DataFrame) -> int:
        """Writes and commits each partition now; returns the rows written."""
        return sum(rows for _gid, rows in self._run_partitions(frame, None))

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Writes each partition into a transaction named by :meth:`gid` and prepares it.

        Raises:
            SpeculationEnabled: If the session runs speculative task copies.
        """
        speculation = frame.sparkSession.conf.get("spark.speculation", "false") or "false"
        if speculation.strip().lower() == "true":
            raise SpeculationEnabled(
                f"The exactly-once PostgreSQL sink for table {self.table} cannot run with "
                "spark.speculation=true: each sink task rolls back the transactions its earlier "
                "attempts prepared (left by attempts lost with their executors), and a "
                "speculative copy would roll back the one of the twin whose result counts. Remove "
                "spark.speculation from spec.spark.conf"
            )
        template = f"{self._prefix}{snapshot_id}:{{partition}}:{{attempt}}"
        prepared = self._run_partitions(frame, template)
        self._prepared_rows = {gid: rows for gid, rows in prepared if gid}
        return sorted(self._prepared_rows)

    def prepared_rows(self, transaction_ids: Sequence[str]) -> int | None:
        """The rows the last :meth:`prepare` wrote into these transactions; None if it did not
        prepare them all."""
        if any(gid not in self._prepared_rows for gid in transaction_ids):
            return None
        return sum(self._prepared_rows[gid] for gid in transaction_ids)

    def _finish(self, gids: Sequence[str], command: str) -> list[str]:
        done = []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            prepared = set(_prepared_gids(conn, self._prefix))
            for gid in gids:
                if gid in prepared:
                    conn.execute(sql.SQL(command).format(sql.Literal(gid)))
                    done.append(gid)
        return done

    def commit(self, transaction_ids: Sequence[str]) -> None:
        """``COMMIT PREPARED`` of each id still prepared, then rolls back the other
        transactions of the same snapshots: attempts of a task that ran on after Spark had
        run it again elsewhere (no task of a committed snapshot runs any more), which would
        otherwise hold their rows' locks until the next snapshot. One connection for both."""
        committed = set(transaction_ids)
        snapshots = {self._snapshot_of(gid) for gid in committed}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            prepared = _prepared_gids(conn, self._prefix)
            for gid in transaction_ids:
                if gid in prepared:
                    conn.execute(sql.SQL(_COMMIT).format(sql.Literal(gid)))
            strays = [
                gid
                for gid in prepared
                if gid not in committed and self._snapshot_of(gid) in snapshots
            ]
            for gid in strays:
                conn.execute(sql.SQL(_ROLLBACK).format(sql.Literal(gid)))
        if strays:
            _log.warning(
                "Rolled back transactions of superseded task attempts table=%s transactions=%s",
                self.table,
                ",".join(strays),
            )

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """``ROLLBACK PREPARED`` of each id still prepared."""
        self._finish(transaction_ids, _ROLLBACK)

    def prepared(self) -> list[str]:
        """Ids of this job's and sink's transactions now prepared in the database."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            return _prepared_gids(conn, self._prefix)

    def abort(self, snapshot_id: int) -> None:
        """Rolls back the prepared transactions named for ``snapshot_id``."""
        prefix = f"{self._prefix}{snapshot_id}:"
        self._finish([gid for gid in self.prepared() if gid.startswith(prefix)], _ROLLBACK)

    def roll_back_older(self, snapshot_id: int) -> list[str]:
        """Rolls back this job's transactions prepared under ids below ``snapshot_id``."""
        older = [gid for gid in self.prepared() if self._snapshot_of(gid) < snapshot_id]
        return self._finish(older, _ROLLBACK) if older else []

    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        """Commits the restored snapshot's ids, rolls back this job's other prepared ones of
        snapshots up to ``through_snapshot_id``."""
        done = self._finish(committed, _COMMIT)
        others = [
            gid
            for gid in self.prepared()
            if gid not in set(committed) and self._snapshot_of(gid) <= through_snapshot_id
        ]
        return done, self._finish(others, _ROLLBACK)

    def _snapshot_of(self, gid: str) -> int:
        """The snapshot id in a gid made by :meth:`gid`."""
        return int(gid[len(self._prefix) :].split(":", 1)[0])


_RESULT_SCHEMA = pa.schema([pa.field("gid", pa.string()), pa.field("rows", pa.int64())])
