"""Replayable sources: each epoch reads a bounded range between two offsets.

Exactly-once and at-least-once both rest on the source being replayable (reference 003): after
a restore the job must read again exactly what it read after the snapshot. So a source never
decides *what* a range holds at read time; it decides only *where the next range ends*
(:meth:`Source.next_offset`), and :meth:`Source.read` of the same two offsets always yields the
same rows. The offset reached by the last epoch is the source's snapshot state, written by the
driver in phase 1 as one small JSON chunk.
"""

from __future__ import annotations

import json
import logging
import os
import time
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import LongType, StringType, StructField, StructType, TimestampType

from spark_runtime.protocol.chunks import ChunkDescriptor, ChunkWriter, SnapshotRef
from spark_runtime.protocol.ports import ChunkReader

_log = logging.getLogger(__name__)

Offset = Any
"""A JSON-serialisable position in a source."""


class Source(ABC):
    """A replayable source of rows."""

    @abstractmethod
    def schema(self, spark: SparkSession) -> StructType:
        """The schema of every batch."""

    @abstractmethod
    def initial_offset(self) -> Offset:
        """Where a job without snapshot starts."""

    @abstractmethod
    def next_offset(self, offset: Offset) -> Offset | None:
        """Where the next epoch's range ends, or None if there is nothing new right now."""

    @abstractmethod
    def is_exhausted(self, offset: Offset) -> bool:
        """Whether no row will ever come after ``offset`` (a bounded source's end)."""

    @abstractmethod
    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """The rows after ``start`` up to and including ``end``; the same every time."""


class SourceParticipant:
    """A source in the snapshot protocol: its offset is its state.

    Args:
        name: The source's operator name.
        source: The source.
    """

    def __init__(self, name: str, source: Source) -> None:
        self._name = name
        self.source = source
        self.offset: Offset = source.initial_offset()

    @property
    def name(self) -> str:
        """The operator name in chunk keys."""
        return self._name

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """Saves the offset reached by the last epoch."""
        return [writer.write(0, 0, json.dumps({"offset": self.offset}).encode(), 1)]

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """A source has nothing to commit (it does not acknowledge upstream)."""
        return

    def restore(self, snapshot: SnapshotRef | None, reader: ChunkReader) -> None:
        """Resumes from the saved offset, or from the start."""
        if snapshot is None or not snapshot.chunk_keys:
            self.offset = self.source.initial_offset()
            return
        data = json.loads(reader.read_chunk(snapshot.map_name, snapshot.chunk_keys[0]))
        self.offset = data["offset"]
        _log.info("Restored source name=%s offset=%s", self._name, json.dumps(self.offset))


class SequenceSource(Source):
    """A deterministic sequence 0, 1, 2, ... with an event time, for tests and benchmarks.

    Row ``n`` is ``value = n`` and ``timestamp = n * event_time_step_ms`` milliseconds after the
    Unix epoch, whatever the epoch boundaries: a replay yields the same rows.

    Args:
        rows_per_epoch: Rows each epoch reads (exclusive with ``rows_per_second``).
        rows_per_second: Paces the sequence in wall-clock time; the start time is part of the
            offset, so a restored job catches up instead of starting over.
        end: Stop after ``end`` rows; None for an endless sequence.
        max_rows_per_epoch: Caps an epoch when a paced sequence catches up.
        event_time_step_ms: Event-time distance between consecutive rows.
        partitions: Spark partitions of each batch.
    """

    def __init__(
        self,
        *,
        rows_per_epoch: int | None = None,
        rows_per_second: float | None = None,
        end: int | None = None,
        max_rows_per_epoch: int = 1_000_000,
        event_time_step_ms: int = 1000,
        partitions: int = 2,
    ) -> None:
        if (rows_per_epoch is None) == (rows_per_second is None):
            raise ValueError("Give exactly one of rows_per_epoch and rows_per_second")
        if (rows_per_epoch or 1) <= 0 or (rows_per_second or 1) <= 0:
            raise ValueError("The sequence's rate must be positive")
        self.rows_per_epoch = rows_per_epoch
        self.rows_per_second = rows_per_second
        self.end = end
        self.max_rows_per_epoch = max_rows_per_epoch
        self.event_time_step_ms = event_time_step_ms
        self.partitions = partitions
        # A paced sequence's clock, from the first look at an offset that has none: the offset
        # only carries it once a row was read, so it must outlive the epochs that read nothing.
        self._clock_started_ms: int | None = None

    def schema(self, spark: SparkSession) -> StructType:
        """``value long, timestamp timestamp``."""
        return StructType(
            [StructField("value", LongType(), False), StructField("timestamp", TimestampType())]
        )

    def initial_offset(self) -> Offset:
        """Nothing read yet; a paced sequence starts its clock on the first epoch."""
        return {"next": 0, "startedMs": None}

    def next_offset(self, offset: Offset) -> Offset | None:
        """Advances by the rate, capped by ``end`` and ``max_rows_per_epoch``."""
        first = int(offset["next"])
        started = offset["startedMs"]
        if self.rows_per_epoch is not None:
            last = first + self.rows_per_epoch
        else:
            assert self.rows_per_second is not None
            if started is None:
                if self._clock_started_ms is None:
                    self._clock_started_ms = int(time.time() * 1000)
                started = self._clock_started_ms
            elapsed_s = max(0.0, time.time() - started / 1000)
            last = int(elapsed_s * self.rows_per_second)
        last = min(last, first + self.max_rows_per_epoch)
        if self.end is not None:
            last = min(last, self.end)
        if last <= first:
            return None
        return {"next": last, "startedMs": started}

    def is_exhausted(self, offset: Offset) -> bool:
        """True once ``end`` rows were read."""
        return self.end is not None and int(offset["next"]) >= self.end

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """Values ``start.next`` to ``end.next - 1``."""
        rows = spark.range(int(start["next"]), int(end["next"]), numPartitions=self.partitions)
        return rows.select(
            F.col("id").alias("value"),
            F.timestamp_millis(F.col("id") * F.lit(self.event_time_step_ms)).alias("timestamp"),
        )


FILE_FORMATS = ("json", "csv", "parquet", "text")


class FileSource(Source):
    """Files in a directory, read in name order; each file is read once, whole.

    Producers must add files atomically (write elsewhere or under a name starting with ``.``
    or ``_``, then rename) and in increasing name order: the offset is the last file name
    read, so a file appearing with a smaller name is never read.

    Args:
        directory: The directory to watch (local or shared filesystem).
        fmt: ``json``, ``csv``, ``parquet`` or ``text``.
        schema: The rows' schema; required except for ``text`` (``value string``).
        max_files_per_epoch: Files per epoch at most.
        options: Spark reader options, e.g. ``{"header": "true"}`` for csv.
        bounded: End the job once every file in the directory has been read, instead of
            waiting for more.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        fmt: str,
        schema: StructType | str | None = None,
        *,
        max_files_per_epoch: int = 100,
        options: Mapping[str, str] | None = None,
        bounded: bool = False,
    ) -> None:
        if fmt not in FILE_FORMATS:
            raise ValueError(f"File format {fmt!r} is not one of {FILE_FORMATS}")
        if schema is None and fmt != "text":
            raise ValueError(f"A {fmt} file source needs a schema, so every epoch reads the same")
        self.directory = Path(directory)
        self.fmt = fmt
        self._schema = schema
        self.max_files_per_epoch = max_files_per_epoch
        self.options = dict(options or {})
        self.bounded = bounded

    def schema(self, spark: SparkSession) -> StructType:
        """The given schema (``value string`` for text)."""
        if self._schema is None:
            return StructType([StructField("value", StringType())])
        if isinstance(self._schema, str):
            parsed: StructType = spark.createDataFrame([], self._schema).schema
            return parsed
        return self._schema

    def initial_offset(self) -> Offset:
        """No file read yet."""
        return {"last": None}

    def _names_after(self, last: str | None) -> list[str]:
        if not self.directory.is_dir():
            return []
        names = sorted(
            entry.name
            for entry in os.scandir(self.directory)
            if entry.is_file() and not entry.name.startswith((".", "_"))
        )
        return [name for name in names if last is None or name > last]

    def next_offset(self, offset: Offset) -> Offset | None:
        """The name of the last of the next ``max_files_per_epoch`` files."""
        names = self._names_after(offset["last"])[: self.max_files_per_epoch]
        return {"last": names[-1]} if names else None

    def is_exhausted(self, offset: Offset) -> bool:
        """A bounded source ends when no unread file is left; otherwise never."""
        return self.bounded and not self._names_after(offset["last"])

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """The files named after ``start.last`` up to ``end.last``."""
        names = [n for n in self._names_after(start["last"]) if n <= end["last"]]
        paths = [str(self.directory / name) for name in names]
        reader = spark.read.format(self.fmt).options(**self.options).schema(self.schema(spark))
        return reader.load(paths)


def jdbc_url(dsn: str) -> tuple[str, dict[str, str]]:
    """Returns the JDBC URL and connection properties for a libpq ``dsn``."""
    parts = conninfo_to_dict(dsn)
    host = parts.get("host", "localhost")
    port = parts.get("port", "5432")
    url = f"jdbc:postgresql://{host}:{port}/{parts.get('dbname', 'postgres')}"
    properties = {"driver": "org.postgresql.Driver"}
    for libpq, jdbc in (("user", "user"), ("password", "password")):
        if parts.get(libpq):
            properties[jdbc] = str(parts[libpq])
    return url, properties


class PostgresSource(Source):
    """A PostgreSQL table read by an increasing id column, through Spark's JDBC reader.

    The offset is the highest id read. Rows must get ids in commit order (e.g. one writer, or
    ids assigned at commit): a row committed later with a smaller id than one already read is
    never read.

    Args:
        dsn: libpq connection string of the database.
        table: The table (optionally schema-qualified).
        id_column: The increasing integer id column.
        max_rows_per_epoch: Rows per epoch at most.
        bounded: End the job once every row present has been read, instead of waiting.
    """

    def __init__(
        self,
        dsn: str,
        table: str,
        id_column: str = "id",
        *,
        max_rows_per_epoch: int = 10_000,
        bounded: bool = False,
    ) -> None:
        self.dsn = dsn
        self.bounded = bounded
        self.table = table
        self.id_column = id_column
        self.max_rows_per_epoch = max_rows_per_epoch
        self._schema: StructType | None = None

    def _query(self, spark: SparkSession, sql: str) -> DataFrame:
        url, properties = jdbc_url(self.dsn)
        return (
            spark.read.format("jdbc")
            .option("url", url)
            .option("query", sql)
            .options(**properties)
            .load()
        )

    def schema(self, spark: SparkSession) -> StructType:
        """The table's columns, as Spark's JDBC reader maps them."""
        if self._schema is None:
            self._schema = self._query(spark, f"SELECT * FROM {self.table} WHERE false").schema
        return self._schema

    def initial_offset(self) -> Offset:
        """Before the smallest id."""
        return {"lastId": None}

    def next_offset(self, offset: Offset) -> Offset | None:
        """The id of the ``max_rows_per_epoch``-th row after the offset, or the last one."""
        last = offset["lastId"]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            row = conn.execute(
                f"SELECT max({self.id_column}) FROM (SELECT {self.id_column} FROM {self.table} "
                f"WHERE %(last)s::bigint IS NULL OR {self.id_column} > %(last)s::bigint "
                f"ORDER BY {self.id_column} LIMIT %(limit)s) AS next_rows",
                {"last": last, "limit": self.max_rows_per_epoch},
            ).fetchone()
        if row is None or row[0] is None:
            return None
        return {"lastId": int(row[0])}

    def is_exhausted(self, offset: Offset) -> bool:
        """A bounded source ends when no unread row is left; otherwise never."""
        return self.bounded and self.next_offset(offset) is None

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """Rows with ``start.lastId < id <= end.lastId``."""
        lower = "" if start["lastId"] is None else f"{self.id_column} > {int(start['lastId'])} AND "
        sql = f"SELECT * FROM {self.table} WHERE {lower}{self.id_column} <= {int(end['lastId'])}"
        return self._query(spark, sql)
