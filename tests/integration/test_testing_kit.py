"""The test kit (``spark_runtime.testing``): memory source and sink, crashes, exactly-once checks.

The kit's promise is that a pipeline author's test, run in one process with only the installed
package, sees what a crashed and restored job in production would: so these tests crash a
pipeline with keyed state at the protocol steps that matter for output and check that its totals
and its event ids come out exact; that sinks which break two-phase commit are caught by
``assert_exactly_once``; and that the example pipeline's own tests (``examples/word_stats``) pass
as a user runs them, with the plugin found through its entry point.

The kit's fixtures come from its plugin (the ``snapshotjob`` entry point); ``snapshotjob_spark``
is overridden here to be the suite's own ``spark``, as the plugin's docstring tells a suite with
its own session fixture to do, so the suite keeps one SparkSession.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spark import JVM_CHUNKS_CONF
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.sinks import EPOCH_COLUMN, PostgresSink
from spark_runtime.sources import FileSource
from spark_runtime.streaming import Pipeline
from spark_runtime.testing import (
    FailpointNotReached,
    MemorySink,
    MemorySource,
    PipelineRunFailed,
    PipelineTest,
    PipelineTestFactory,
    assert_exactly_once,
    check_ids,
    every_failpoint,
    local_spark,
)

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]

EVENTS = 24
KEYS = 4


@pytest.fixture(scope="session")
def snapshotjob_spark(spark: SparkSession) -> SparkSession:
    """The kit runs on the suite's own session (see the module docstring)."""
    return spark


def events(first: int = 0, count: int = EVENTS) -> list[dict[str, Any]]:
    """Events with ids ``first`` ..., a key and an amount."""
    return [{"id": i, "key": f"k{i % KEYS}", "amount": (i * 7) % 11} for i in range(first, count)]


def expected_totals(sent: list[dict[str, Any]]) -> dict[str, tuple[int, int]]:
    """Key -> (sum of amounts, events)."""
    totals: dict[str, tuple[int, int]] = {}
    for event in sent:
        total, count = totals.get(event["key"], (0, 0))
        totals[event["key"]] = (total + event["amount"], count + 1)
    return totals


def define_pipeline(p: Pipeline) -> None:
    """Events from files -> running totals per key -> PostgreSQL; every event's id too.

    The production source and sinks are never used here: the tests put memory ones in their
    place by name, as a pipeline author's tests do with their module.
    """
    incoming = p.readStream(
        FileSource(str(p.args["input"]), "json", "id long, key string, amount long"),
        name="events",
    )
    totals = incoming.groupBy("key").agg(
        F.sum("amount").alias("total"), F.count("*").alias("count"), name="totals"
    )
    totals.writeStream(PostgresSink(str(p.args["dsn"]), "totals", ["key"]), name="totals_out")
    incoming.select("id").writeStream(PostgresSink(str(p.args["dsn"]), "ids"), name="ids")


ARGS = {"input": "unused", "dsn": "unused"}


def totals_of(sink: MemorySink) -> dict[str, tuple[int, int]]:
    return {k: (row["total"], row["count"]) for k, row in sink.latest("key").items()}


def job_of(
    pipeline_test: PipelineTestFactory,
    source: MemorySource,
    ids: MemorySink | None = None,
    **options: Any,
) -> tuple[PipelineTest, MemorySink, MemorySink]:
    totals, ids = MemorySink(), ids if ids is not None else MemorySink()
    job = pipeline_test(
        define_pipeline,
        args=ARGS,
        sources={"events": source},
        sinks={"totals_out": totals, "ids": ids},
        **options,
    )
    return job, totals, ids


# --- crashes at the steps that matter for output -----------------------------------------------

# What each crash leaves prepared in a sink, for the next restore to settle (the table in
# docs/guides/testing-pipelines.md).
LEFT_PREPARED = {
    "take.after_step_4": True,  # phase 1 done, not recorded: the restore rolls it back
    "take.after_step_7": True,  # recorded, phase 2 not run: the restore commits it
    "take.after_step_9": False,  # phase 2 done
    "restore.before_step_5": False,  # a restore cut short before the participants
}


@pytest.mark.parametrize("failpoint", list(LEFT_PREPARED))
def test_a_crash_at_a_protocol_step_keeps_totals_and_ids_exact(
    pipeline_test: PipelineTestFactory, failpoint: str
) -> None:
    sent = events()
    job, totals, ids = job_of(pipeline_test, MemorySource(sent, rows_per_epoch=8))
    # Two epochs with a snapshot each: state and committed output behind the crash.
    assert job.run(epochs=2).exit is DriverExit.INTERRUPTED
    assert sorted(r["id"] for r in ids.rows()) == list(range(16))

    crash = job.crash_at(failpoint)

    assert crash.exit is DriverExit.FAILPOINT_CRASH and crash.failpoint == failpoint
    assert bool(ids.prepared_transactions) is LEFT_PREPARED[failpoint]
    # Honest: what is only prepared is not visible.
    visible = {r["id"] for r in ids.rows()}
    assert len(visible) == len(ids.rows()) and visible <= set(range(EVENTS))
    done = job.run()
    assert done.exit is DriverExit.COMPLETED
    assert totals_of(totals) == expected_totals(sent)
    assert_exactly_once(ids, "id", expected_ids=range(EVENTS))
    assert not ids.prepared_transactions and not totals.prepared_transactions
    assert job.record.snapshot_id > 0


def test_crashes_at_every_failpoint_in_turn_leave_the_output_exact(
    pipeline_test: PipelineTestFactory,
) -> None:
    """One job crashed at each of the 30 steps, one after the other: each restore starts from
    what the crashes before it left."""
    sent = events(count=40)
    # Ten epochs: the seven crashes after the snapshot is recorded keep one epoch each.
    job, totals, ids = job_of(pipeline_test, MemorySource(sent, rows_per_epoch=4))

    for failpoint in every_failpoint():
        job.crash_at(failpoint)
    job.run()

    assert len(job.executions) == 31
    assert totals_of(totals) == expected_totals(sent)
    assert_exactly_once(ids, "id", expected_ids=range(40))
    assert not ids.prepared_transactions


def test_at_least_once_repeats_what_a_crash_replays_and_loses_nothing(
    pipeline_test: PipelineTestFactory,
) -> None:
    """The memory sink's write path: under AT_LEAST_ONCE every epoch is visible at once, so the
    epoch after the restore point is written again."""
    job, _totals, ids = job_of(
        pipeline_test,
        MemorySource(events(count=24), rows_per_epoch=8),
        guarantee=ProcessingGuarantee.AT_LEAST_ONCE,
    )
    job.crash_at("take.after_step_4", occurrence=2)
    job.run()

    report = check_ids(ids, "id", range(24))
    assert not report.missing and not report.strays
    assert set(report.repeated) == set(range(8, 16))
    assert all(batch.snapshot_id is None for batch in ids.committed_batches)


# --- sinks that break two-phase commit are caught -----------------------------------------------


class PublishesInPrepare(MemorySink):
    """Broken: makes its output visible in phase 1, before the snapshot is recorded."""

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        transaction_ids = super().prepare(frame, snapshot_id)
        self.commit(transaction_ids)
        return transaction_ids


class WritesInPrepareAndCommit(MemorySink):
    """Broken: writes in phase 1 and again when phase 2 commits."""

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        self.write(frame)
        return super().prepare(frame, snapshot_id)


class RollsBackOnRecover(MemorySink):
    """Broken: a restore rolls back even the restored snapshot's transactions."""

    def recover(
        self, committed: list[str] | Any, through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        rolled_back = self.prepared_transactions
        self.rollback(rolled_back)
        return [], rolled_back


def test_a_sink_publishing_in_phase_one_repeats_output_after_a_crash(
    pipeline_test: PipelineTestFactory,
) -> None:
    job, _totals, ids = job_of(
        pipeline_test, MemorySource(events(count=24), rows_per_epoch=8), PublishesInPrepare()
    )
    job.crash_at("take.after_step_4", occurrence=2)
    job.run()

    with pytest.raises(AssertionError, match=r"sink 'ids' is not exactly once .*8 ids repeated"):
        assert_exactly_once(ids, "id", expected_ids=range(24))


def test_a_sink_writing_in_both_phases_repeats_output_without_any_crash(
    pipeline_test: PipelineTestFactory,
) -> None:
    job, _totals, ids = job_of(
        pipeline_test, MemorySource(events(count=8), rows_per_epoch=4), WritesInPrepareAndCommit()
    )
    job.run()

    with pytest.raises(AssertionError, match=r"8 ids repeated .*: 0 x2, 1 x2"):
        assert_exactly_once(ids, "id", expected_ids=range(8))


def test_a_sink_rolling_back_the_restored_snapshot_loses_its_output(
    pipeline_test: PipelineTestFactory,
) -> None:
    job, _totals, ids = job_of(
        pipeline_test, MemorySource(events(count=24), rows_per_epoch=8), RollsBackOnRecover()
    )
    job.crash_at("take.after_step_7", occurrence=2)
    job.run()

    with pytest.raises(AssertionError, match=r"8 ids missing \(lost\): 8, 9, 10"):
        assert_exactly_once(ids, "id", expected_ids=range(24))


# --- the harness ---------------------------------------------------------------------------------


def test_an_unbounded_source_stops_when_idle_and_goes_on_after_add(
    pipeline_test: PipelineTestFactory,
) -> None:
    source = MemorySource(events(count=10), bounded=False)
    job, totals, ids = job_of(pipeline_test, source)

    assert job.run().exit is DriverExit.TERMINATED
    source.add(events(10, 16))
    source.add(events(16, 20))
    second = job.run()

    assert second.exit is DriverExit.TERMINATED and second.epochs == 2
    assert totals_of(totals) == expected_totals(events(count=20))
    assert_exactly_once(ids, "id", expected_ids=range(20))


def test_the_run_leaves_the_sessions_settings_as_it_found_them(
    pipeline_test: PipelineTestFactory, spark: SparkSession
) -> None:
    keys = (JVM_CHUNKS_CONF, "spark.sql.shuffle.partitions")
    before = {key: spark.conf.get(key, None) for key in keys}
    job, _totals, _ids = job_of(pipeline_test, MemorySource(events(count=4)), state_partitions=3)
    job.run()

    after = {key: spark.conf.get(key, None) for key in before}
    assert after == before
    assert local_spark() is spark, "the kit takes the active session, it starts no second one"


def test_a_failpoint_not_reached_fails_the_test(pipeline_test: PipelineTestFactory) -> None:
    job, _totals, _ids = job_of(pipeline_test, MemorySource(events(count=4), rows_per_epoch=2))

    with pytest.raises(FailpointNotReached, match=r"take.after_step_9 5 times: .*COMPLETED"):
        job.crash_at("take.after_step_9", occurrence=5)
    with pytest.raises(ValueError, match=r"unknown failpoint 'take\.after_step_11'"):
        job.crash_at("take.after_step_11")


def test_substitutes_must_name_the_pipelines_operators(pipeline_test: PipelineTestFactory) -> None:
    job = pipeline_test(
        define_pipeline,
        args=ARGS,
        sources={"event": MemorySource(events(count=2))},
        sinks={"totals_out": MemorySink(), "ids": MemorySink()},
    )
    with pytest.raises(PipelineRunFailed, match=r"BAD_INPUT .*: event; its sources are events"):
        job.run()
    with pytest.raises(TypeError, match=r"sources\['events'\] is a MemorySink"):
        pipeline_test(define_pipeline, args=ARGS, sources={"events": MemorySink()})  # type: ignore[dict-item]


def test_a_changed_pipeline_that_cannot_restore_the_snapshot_fails_with_78(
    snapshotjob_spark: SparkSession, tmp_path: Path
) -> None:
    substitutes: dict[str, Any] = {
        "sources": {"events": MemorySource(events(count=8), rows_per_epoch=4)},
        "sinks": {"totals_out": MemorySink(), "ids": MemorySink()},
    }
    first = PipelineTest(
        define_pipeline, tmp_path, spark=snapshotjob_spark, args=ARGS, **substitutes
    )
    first.run(epochs=1)

    def renamed(p: Pipeline) -> None:
        incoming = p.readStream(MemorySource(events(count=1)), name="events")
        totals = incoming.groupBy("key").agg(F.sum("amount").alias("total"), name="sums")
        totals.writeStream(MemorySink(), name="totals_out")
        incoming.select("id").writeStream(MemorySink(), name="ids")

    second = PipelineTest(renamed, tmp_path, spark=snapshotjob_spark, args=ARGS, **substitutes)
    with pytest.raises(PipelineRunFailed, match="SNAPSHOT_INCOMPATIBLE") as failed:
        second.run()
    assert failed.value.result.exit is DriverExit.SNAPSHOT_INCOMPATIBLE


# --- the memory source and sink, alone -----------------------------------------------------------


def test_the_memory_source_replays_any_range_and_cuts_epochs_by_batch_or_size(
    spark: SparkSession,
) -> None:
    source = MemorySource([{"id": 1, "word": "a"}, {"word": "b", "id": 2}])
    source.add([(3, "c")])
    sized = MemorySource([(i,) for i in range(5)], schema="n long", rows_per_epoch=2)

    assert source.schema(spark).simpleString() == "struct<id:bigint,word:string>"
    assert source.next_offset(source.initial_offset()) == {"rows": 2}
    assert source.next_offset({"rows": 2}) == {"rows": 3}
    assert source.next_offset({"rows": 3}) is None and source.is_exhausted({"rows": 3})
    read = [tuple(r) for r in source.read(spark, {"rows": 1}, {"rows": 3}).collect()]
    assert read == [(2, "b"), (3, "c")]
    assert [tuple(r) for r in source.read(spark, {"rows": 1}, {"rows": 3}).collect()] == read
    assert [sized.next_offset({"rows": n}) for n in (0, 2, 4, 5)] == [
        {"rows": 2},
        {"rows": 4},
        {"rows": 5},
        None,
    ]
    assert not MemorySource([(1,)], schema="n long", bounded=False).is_exhausted({"rows": 1})
    with pytest.raises(ValueError, match="needs schema="):
        MemorySource().schema(spark)
    with pytest.raises(ValueError, match=r"keys that are not columns: \['size'\]"):
        source.add([{"id": 4, "size": 1}])
        source.read(spark, {"rows": 3}, {"rows": 4})


def test_the_memory_sink_shows_committed_rows_only_once_and_in_epoch_order(
    spark: SparkSession,
) -> None:
    sink = MemorySink()
    sink.open(spark.createDataFrame([], "id long").schema, "job", "out")

    def frame(*rows: tuple[int, int]) -> DataFrame:
        return spark.createDataFrame(list(rows), f"id long, {EPOCH_COLUMN} long")

    assert sink.prepare(frame((5, 1), (4, 0)), 1) == ["sj:job:out:1"]
    assert sink.rows() == [] and sink.prepared_transactions == ["sj:job:out:1"]
    sink.commit(["sj:job:out:1"])
    sink.commit(["sj:job:out:1"])
    assert sink.rows() == [{"id": 4}, {"id": 5}]

    sink.prepare(frame((6, 2)), 2)
    sink.prepare(frame((7, 3)), 3)
    assert sink.roll_back_older(3) == ["sj:job:out:2"]
    assert sink.recover(["sj:job:out:3"], 3) == (["sj:job:out:3"], [])
    sink.prepare(frame((8, 4)), 4)
    sink.prepare(frame((9, 5)), 5)
    # Higher ids than the restore's can only be a newer execution's: left alone.
    assert sink.recover([], 4) == ([], ["sj:job:out:4"])
    assert sink.prepared_transactions == ["sj:job:out:5"]
    sink.abort(5)
    assert sink.write(frame((10, 6))) == 1

    assert [r["id"] for r in sink.rows()] == [4, 5, 7, 10]
    assert [b.snapshot_id for b in sink.committed_batches] == [1, 3, None]
    assert list(sink.to_pandas().columns) == ["id"]
    assert sink.latest("id")[10] == {"id": 10}


def test_the_id_check_names_missing_repeated_and_unexpected_ids() -> None:
    rows = [{"id": i} for i in (0, 1, 1, 2, 2, 2, 7)]

    report = check_ids(rows, "id", range(5))

    assert report.missing == (3, 4) and report.repeated == {1: 2, 2: 3} and report.strays == (7,)
    assert report.describe() == (
        "the output is not exactly once (7 rows): 2 ids missing (lost): 3, 4; "
        "2 ids repeated (published twice or more): 1 x2, 2 x3; 1 ids not expected: 7"
    )
    assert check_ids(rows[:2], "id").exact
    assert_exactly_once([{"id": "b"}, {"id": "a"}], "id", ["a", "b"])
    with pytest.raises(KeyError, match="no column 'event'"):
        check_ids(rows, "event")
    assert len(every_failpoint()) == 30 and len(every_failpoint("restore")) == 10


# --- the example pipeline's own tests, as its author runs them ----------------------------------


def test_the_example_pipelines_own_tests_pass_with_the_plugin_found_by_its_entry_point(
    pytestconfig: pytest.Config, tmp_path: Path
) -> None:
    """``pytest`` in a directory holding only the example (no checkout, no test bed, no
    conftest.py), with the package installed: the fixtures come from the entry point."""
    assert pytestconfig.pluginmanager.get_plugin("snapshotjob") is not None, (
        "pytest did not load the kit's plugin from the pytest11 entry point in pyproject.toml: "
        "the installed metadata predates it, run make install"
    )
    project = tmp_path / "project"
    shutil.copytree(REPO / "examples" / "word_stats", project / "examples" / "word_stats")
    shutil.copy(REPO / "examples" / "__init__.py", project / "examples" / "__init__.py")
    environment = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "SJ_FAILPOINTS")}

    tests = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "examples/word_stats"],
        cwd=project,
        env=environment,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )

    assert tests.returncode == 0, tests.stdout[-4000:] + tests.stderr[-2000:]
    assert "4 passed" in tests.stdout
