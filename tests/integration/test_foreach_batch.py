"""``stream.foreachBatch``: batches, their ids and the restore's repeat, on the real driver.

Under EXACTLY_ONCE a batch is the output one snapshot commits and its id is the snapshot's:
the function runs in phase 2, and a restore calls it again with the restore point's batch,
the same id and the same rows. The pipelines here run in-process on the session's Spark and
Hazelcast members (``runner``), so a function that records its calls in a list sees every call
of every execution. The guide's complete example (``docs/guides/custom-sources-and-sinks.md``,
"foreachBatch") is taken from the page and run as it is written: through the conformance kit,
and as a pipeline interrupted twice, against the session's real PostgreSQL server.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import export_map_name, snapshot_map_name
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline
from spark_runtime.testing.sink_conformance import (
    FOREACH_BATCH_SCENARIOS,
    SinkConformanceError,
    check_foreach_batch,
)
from tests.fixtures.in_process_driver import Build, Runner

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "custom-sources-and-sinks.md"
ROWS_PER_EPOCH = 100


def guide_example(marker: str) -> dict[str, Any]:
    """Runs the guide's Python block that contains ``marker``; returns what it defines."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    code = next(block for block in blocks if marker in block)
    namespace: dict[str, Any] = {"__name__": "guide_example"}
    exec(compile(code, str(GUIDE), "exec"), namespace)
    return namespace


class Calls:
    """A foreachBatch function that records every call: ``(batch id, sorted rows)``."""

    def __init__(self, column: str = "value", *, fail_first: int = 0) -> None:
        self.column = column
        self.calls: list[tuple[int, list[Any]]] = []
        self.failures_left = fail_first

    def __call__(self, batch: DataFrame, batch_id: int) -> None:
        rows = sorted(tuple(row) if len(row) > 1 else row[0] for row in batch.collect())
        self.calls.append((batch_id, rows))
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError(f"the destination is down (batch {batch_id})")

    def by_id(self) -> dict[int, list[Any]]:
        """The rows of each id; an id called again must have had the same rows."""
        rows: dict[int, list[Any]] = {}
        for batch_id, batch in self.calls:
            assert rows.setdefault(batch_id, batch) == batch, f"batch {batch_id} changed"
        return rows


def numbers(end: int, write: Callable[[Any], None]) -> Build:
    """``end`` numbers, ``ROWS_PER_EPOCH`` an epoch, handed to ``write(stream)``."""

    def define(p: Pipeline) -> None:
        stream = p.readStream(
            SequenceSource(rows_per_epoch=ROWS_PER_EPOCH, end=end), name="numbers"
        )
        write(stream.select("value"))

    return define


def job() -> str:
    return f"foreach-{uuid.uuid4().hex[:8]}"


def test_a_batch_is_a_snapshots_output_and_the_restore_calls_it_again(runner: Runner) -> None:
    calls = Calls()
    build = numbers(600, lambda s: s.foreachBatch(calls, name="out"))
    name = job()

    # A snapshot after every epoch, then stopped without one: three batches of one epoch each.
    assert runner.run(build, name, 0, 3) is DriverExit.INTERRUPTED
    first = list(calls.calls)
    assert [rows for _id, rows in first] == [
        list(range(n * ROWS_PER_EPOCH, (n + 1) * ROWS_PER_EPOCH)) for n in range(3)
    ]
    # No snapshot until the end: the restore's repeat, then one batch of the last three epochs.
    assert runner.run(build, name, 10**9) is DriverExit.COMPLETED
    second = calls.calls[len(first) :]

    assert second[0] == first[-1], "the restore calls the restore point's batch again, the same"
    assert [rows for _id, rows in second[1:]] == [list(range(300, 600))]
    ids = [batch_id for batch_id, _rows in calls.calls]
    assert ids == sorted(ids) and len(set(ids)) == len(ids) - 1, f"ids {ids}"
    by_id = calls.by_id()
    assert sorted(v for rows in by_id.values() for v in rows) == list(range(600))


class UidCalls:
    """A three-argument foreachBatch function recording ``(job uid, batch id, rows)``."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, int, int]] = []

    def __call__(self, batch: DataFrame, batch_id: int, job_uid: str) -> None:
        self.calls.append((job_uid, batch_id, batch.count()))


def test_a_job_started_from_an_export_hands_over_its_batch_under_the_exporters_uid(
    runner: Runner,
) -> None:
    calls = UidCalls()
    build = numbers(600, lambda s: s.foreachBatch(calls, name="out"))
    exporting, started = job(), job()
    assert runner.run(build, exporting, 0, 3) is DriverExit.INTERRUPTED
    exported = list(calls.calls)
    assert {uid for uid, _id, _rows in exported} == {exporting}
    # The export of the stopped job, as the operator copies a suspended job's restore point.
    record = FileRecordStore(runner.record_path(exporting), "").read()
    source = snapshot_map_name(exporting, record.data_map_index, record.data_map_backup_count)
    name = f"golden-{exporting}"
    runner.store.copy_snapshot(source, export_map_name("test", name), record.snapshot_id)

    assert runner.run(build, started, 10**9, initial_snapshot_name=name) is DriverExit.COMPLETED
    again, own = calls.calls[len(exported)], calls.calls[len(exported) + 1 :]
    # The export's batch again, "just in case", under the exporting job's uid and id: a
    # function keyed by (job uid, batch id) finds it applied.
    assert again == exported[-1]
    assert own and {uid for uid, _id, _rows in own} == {started}
    # The new job numbers its own batches from 0 again: the same ids as the exporter's.
    assert {batch_id for _uid, batch_id, _rows in own} & {b for _u, b, _r in exported}
    assert sum(rows for _uid, _id, rows in exported + own) == 600


def test_a_failing_function_restarts_the_job_and_the_restore_retries_the_batch(
    runner: Runner,
) -> None:
    calls = Calls(fail_first=1)
    build = numbers(300, lambda s: s.foreachBatch(calls, name="out"))
    name = job()

    assert runner.run(build, name, 0) is DriverExit.TRANSIENT_FAILURE
    assert len(calls.calls) == 1, "phase 2 stopped at the failed call"
    assert runner.run(build, name, 0) is DriverExit.COMPLETED

    failed_id, failed_rows = calls.calls[0]
    assert calls.calls[1] == (failed_id, failed_rows), "the restore retries the same batch"
    by_id = calls.by_id()
    assert sorted(v for rows in by_id.values() for v in rows) == list(range(300))


def test_with_a_key_a_batch_holds_each_keys_latest_row(runner: Runner) -> None:
    calls = Calls()

    def write(stream: Any) -> None:
        sums = (
            stream.withColumn("key", F.col("value") % 3)
            .groupBy("key")
            .agg(F.sum("value").alias("total"), name="sums")
        )
        sums.foreachBatch(calls, name="out", key=["key"])

    assert runner.run(numbers(500, write), job(), 10**9) is DriverExit.COMPLETED

    # Five epochs in one batch: a row per key, its total after the last epoch.
    totals = {k: sum(v for v in range(500) if v % 3 == k) for k in range(3)}
    assert [rows for _id, rows in calls.calls] == [sorted(totals.items())]


def test_a_batch_without_rows_is_not_handed_over(runner: Runner) -> None:
    calls = Calls()
    build = numbers(300, lambda s: s.filter(F.col("value") < 0).foreachBatch(calls, name="out"))

    assert runner.run(build, job(), 0) is DriverExit.COMPLETED
    assert calls.calls == []


def test_at_least_once_calls_every_epoch_with_ids_that_only_grow(runner: Runner) -> None:
    calls = Calls()
    build = numbers(300, lambda s: s.foreachBatch(calls, name="out"))

    assert runner.run(build, job(), 0, None, ProcessingGuarantee.AT_LEAST_ONCE) is (
        DriverExit.COMPLETED
    )

    assert [rows for _id, rows in calls.calls] == [
        list(range(n * ROWS_PER_EPOCH, (n + 1) * ROWS_PER_EPOCH)) for n in range(3)
    ]
    ids = [batch_id for batch_id, _rows in calls.calls]
    assert ids == sorted(set(ids)), "ids grow and never repeat"
    assert ids[0] > 10**15, "a time in microseconds, never a snapshot's id"


# --- the guide's example, as written ---------------------------------------------------------


@pytest.fixture
def dsn(postgres_dsn: str) -> Iterator[str]:
    """The test's database, with the kit's table."""
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE kit_rows (key text, value text)")
    yield postgres_dsn


def column(dsn: str, table: str, name: str) -> list[Any]:
    """Every committed value of one column."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        query = sql.SQL("SELECT {} FROM {}").format(sql.Identifier(name), sql.Identifier(table))
        return [row[0] for row in conn.execute(query)]


def test_the_guides_function_passes_the_kit(spark: SparkSession, dsn: str) -> None:
    insert_once = guide_example("def insert_once")["insert_once"]

    passed = check_foreach_batch(
        lambda: insert_once(dsn, "kit_rows", "kit"), lambda: column(dsn, "kit_rows", "value"), spark
    )

    assert passed == list(FOREACH_BATCH_SCENARIOS)


def test_a_function_that_ignores_the_id_fails_the_kit(spark: SparkSession) -> None:
    table: list[str] = []

    def append(batch: DataFrame, batch_id: int) -> None:
        # Row by row, a partition at a time: a batch that fails midway leaves its first rows.
        table.extend(row["value"] for row in batch.toLocalIterator())

    with pytest.raises(SinkConformanceError) as error:
        check_foreach_batch(lambda: append, lambda: table, spark)

    failures = {failure.scenario: failure.problem for failure in error.value.failures}
    assert sorted(failures) == ["call-twice", "fails-midway", "older-after-newer"]
    twice = "after batch 2 twice: expected each of its 6 rows once, but 6 seen twice"
    assert twice in failures["call-twice"]
    assert "after batch 5 failed midway, then batch 5 again" in failures["fails-midway"]
    assert "seen twice" in failures["fails-midway"]


def test_the_guides_pipeline_writes_every_event_once_through_interruptions(
    runner: Runner, dsn: str
) -> None:
    define_pipeline = guide_example("def define_pipeline")["define_pipeline"]
    end = 6000  # six epochs: three, two without a snapshot, one

    def build(p: Pipeline) -> None:
        p.args.update(dsn=dsn, end=end)
        define_pipeline(p)

    runner.interrupted(build, job(), ProcessingGuarantee.EXACTLY_ONCE)

    ids = sorted(column(dsn, "events", "id"))
    assert ids == list(range(end)), "an event is missing or written twice"
    assert column(dsn, "applied_batches", "sink") != []
