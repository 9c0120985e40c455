"""The two-phase-commit PostgreSQL sink when Spark runs a task again after it prepared.

An executor lost between a task's ``PREPARE TRANSACTION`` and the driver hearing of the task
leaves that transaction prepared, holding its row locks, and Spark runs the task again on
another executor. Each test leaves the database exactly as such a lost attempt would (a
transaction prepared under the gid of every sink partition, with that partition's rows) and
then runs the sink's real ``prepare`` on the session's Spark (``local[2]``) against the
session's real PostgreSQL server: the new attempts must neither wait for the old
transactions' locks nor fail on their names, and only the new attempts' rows may commit.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import PostgresSink

pytestmark = pytest.mark.timeout(300)

JOB_UID = "b6f1c0de-0000-4000-8000-000000000001"
SNAPSHOT_ID = 7
KEYS = 40
PREPARE_WAIT_S = 60.0


def _partitions_of(frame: DataFrame, sink: PostgresSink, columns: list[str]) -> dict[int, list]:
    """Which rows each sink partition writes: the sink's own repartitioning, read back."""
    ordered = (
        frame.repartition(sink.partitions, *sink.key)
        if sink.key
        else frame.repartition(sink.partitions)
    )
    rows: dict[int, list] = {}
    for row in ordered.withColumn("partition", F.spark_partition_id()).collect():
        rows.setdefault(int(row["partition"]), []).append(tuple(row[c] for c in columns))
    return rows


def _leave_lost_attempts(dsn: str, sink: PostgresSink, statement: str, rows: dict) -> None:
    """Prepares each partition's rows under its gid, as attempts lost after PREPARE did."""
    for partition, values in rows.items():
        with psycopg.connect(dsn) as conn:
            with conn.cursor() as cursor:
                cursor.executemany(statement, values)
            gid = sink.gid(SNAPSHOT_ID, partition)
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))


def _prepare_within_bound(sink: PostgresSink, frame: DataFrame) -> list[str]:
    """Runs ``sink.prepare`` in a thread and fails the test if it waits past the bound."""
    result: list[list[str]] = []
    errors: list[BaseException] = []

    def run() -> None:
        try:
            result.append(sink.prepare(frame, SNAPSHOT_ID))
        except BaseException as error:  # reported by the test, from its own thread
            errors.append(error)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(PREPARE_WAIT_S)
    if thread.is_alive():
        # Free the waiting tasks, so the session's Spark is usable by the tests after this.
        sink.abort(SNAPSHOT_ID)
        thread.join(PREPARE_WAIT_S)
        pytest.fail(f"prepare waited over {PREPARE_WAIT_S:.0f} s for the lost attempts' locks")
    if errors:
        raise errors[0]
    return result[0]


@pytest.fixture
def dsn(postgres_dsn: str) -> Iterator[str]:
    """The test's database; every transaction left prepared there is rolled back after it."""
    yield postgres_dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for (gid,) in conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall():
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def test_an_upserting_task_run_again_replaces_its_lost_attempt(
    spark: SparkSession, dsn: str
) -> None:
    """Upserts by key: the lost attempts hold every key's row lock; the retry writes anyway."""
    sink = PostgresSink(dsn, "sums", ["key"])
    first = spark.range(KEYS).select(F.col("id").alias("key"), F.lit(1).cast("long").alias("total"))
    sink.open(first.schema, JOB_UID, "postgres")
    sink.write(first)
    # What the lost attempts prepared: totals the retry must replace, not commit.
    lost = first.withColumn("total", F.lit(-1).cast("long"))
    update = "UPDATE sums SET total = %s WHERE key = %s"
    by_partition = {
        p: [(total, key) for key, total in rows]
        for p, rows in _partitions_of(lost, sink, ["key", "total"]).items()
    }
    _leave_lost_attempts(dsn, sink, update, by_partition)

    second = first.withColumn("total", F.col("key") * 10)
    gids = _prepare_within_bound(sink, second)
    sink.commit(gids)

    assert sorted(gids) == sorted(sink.gid(SNAPSHOT_ID, p) for p in by_partition)
    assert sink.prepared() == [], "the lost attempts' transactions are still prepared"
    with psycopg.connect(dsn) as conn:
        totals = dict(conn.execute("SELECT key, total FROM sums").fetchall())
    assert totals == {key: key * 10 for key in range(KEYS)}


def test_an_appending_task_run_again_publishes_each_row_once(spark: SparkSession, dsn: str) -> None:
    """Appends without a key: the lost attempts' rows must not commit beside the retry's."""
    sink = PostgresSink(dsn, "events")
    events = spark.range(KEYS).select(F.col("id"))
    sink.open(events.schema, JOB_UID, "events")
    insert = "INSERT INTO events (id) VALUES (%s)"
    _leave_lost_attempts(dsn, sink, insert, _partitions_of(events, sink, ["id"]))

    gids = _prepare_within_bound(sink, events)
    sink.commit(gids)

    assert sink.prepared() == [], "the lost attempts' transactions are still prepared"
    with psycopg.connect(dsn) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM events ORDER BY id").fetchall()]
    assert ids == list(range(KEYS)), "an event is missing or published twice"
