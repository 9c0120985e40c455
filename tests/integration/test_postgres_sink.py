"""The two-phase-commit PostgreSQL sink when Spark runs a task again after it prepared.

An executor lost between a task's ``PREPARE TRANSACTION`` and the driver hearing of the task
leaves that transaction prepared, holding its row locks, and Spark runs the task again on
another executor. Each test leaves the database exactly as such lost attempts would (for every
sink partition a transaction prepared under an attempt's gid, with that partition's rows) and
then runs the sink's real ``prepare`` and ``commit`` on the session's Spark (``local[2]``)
against the session's real PostgreSQL server: the new attempts must not wait for the old
transactions' locks, only the new attempts' rows may commit, and no attempt may roll back a
newer attempt's transaction.
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


LOST_ATTEMPT = 0
"""The task attempt id of the lost attempts: below every id the session's Spark hands out to
the attempts a test runs after it (the test's own earlier job took 0 already)."""


def _leave_lost_attempts(
    dsn: str, sink: PostgresSink, statement: str, rows: dict, attempt: int = LOST_ATTEMPT
) -> list[str]:
    """Prepares each partition's rows under the gid of task attempt ``attempt``, as attempts
    lost after ``PREPARE TRANSACTION`` left them; returns the gids."""
    gids = []
    for partition, values in rows.items():
        with psycopg.connect(dsn) as conn:
            with conn.cursor() as cursor:
                cursor.executemany(statement, values)
            gid = sink.gid(SNAPSHOT_ID, partition, attempt)
            conn.execute(sql.SQL("PREPARE TRANSACTION {}").format(sql.Literal(gid)))
            gids.append(gid)
    return gids


def _partition_of(gid: str) -> int:
    """The sink partition a gid names (``...:<snapshot>:<partition>:<attempt>``)."""
    return int(gid.rsplit(":", 2)[1])


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

    assert sorted(map(_partition_of, gids)) == sorted(by_partition)
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


def test_an_older_attempt_never_rolls_back_a_newer_one(spark: SparkSession, dsn: str) -> None:
    """A transaction of a newer attempt (a larger task attempt id) stays prepared while the
    snapshot's tasks run: it may be the one the driver commits, while an older attempt still
    runs on a lost executor. The commit then rolls it back, as not one of the snapshot's."""
    sink = PostgresSink(dsn, "events")
    events = spark.range(KEYS).select(F.col("id"))
    sink.open(events.schema, JOB_UID, "events")
    insert = "INSERT INTO events (id) VALUES (%s)"
    newer = _leave_lost_attempts(
        dsn, sink, insert, _partitions_of(events, sink, ["id"]), attempt=2**62
    )

    gids = _prepare_within_bound(sink, events)

    assert set(newer) <= set(sink.prepared()), "an older attempt rolled back a newer one"
    assert not set(newer) & set(gids)
    # Once the snapshot commits, no attempt of its tasks runs any more: the strays go.
    sink.commit(gids)
    assert sink.prepared() == [], "a superseded attempt's transaction is still prepared"
    with psycopg.connect(dsn) as conn:
        ids = [row[0] for row in conn.execute("SELECT id FROM events ORDER BY id").fetchall()]
    assert ids == list(range(KEYS)), "an event is missing or published twice"
