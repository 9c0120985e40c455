"""Sequence sum: a generated sequence, a running sum per key, PostgreSQL with two-phase commit.

The expected result is known in closed form (key k gets every value n < end with n % keys ==
k), which is why the exactly-once chaos test uses this pipeline: any lost or duplicated
output shows up as a wrong sum.

Sums alone can hide a fault that loses one event and repeats another of the same key and
value, and an upserting sink hides repeated output by design. So ``events_table`` adds a
second sink that makes every event visible: each input value is appended as one row with
the value as its event id, in a table without any unique constraint, so a replayed event is
a second row with the same id and a lost one a missing id.

Arguments (``--arg key=value``): ``dsn`` (required), ``table`` [sums], ``keys`` [10], ``end``
[100000], ``rows_per_epoch`` [1000], ``rows_per_second`` [none]: pace the sequence in
wall-clock time instead of reading ``rows_per_epoch`` rows each epoch (``make demo`` does, to
run for minutes), ``max_rows_per_epoch`` [1000000]: cap a paced epoch (a slow machine then
takes more epochs instead of one burst), ``sink_mode`` [upsert]: ``append`` inserts every
output row instead of upserting by key, a sink that is not idempotent; ``events_table``
[none]: also append one row ``(id)`` per input value to this table (two-phase commit too).
"""

from __future__ import annotations

from dataclasses import dataclass

import psycopg
from psycopg import sql
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import PostgresSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline


def expected_sums(end: int, keys: int) -> dict[int, tuple[int, int]]:
    """Returns key -> (total, count) for the values 0 .. end - 1."""
    result: dict[int, tuple[int, int]] = {}
    for key in range(min(keys, end)):
        values = range(key, end, keys)
        result[key] = (sum(values), len(values))
    return result


@dataclass(frozen=True)
class EventIds:
    """What an events table holds against the ids 0 .. end - 1 it must hold once each.

    Attributes:
        rows: Rows in the table.
        missing: Ids in 0 .. end - 1 without a row: lost events.
        repeated: Rows beyond the first for an id: events published more than once.
        strays: Distinct ids outside 0 .. end - 1.
        examples: Up to 10 ``(id, rows)`` of repeated ids, for messages.
    """

    rows: int
    missing: int
    repeated: int
    strays: int
    examples: tuple[tuple[int, int], ...]

    @property
    def exact(self) -> bool:
        """Every id once, nothing else."""
        return self.missing == self.repeated == self.strays == 0


def check_event_ids(dsn: str, table: str, end: int) -> EventIds:
    """Counts the missing, repeated and stray ids of an ``events_table`` after a run to ``end``."""
    name = sql.Identifier(*table.split("."))
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            sql.SQL(
                "SELECT count(*), count(DISTINCT id), "
                "count(DISTINCT id) FILTER (WHERE id >= 0 AND id < %s) FROM {}"
            ).format(name),
            (end,),
        ).fetchone()
        examples = conn.execute(
            sql.SQL(
                "SELECT id, count(*) FROM {} GROUP BY id HAVING count(*) > 1 ORDER BY id LIMIT 10"
            ).format(name)
        ).fetchall()
    rows, distinct, in_range = row if row is not None else (0, 0, 0)
    return EventIds(
        rows=rows,
        missing=end - in_range,
        repeated=rows - distinct,
        strays=distinct - in_range,
        examples=tuple((int(i), int(n)) for i, n in examples),
    )


def define_pipeline(p: Pipeline) -> None:
    """Sequence -> key = value % keys -> running sum and count -> PostgreSQL."""
    args = p.args
    keys = int(args.get("keys", 10))
    end = int(args.get("end", 100_000))
    rate = args.get("rows_per_second")
    source = (
        SequenceSource(
            rows_per_second=float(rate),
            end=end,
            max_rows_per_epoch=int(args.get("max_rows_per_epoch", 1_000_000)),
        )
        if rate
        else SequenceSource(rows_per_epoch=int(args.get("rows_per_epoch", 1000)), end=end)
    )
    numbers = p.readStream(source, name="numbers")
    sums = (
        numbers.select((F.col("value") % keys).alias("key"), F.col("value"))
        .groupBy("key")
        .agg(F.sum("value").alias("total"), F.count("*").alias("count"), name="sums")
    )
    append = args.get("sink_mode", "upsert") == "append"
    sink = PostgresSink(str(args["dsn"]), str(args.get("table", "sums")), () if append else ["key"])
    sums.writeStream(sink, name="postgres")
    events_table = args.get("events_table")
    if events_table:
        # No key: rows are appended, and the table gets no constraint that could hide a repeat.
        events = numbers.select(F.col("value").alias("id"))
        events.writeStream(PostgresSink(str(args["dsn"]), str(events_table)), name="events")
