"""The sink conformance kit: a sink's protocol calls under crashes, checked at its destination.

Why: a sink is exactly once only if it keeps its contract
(``docs/guides/custom-sources-and-sinks.md``) through every crash the protocol survives, and a
pipeline test rarely crashes at each of those points. The kit makes the participants' calls in
the orders crashes produce, on small batches of rows whose ``value`` is unique, and reads the
destination after each step: a row seen twice is a duplicate, a row missing a loss, a row seen
before its commit a dirty read. A sink author runs it from their own pytest::

    from spark_runtime.testing.sink_conformance import check_transactional_sink

    def test_my_sink_conforms(snapshotjob_spark, tmp_path):
        check_transactional_sink(
            lambda: MySink(tmp_path / "out"),  # a new instance is a new process
            lambda: [row["value"] for row in read_my_output(tmp_path / "out")],
            snapshotjob_spark,
        )

``make_sink()`` builds a fresh instance each time: the kit plays a crash by going on with
another, so only what the destination keeps carries over. ``read_values()`` returns the
``value`` of every row a reader sees now (committed output only), duplicates included; the sink
must append, not upsert, or a duplicate would not show. Each scenario has its own sink name,
``<name>-<scenario>``, and rows, ``<scenario>:<snapshot id>:<n>``, so scenarios share one
destination. The kit calls ``commit`` and ``rollback`` only with all the ids of one
``prepare``, as phase 2 does; committing ids it expects gone is how it sees that nothing was
left prepared. A failed scenario does not stop the others; the error lists each with what was
wrong. The scenarios are :data:`TRANSACTIONAL_SCENARIOS`, :data:`STAGED_SCENARIOS` and
:data:`FOREACH_BATCH_SCENARIOS`.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Collection, Iterator

import pyarrow as pa
from pyspark import TaskContext
from pyspark.sql import DataFrame, SparkSession

from spark_runtime.sinks.base import StagedSink, TransactionalSink
from spark_runtime.testing._conformance import (
    FOREACH,
    KIT_JOB_UID,
    RECOVER_ALL,
    STAGED,
    TRANSACTIONAL,
    BatchFunction,
    ReadValues,
    Scenario,
    ScenarioFailure,
    SinkConformanceError,
    ToFrame,
    WrongResultError,
    catalogue,
    key_value_frame,
    run_scenarios,
    scenario,
)

__all__ = [
    "FOREACH_BATCH_SCENARIOS",
    "KIT_JOB_UID",
    "STAGED_SCENARIOS",
    "TRANSACTIONAL_SCENARIOS",
    "BatchFunction",
    "ReadValues",
    "ScenarioFailure",
    "SinkConformanceError",
    "ToFrame",
    "check_foreach_batch",
    "check_staged_sink",
    "check_transactional_sink",
    "key_value_frame",
]


def check_transactional_sink(
    make_sink: Callable[[], TransactionalSink],
    read_values: ReadValues,
    spark: SparkSession,
    *,
    job_uid: str | None = None,
    name: str = "kit",
    to_frame: ToFrame = key_value_frame,
    scenarios: Collection[str] | None = None,
) -> list[str]:
    """Runs the :data:`TRANSACTIONAL_SCENARIOS` against a two-phase sink.

    Args:
        make_sink: Builds a new, unopened instance: each one plays a new process.
        read_values: The values a reader of the destination sees now (see the module).
        spark: The session the frames are made in.
        job_uid: The job uid the sinks are opened with; a new one by default, so a run never
            meets an earlier run's transactions.
        name: The start of each scenario's sink name.
        to_frame: Makes a frame the sink takes from the rows' values; by default ``key`` and
            ``value`` strings. The epoch column is added as the runtime adds it.
        scenarios: Only these scenarios; all by default.

    Returns:
        The names of the scenarios that ran, all passed.

    Raises:
        SinkConformanceError: Naming every failed scenario and what was wrong.
    """
    uid = job_uid or f"conformance-{uuid.uuid4().hex[:12]}"

    def settle(s: Scenario) -> None:
        # What a failed check left prepared would hold locks; its failure is what counts.
        for job, sink_name in set(s.opened):
            with contextlib.suppress(Exception):
                s.transactional(job_uid=job, sink_name=sink_name).recover([], RECOVER_ALL)

    return run_scenarios(
        type(make_sink()).__name__,
        TRANSACTIONAL,
        scenarios,
        lambda key: Scenario(key, make_sink, read_values, spark, to_frame, uid, name),
        settle,
    )


def _prepare(s: Scenario, sink: TransactionalSink, snapshot_id: int) -> tuple[list[str], list[str]]:
    """Prepares a batch of ``snapshot_id``; returns its values and transaction ids."""
    values = s.values(snapshot_id)
    ids = list(sink.prepare(s.frame(values, epoch=snapshot_id), snapshot_id))
    if not ids:
        raise WrongResultError(f"prepare of snapshot {snapshot_id} returned no transaction id")
    s.expect(values, 0, f"prepare of snapshot {snapshot_id}, before any commit (a dirty read)")
    return values, ids


@scenario(TRANSACTIONAL, "prepare-commit")
def _prepare_commit(s: Scenario) -> None:
    """Prepare writes nothing a reader sees; commit publishes each row once."""
    sink = s.transactional()
    values, ids = _prepare(s, sink, 1)
    sink.commit(ids)
    s.expect(values, 1, "prepare and commit")


@scenario(TRANSACTIONAL, "commit-twice")
def _commit_twice(s: Scenario) -> None:
    """A commit repeated (phase 2, then a restore's "just in case"), by a new process too, and a
    recover of committed ids leave each row once."""
    sink = s.transactional()
    values, ids = _prepare(s, sink, 2)
    sink.commit(ids)
    sink.commit(ids)
    s.expect(values, 1, "a second commit of the same ids by the same instance")
    s.transactional().commit(ids)
    s.expect(values, 1, "a commit of committed ids by a new process")
    _, rolled_back = s.transactional().recover(ids, 2)
    s.expect(values, 1, "a restore's recover(committed ids) after phase 2 committed them")
    if set(rolled_back) & set(ids):
        raise WrongResultError(f"recover reported committed ids as rolled back: {rolled_back}")


@scenario(TRANSACTIONAL, "crash-after-prepare-recover-commits")
def _crash_after_prepare_recover_commits(s: Scenario) -> None:
    """A crash after prepare; a new process's recover of those ids publishes each row once."""
    values, ids = _prepare(s, s.transactional(), 3)
    s.transactional().recover(ids, 3)
    s.expect(values, 1, "a crash after prepare, then recover(those ids) by a new process")


@scenario(TRANSACTIONAL, "crash-after-prepare-recover-rolls-back")
def _crash_after_prepare_recover_rolls_back(s: Scenario) -> None:
    """A crash after prepare; recover without those ids rolls them back: the rows never
    appear, not even when the ids are committed afterwards."""
    values, ids = _prepare(s, s.transactional(), 5)
    s.transactional().recover([], 5)
    s.expect(values, 0, "a crash after prepare, then recover without those ids")
    s.transactional().commit(ids)
    s.expect(values, 0, "a commit of ids recover should have rolled back (left prepared)")


@scenario(TRANSACTIONAL, "recover-leaves-newer")
def _recover_leaves_newer(s: Scenario) -> None:
    """Recover commits the restore point's ids, rolls back the others up to
    through_snapshot_id, and leaves higher ids (a newer execution's) prepared."""
    first = s.transactional()
    point, point_ids = _prepare(s, first, 6)
    failed, failed_ids = _prepare(s, first, 7)
    newer, newer_ids = _prepare(s, first, 8)
    s.transactional().recover(point_ids, 7)
    s.expect(point, 1, "recover(restore point 6's ids, through_snapshot_id=7)")
    s.expect(failed, 0, "recover(restore point 6's ids, through_snapshot_id=7), snapshot 7's")
    s.expect(newer, 0, "recover(..., through_snapshot_id=7), snapshot 8's (not committed)")
    last = s.transactional()
    last.commit(failed_ids)
    s.expect(failed, 0, "committing snapshot 7's ids after recover should have rolled them back")
    last.commit(newer_ids)
    s.expect(
        newer, 1, "committing snapshot 8's ids: recover(through_snapshot_id=7) must leave them"
    )


@scenario(TRANSACTIONAL, "abort")
def _abort(s: Scenario) -> None:
    """Abort after a prepare rolls it back; an abort with nothing prepared is a no-op."""
    sink = s.transactional()
    values, ids = _prepare(s, sink, 9)
    sink.abort(9)
    s.expect(values, 0, "abort(9) after prepare of 9")
    sink.abort(9)
    sink.abort(99)
    s.transactional().commit(ids)
    s.expect(values, 0, "a commit of ids abort should have rolled back (left prepared)")


@scenario(TRANSACTIONAL, "rollback")
def _rollback(s: Scenario) -> None:
    """Rollback rolls back; a rollback of ids already gone is a no-op."""
    sink = s.transactional()
    values, ids = _prepare(s, sink, 10)
    sink.rollback(ids)
    sink.rollback(ids)
    s.transactional().rollback(ids)
    s.expect(values, 0, "rollback of the prepared ids")
    s.transactional().commit(ids)
    s.expect(values, 0, "a commit of ids rollback should have rolled back (left prepared)")


@scenario(TRANSACTIONAL, "rollback-after-commit")
def _rollback_after_commit(s: Scenario) -> None:
    """Rollback, abort and roll_back_older of committed ids change nothing."""
    sink = s.transactional()
    values, ids = _prepare(s, sink, 11)
    sink.commit(ids)
    sink.rollback(ids)
    sink.abort(11)
    s.transactional().roll_back_older(12)
    s.expect(values, 1, "rollback, abort and roll_back_older(12) of committed snapshot 11")


@scenario(TRANSACTIONAL, "roll-back-older")
def _roll_back_older(s: Scenario) -> None:
    """roll_back_older(n) rolls back the ids of snapshots below n only."""
    zombie = s.transactional()
    older, older_ids = _prepare(s, zombie, 12)
    current, current_ids = _prepare(s, zombie, 13)
    newer, newer_ids = _prepare(s, zombie, 14)
    sink = s.transactional()
    sink.commit(current_ids)
    rolled_back = sink.roll_back_older(13)
    if set(rolled_back) & {*current_ids, *newer_ids}:
        raise WrongResultError(f"roll_back_older(13) reported ids of 13 or 14: {rolled_back}")
    last = s.transactional()
    last.commit(older_ids)
    s.expect(older, 0, "commit of snapshot 12's ids after roll_back_older(13) (left prepared)")
    s.expect(current, 1, "commit of snapshot 13, roll_back_older(13)")
    last.commit(newer_ids)
    s.expect(newer, 1, "commit of snapshot 14's ids after roll_back_older(13) rolled them back")


@scenario(TRANSACTIONAL, "other-sinks")
def _other_sinks(s: Scenario) -> None:
    """Recover and roll_back_older leave another sink's and another job's transactions alone."""
    values, ids = _prepare(s, s.transactional(), 15)
    # Names that begin this sink's and this job's: a prefix match without a delimiter takes ours.
    for other in (
        s.transactional(sink_name=s.sink_name.rsplit("-", 1)[0]),
        s.transactional(job_uid=s.job_uid[:-2]),
    ):
        other.recover([], RECOVER_ALL)
        other.roll_back_older(RECOVER_ALL)
    s.transactional().commit(ids)
    s.expect(
        values,
        1,
        "another sink of the job and the same sink of another job ran recover and "
        "roll_back_older, then this sink committed its ids (ids must name the job and sink)",
    )


def check_staged_sink(
    make_sink: Callable[[], StagedSink],
    read_values: ReadValues,
    spark: SparkSession,
    *,
    job_uid: str | None = None,
    name: str = "kit",
    to_frame: ToFrame = key_value_frame,
    scenarios: Collection[str] | None = None,
) -> list[str]:
    """Runs the :data:`STAGED_SCENARIOS` against a staged sink's ``publish``.

    ``publish`` runs on the driver here (in a job, in a Spark task), with Arrow batches of
    ``to_frame``'s rows plus the epoch column, as staged chunks hold them. Arguments, result
    and errors as :func:`check_transactional_sink`'s.
    """
    uid = job_uid or f"conformance-{uuid.uuid4().hex[:12]}"
    return run_scenarios(
        type(make_sink()).__name__,
        STAGED,
        scenarios,
        lambda key: Scenario(key, make_sink, read_values, spark, to_frame, uid, name),
    )


@scenario(STAGED, "publish-once")
def _publish_once(s: Scenario) -> None:
    """A publish shows each row once and returns the rows it published."""
    values = s.values(1)
    published = s.staged().publish(1, 0, iter(s.batches(values)))
    s.expect(values, 1, "a publish of snapshot 1, partition 0")
    if published != len(values):
        raise WrongResultError(
            f"publish returned {published}, not the {len(values)} rows published"
        )


@scenario(STAGED, "publish-twice")
def _publish_twice(s: Scenario) -> None:
    """A publish repeated, by a new process too, publishes nothing more and returns 0."""
    sink, values = s.staged(), s.values(2)
    sink.publish(2, 0, iter(s.batches(values)))
    again = sink.publish(2, 0, iter(s.batches(values)))
    s.expect(values, 1, "the same publish of snapshot 2, partition 0, twice")
    s.staged().publish(2, 0, iter(s.batches(values)))
    s.expect(values, 1, "the same publish again by a new process (a restore's)")
    if again != 0:
        raise WrongResultError(f"a publish already done returned {again}, not 0")


@scenario(STAGED, "older-after-newer")
def _publish_older_after_newer(s: Scenario) -> None:
    """A publish of an older snapshot after a newer one (a replaced driver's) publishes
    nothing."""
    newer, older = s.values(4), s.values(3)
    s.staged().publish(4, 0, iter(s.batches(newer)))
    s.staged().publish(3, 0, iter(s.batches(older)))
    s.expect(older, 0, "a publish of snapshot 3 after partition 0 published snapshot 4")


@scenario(STAGED, "partitions-independent")
def _partitions_independent(s: Scenario) -> None:
    """Each partition's marker is its own: a newer publish of one partition does not stop
    another's."""
    first, second = s.values(6), s.values(5)
    s.staged().publish(6, 1, iter(s.batches(first)))
    s.staged().publish(5, 0, iter(s.batches(second)))
    s.expect(second, 1, "partition 1 published snapshot 6, then partition 0 snapshot 5")
    s.expect(first, 1, "partition 1 published snapshot 6")


@scenario(STAGED, "crash-mid-publish")
def _crash_mid_publish(s: Scenario) -> None:
    """A publish whose input fails midway raises and shows nothing; the same publish by a new
    process then shows each row once."""
    values = s.values(7)
    half = s.batches(values[: len(values) // 2])

    def cut_short() -> Iterator[pa.RecordBatch]:
        yield from half
        raise RuntimeError("the kit's failure in the middle of a publish's input")

    try:
        s.staged().publish(7, 0, cut_short())
    except Exception:  # the kit's, or the sink's own error for it: either way it failed
        pass
    else:
        raise WrongResultError("publish returned although its input failed midway; it must raise")
    s.expect(values, 0, "a publish whose input failed midway (atomic: all or nothing)")
    s.staged().publish(7, 0, iter(s.batches(values)))
    s.expect(values, 1, "a publish cut short, then the same publish by a new process")


def check_foreach_batch(
    make_function: Callable[[], BatchFunction],
    read_values: ReadValues,
    spark: SparkSession,
    *,
    to_frame: ToFrame = key_value_frame,
    scenarios: Collection[str] | None = None,
) -> list[str]:
    """Runs the :data:`FOREACH_BATCH_SCENARIOS` against a ``foreachBatch`` function: it must
    write each batch once by its id, as an EXACTLY_ONCE job calls it.

    ``make_function()`` returns the function, again for each new process the kit plays; the
    other arguments, the result and the errors are :func:`check_transactional_sink`'s.
    """
    return run_scenarios(
        "The foreachBatch function",
        FOREACH,
        scenarios,
        lambda key: Scenario(key, make_function, read_values, spark, to_frame, "", ""),
    )


@scenario(FOREACH, "call-once")
def _call_once(s: Scenario) -> None:
    """A batch's rows appear once."""
    values = s.values(1)
    s.function()(s.frame(values), 1)
    s.expect(values, 1, "batch 1")


@scenario(FOREACH, "call-twice")
def _call_twice(s: Scenario) -> None:
    """The same id and rows again (a restore's "just in case"), by a new process too, add
    nothing."""
    values, function = s.values(2), s.function()
    function(s.frame(values), 2)
    function(s.frame(values), 2)
    s.expect(values, 1, "batch 2 twice")
    s.function()(s.frame(values), 2)
    s.expect(values, 1, "batch 2 again by a new process (a restore's)")


@scenario(FOREACH, "older-after-newer")
def _call_older_after_newer(s: Scenario) -> None:
    """An older batch again after a newer one (a replaced driver's late phase 2) adds
    nothing."""
    older, newer, function = s.values(3), s.values(4), s.function()
    function(s.frame(older), 3)
    function(s.frame(newer), 4)
    s.function()(s.frame(older), 3)
    s.expect(older, 1, "batches 3, 4, then 3 again")
    s.expect(newer, 1, "batches 3, 4, then 3 again")


@scenario(FOREACH, "another-jobs-ids")
def _another_jobs_ids(s: Scenario) -> None:
    """A job started from another job's export numbers its batches from 0 again: the same id
    of another job is another batch, applied too."""
    exporting, started = s.values(6), s.values(7)
    s.function("kit-exporting-job")(s.frame(exporting), 6)
    s.function()(s.frame(started), 6)
    problem = (
        "; a function keyed by batch_id alone drops a job's batches after it starts from an "
        "export: take a third parameter, job_uid, and key by (job_uid, batch_id)"
    )
    try:
        s.expect(exporting, 1, "batch 6 of the exporting job")
        s.expect(started, 1, "batch 6 of a job started from its export")
    except WrongResultError as wrong:
        raise WrongResultError(f"{wrong}{problem}") from None


@scenario(FOREACH, "fails-midway")
def _fails_midway(s: Scenario) -> None:
    """A call whose batch fails midway raises; the retry with the same id and rows shows each
    row once."""
    values = s.values(5)
    try:
        s.function()(_failing(s.frame(values)), 5)
    except Exception:  # the kit's failure, as Spark or the function reports it
        pass
    else:
        raise WrongResultError(
            "the function returned although its batch failed to read: it must raise, so that "
            "phase 2 fails and a restore calls it again"
        )
    s.function()(s.frame(values), 5)
    s.expect(values, 1, "batch 5 failed midway, then batch 5 again")


def _failing(frame: DataFrame) -> DataFrame:
    """``frame`` with its last partition failing when read: the partitions before it may
    already have been handed over, as when a batch's read fails midway."""
    last = frame.rdd.getNumPartitions() - 1

    def poisoned(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        context = TaskContext.get()
        if context is not None and context.partitionId() == last:
            raise RuntimeError("the kit's failure while a batch is read")
        yield from batches

    return frame.mapInArrow(poisoned, frame.schema)


TRANSACTIONAL_SCENARIOS = catalogue(TRANSACTIONAL)
"""The TransactionalSink scenarios, in the order they run: name -> what it checks."""

STAGED_SCENARIOS = catalogue(STAGED)
"""The StagedSink scenarios, in the order they run: name -> what it checks."""

FOREACH_BATCH_SCENARIOS = catalogue(FOREACH)
"""The foreachBatch function scenarios, in the order they run: name -> what it checks."""
