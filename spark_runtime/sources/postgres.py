"""A PostgreSQL table read by an increasing id: replayable because an id range is fixed.

Spark's JDBC reader reads the rows; psycopg only finds where the next range ends. This module
is the only source that needs psycopg and the JDBC driver jar.
"""

from __future__ import annotations

import psycopg
from psycopg.conninfo import conninfo_to_dict
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from spark_runtime.sources.base import Offset, Source


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
        # The rows of the range next_offset found last, counted by the same query, so the
        # rows-read metric costs nothing more: ((start id, end id), rows).
        self._counted: tuple[tuple[int | None, int], int] | None = None

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
                f"SELECT max({self.id_column}), count(*) FROM (SELECT {self.id_column} "
                f"FROM {self.table} "
                f"WHERE %(last)s::bigint IS NULL OR {self.id_column} > %(last)s::bigint "
                f"ORDER BY {self.id_column} LIMIT %(limit)s) AS next_rows",
                {"last": last, "limit": self.max_rows_per_epoch},
            ).fetchone()
        if row is None or row[0] is None:
            return None
        self._counted = ((last, int(row[0])), int(row[1]))
        return {"lastId": int(row[0])}

    def rows_between(self, start: Offset, end: Offset) -> int | None:
        """The rows :meth:`next_offset` counted for this range; None for another range."""
        counted = self._counted
        if counted is None or counted[0] != (start["lastId"], end["lastId"]):
            return None
        return counted[1]

    def is_exhausted(self, offset: Offset) -> bool:
        """A bounded source ends when no unread row is left; otherwise never."""
        return self.bounded and self.next_offset(offset) is None

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """Rows with ``start.lastId < id <= end.lastId``."""
        lower = "" if start["lastId"] is None else f"{self.id_column} > {int(start['lastId'])} AND "
        sql = f"SELECT * FROM {self.table} WHERE {lower}{self.id_column} <= {int(end['lastId'])}"
        return self._query(spark, sql)
