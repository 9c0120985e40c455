"""Sinks: PostgreSQL with two-phase commit, files with staging, a Hazelcast map, the console.

Exactly-once output needs a transactional or an idempotent sink (reference 003). A
transactional sink here follows Jet's two-phase sinks (seed 001): output since the last
snapshot is published only in the snapshot's 2nd phase. In phase 1 each sink partition writes
its share into its own transaction and *prepares* it, and the ids of the prepared transactions
go into the snapshot; phase 2 commits them; a restore commits the ids of the restored snapshot
"just in case" and rolls back every other prepared transaction of the job (restore step 5).
One transaction per sink partition per snapshot means transactions never overlap.

Sinks that cannot take part (console) or need not (the idempotent Hazelcast map) write every
epoch.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pyarrow as pa
from hazelcast.client import HazelcastClient
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

_log = logging.getLogger(__name__)

EPOCH_COLUMN = "_sj_epoch"
"""Buffered output carries its epoch, so a keyed sink applies upserts in epoch order."""


class Sink(ABC):
    """Where a pipeline writes a DataFrame each epoch."""

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Prepares the destination for rows of ``schema`` (e.g. creates the table)."""
        return

    @abstractmethod
    def write(self, frame: DataFrame) -> None:
        """Publishes ``frame`` now (every epoch; the at-least-once path)."""


class TransactionalSink(Sink):
    """A sink with two-phase commit, identified per job and sink by a transaction id prefix."""

    @abstractmethod
    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Phase 1: writes ``frame`` into prepared transactions and returns their ids."""

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
    def recover(self, committed: Sequence[str]) -> tuple[list[str], list[str]]:
        """Restore step 5: commits ``committed`` if still prepared, rolls back all others.

        Returns:
            The ids committed and the ids rolled back.
        """


# PostgreSQL -----------------------------------------------------------------------------------

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


class MaxPreparedTransactionsDisabled(ValueError):  # noqa: N818 - names the condition
    """The PostgreSQL server cannot prepare transactions: a setup error no restart fixes."""


class PostgresSink(TransactionalSink):
    """A PostgreSQL table, with ``PREPARE TRANSACTION`` / ``COMMIT PREPARED`` for exactly-once.

    Transaction ids (gids) are ``sj:<job uid>:<sink>:<snapshot>:<partition>``, so restore can
    find every prepared transaction of this job and sink in ``pg_prepared_xacts``.

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

    def gid(self, snapshot_id: int, partition: int) -> str:
        """The transaction id of one sink partition's share of one snapshot."""
        return f"{self._prefix}{snapshot_id}:{partition}"

    def _statement(self) -> str:
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
        with psycopg.connect(self.dsn) as conn:
            return insert.as_string(conn)

    def _run_partitions(self, frame: DataFrame, gid_template: str | None) -> list[str]:
        """Writes each sink partition in its own transaction from the executors.

        With ``gid_template`` (``...{partition}``) each transaction is prepared, not committed.
        """
        dsn, statement, columns = self.dsn, self._statement(), list(self._columns)
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
                yield pa.RecordBatch.from_pydict({"gid": []}, schema=_GID_SCHEMA)
                return
            gid = None if gid_template is None else gid_template.format(context.partitionId())
            with psycopg.connect(dsn) as conn:
                with conn.cursor() as cursor:
                    cursor.executemany(statement, rows)
                if gid is not None:
                    conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            yield pa.RecordBatch.from_pydict({"gid": [gid or ""]}, schema=_GID_SCHEMA)

        result = ordered.mapInArrow(write, "gid string").collect()
        return sorted(row["gid"] for row in result if row["gid"])

    def write(self, frame: DataFrame) -> None:
        """Writes and commits each partition now."""
        self._run_partitions(frame, None)

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Writes each partition into a transaction named by :meth:`gid` and prepares it."""
        return self._run_partitions(frame, f"{self._prefix}{snapshot_id}:{{}}")

    def _finish(self, gids: Sequence[str], command: str) -> list[str]:
        done = []
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            prepared = {
                row[0]
                for row in conn.execute(
                    "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
                )
            }
            for gid in gids:
                if gid in prepared:
                    conn.execute(sql.SQL(command).format(sql.Literal(gid)))
                    done.append(gid)
        return done

    def commit(self, transaction_ids: Sequence[str]) -> None:
        """``COMMIT PREPARED`` of each id still prepared."""
        self._finish(transaction_ids, _COMMIT)

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """``ROLLBACK PREPARED`` of each id still prepared."""
        self._finish(transaction_ids, _ROLLBACK)

    def prepared(self) -> list[str]:
        """Ids of this job's and sink's transactions now prepared in the database."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            rows = conn.execute(
                "SELECT gid FROM pg_prepared_xacts WHERE database = current_database() "
                "AND starts_with(gid, %s) ORDER BY gid",
                (self._prefix,),
            ).fetchall()
        return [row[0] for row in rows]

    def abort(self, snapshot_id: int) -> None:
        """Rolls back the prepared transactions named for ``snapshot_id``."""
        prefix = f"{self._prefix}{snapshot_id}:"
        self._finish([gid for gid in self.prepared() if gid.startswith(prefix)], _ROLLBACK)

    def recover(self, committed: Sequence[str]) -> tuple[list[str], list[str]]:
        """Commits the restored snapshot's ids, rolls back this job's other prepared ones."""
        done = self._finish(committed, _COMMIT)
        others = [gid for gid in self.prepared() if gid not in set(committed)]
        return done, self._finish(others, _ROLLBACK)


_GID_SCHEMA = pa.schema([pa.field("gid", pa.string())])


# Files ----------------------------------------------------------------------------------------


class FileSink(TransactionalSink):
    """Files in a directory: Spark writes into a staging directory, commit renames it.

    Every published directory is ``<directory>/<sink>-<id>`` holding Spark's ``part-*``
    files; the transaction id is the staging directory's name. A directory rename is atomic
    on one filesystem, so readers see a snapshot's files all or not at all.

    Args:
        directory: The output directory (local or shared filesystem; executors write to it).
        fmt: A Spark writer format: json, csv, parquet, text.
        options: Spark writer options.
    """

    def __init__(
        self, directory: str | os.PathLike[str], fmt: str = "json", **options: str
    ) -> None:
        self.directory = Path(directory)
        self.fmt = fmt
        self.options = options
        self._name = "files"

    @property
    def staging(self) -> Path:
        """Where prepared (not yet published) output waits."""
        return self.directory / "_staging"

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Creates the directories."""
        self._name = name
        self.staging.mkdir(parents=True, exist_ok=True)

    def _save(self, frame: DataFrame, path: Path) -> None:
        if EPOCH_COLUMN in frame.columns:
            frame = frame.drop(EPOCH_COLUMN)
        frame.write.mode("overwrite").format(self.fmt).options(**self.options).save(str(path))

    def write(self, frame: DataFrame) -> None:
        """Publishes at once under a fresh name (a replay writes the rows again)."""
        staged = self.staging / f"{self._name}-epoch-{uuid.uuid4().hex}"
        self._save(frame, staged)
        os.replace(staged, self.directory / staged.name)

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Writes into ``_staging/<sink>-<snapshot>``."""
        transaction_id = f"{self._name}-{snapshot_id}"
        self._save(frame, self.staging / transaction_id)
        return [transaction_id]

    def commit(self, transaction_ids: Sequence[str]) -> None:
        """Renames each staging directory into the output directory."""
        for transaction_id in transaction_ids:
            staged = self.staging / transaction_id
            if staged.is_dir():
                os.replace(staged, self.directory / transaction_id)

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """Deletes the staging directories."""
        for transaction_id in transaction_ids:
            shutil.rmtree(self.staging / transaction_id, ignore_errors=True)

    def abort(self, snapshot_id: int) -> None:
        """Deletes the snapshot's staging directory."""
        self.rollback([f"{self._name}-{snapshot_id}"])

    def recover(self, committed: Sequence[str]) -> tuple[list[str], list[str]]:
        """Publishes the restored snapshot's staging directories, deletes all other ones."""
        done = [t for t in committed if (self.staging / t).is_dir()]
        self.commit(done)
        others = (
            sorted(p.name for p in self.staging.iterdir() if p.name.startswith(f"{self._name}-"))
            if self.staging.is_dir()
            else []
        )
        self.rollback(others)
        return done, others


# Hazelcast map --------------------------------------------------------------------------------

_map_clients: dict[tuple[tuple[str, ...], str], HazelcastClient] = {}
_map_clients_lock = threading.Lock()


def _map_client(members: tuple[str, ...], cluster_name: str) -> HazelcastClient:
    with _map_clients_lock:
        client = _map_clients.get((members, cluster_name))
        if client is None:
            client = HazelcastClient(cluster_members=list(members), cluster_name=cluster_name)
            _map_clients[(members, cluster_name)] = client
        return client


class HazelcastMapSink(Sink):
    """A Hazelcast map, upserting each row under its key: idempotent, so writes every epoch.

    A replay after a restore writes the same values under the same keys again, so the map ends
    exactly as with exactly-once, though a reader may briefly see older values.

    Args:
        members: ``host:port`` addresses of the cluster.
        cluster_name: The cluster's name.
        map_name: The map to write.
        key: Key columns; the map key is their values joined by ``|``.
    """

    def __init__(
        self, members: Sequence[str], cluster_name: str, map_name: str, key: Sequence[str]
    ) -> None:
        self.members = tuple(members)
        self.cluster_name = cluster_name
        self.map_name = map_name
        self.key = tuple(key)

    def write(self, frame: DataFrame) -> None:
        """Puts every row as JSON under its key, from the executors."""
        members, cluster, map_name, key = self.members, self.cluster_name, self.map_name, self.key
        columns = [c for c in frame.columns if c != EPOCH_COLUMN]

        def put(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            target: Any = _map_client(members, cluster).get_map(map_name).blocking()
            count = 0
            for batch in batches:
                entries = {
                    "|".join(str(row[k]) for k in key): json.dumps(
                        {c: row[c] for c in columns}, default=str
                    )
                    for row in batch.to_pylist()
                }
                if entries:
                    target.put_all(entries)
                count += len(entries)
            yield pa.RecordBatch.from_pydict({"n": [count]})

        frame.mapInArrow(put, "n long").collect()


class ConsoleSink(Sink):
    """Prints up to ``limit`` rows of every epoch's output on the driver; for trying things out.

    Args:
        limit: Rows printed per epoch at most.
    """

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit

    def write(self, frame: DataFrame) -> None:
        """Prints the rows."""
        columns = [c for c in frame.columns if c != EPOCH_COLUMN]
        for row in frame.select(*columns).limit(self.limit).collect():
            print(json.dumps(row.asDict(), default=str), flush=True)
