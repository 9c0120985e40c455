"""The test harness: a user's own ``define_pipeline`` run, crashed and restored in the test process.

Why in-process: crashing a pipeline and running it again should take seconds, not the minute
real driver processes, Hazelcast members and a database take. The harness runs the runtime's own
:class:`~spark_runtime.driver.Driver` on the test's SparkSession with the embedded snapshot store
in a directory and the execution record in a file, so snapshots, restores and two-phase commits
are the production ones. A crash is a failpoint armed with ``crash``
(:mod:`snapshot_protocol.failpoints`): the driver stops dead at that step, and the next run is a
new execution (fencing the old one) that restores from what the store and the record hold, as a
driver restarted by the operator does. Sources and sinks are swapped for memory ones by operator
name (``substitutes``, :class:`~spark_runtime.pipeline.Pipeline`): the module is not changed.
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import Counter
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, TypedDict

from pyspark.sql import SparkSession

from snapshot_protocol import (
    FAILPOINTS,
    FailpointAction,
    FailpointCrash,
    Failpoints,
    JobIdentity,
    TerminationMode,
    TerminationRequest,
)
from snapshot_store.directory import DirectorySnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import ExecutionRecord
from snapshotjob_contract.spark import JVM_CHUNKS_CONF
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.pipeline import DefinePipeline
from spark_runtime.session import ARROW_CONF, spark_session
from spark_runtime.sinks.base import Sink
from spark_runtime.sources.base import Source
from spark_runtime.testing.memory import MemorySink

_log = logging.getLogger(__name__)

FINISHED = frozenset({DriverExit.COMPLETED, DriverExit.INTERRUPTED, DriverExit.TERMINATED})
"""How a :meth:`PipelineTest.run` may end without failing the test."""


def every_failpoint(procedure: str | None = None) -> list[str]:
    """The names of every failpoint a crash can be injected at, in protocol order.

    For ``pytest.mark.parametrize("failpoint", every_failpoint())``: each step of taking a
    snapshot (``take.before_step_1`` ... ``take.after_step_10``) and of a restore
    (``restore.before_step_1`` ... ``restore.after_step_5``).

    Args:
        procedure: ``"take"`` or ``"restore"`` for one procedure's only; None for both.
    """
    return [
        failpoint.name
        for failpoint in FAILPOINTS
        if FailpointAction.CRASH in failpoint.actions
        and (procedure is None or failpoint.procedure == procedure)
    ]


def local_spark() -> SparkSession:
    """The process's active SparkSession, else a new ``local[2]`` one built as the driver's is.

    An existing session (a test suite's own fixture's) is used as it is: one JVM per process.
    A new one comes from the driver's own builder (:func:`~spark_runtime.session.spark_session`)
    with Spark's Kafka connector and the JDBC drivers when they are installed, in UTC.
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    return spark_session(
        "snapshotjob-pipeline-tests",
        master="local[2]",
        shuffle_partitions=4,
        kafka=True,
        jdbc_drivers=True,
    )


@dataclass(frozen=True)
class RunResult:
    """How one execution of the pipeline ended.

    Attributes:
        exit: The driver's exit: ``COMPLETED`` (bounded input, all read), ``INTERRUPTED``
            (``epochs`` ran), ``TERMINATED`` (no new input: stopped after a terminal snapshot)
            or ``FAILPOINT_CRASH``.
        epochs: Epochs this execution ran.
        snapshots: Snapshots this execution completed.
        failpoint: The failpoint it crashed at, if it did.
    """

    exit: DriverExit
    epochs: int
    snapshots: int
    failpoint: str | None = None


class PipelineRunFailed(AssertionError):  # noqa: N818 - names the condition, a test failure
    """An execution ended in a way that fails the test (the definition, an epoch, a restore).

    Attributes:
        result: How it ended.
        message: The driver's reason, as the operator would show it.
    """

    def __init__(self, result: RunResult, message: str | None) -> None:
        self.result = result
        self.message = message
        super().__init__(
            f"The pipeline's execution ended with {result.exit.name} ({result.exit.value}) "
            f"after {result.epochs} epochs and {result.snapshots} snapshots: "
            f"{message or 'no reason given; see the log'}"
        )


class FailpointNotReached(AssertionError):  # noqa: N818 - names the condition
    """:meth:`PipelineTest.crash_at` ran an execution to its end without reaching the step."""


class RunTimedOut(AssertionError):  # noqa: N818 - names the condition
    """An execution ran longer than the test's ``timeout_s``; it is left as a crash leaves it."""


class PipelineTestOptions(TypedDict, total=False):
    """The keyword arguments of :class:`PipelineTest`, for the ``pipeline_test`` fixture."""

    args: Mapping[str, Any] | None
    sources: Mapping[str, Source] | None
    sinks: Mapping[str, Sink] | None
    guarantee: ProcessingGuarantee | str
    snapshot_interval_ms: int
    state_partitions: int
    job_uid: str
    timeout_s: float


class PipelineTest:
    """A pipeline under test: its executions, its snapshot store and its execution record.

    Every :meth:`run` and :meth:`crash_at` is a new execution of the same job, as a driver
    restarted by the operator is: it claims the record (fencing the execution before it),
    restores the last snapshot and runs on. Sources and sinks given here take the place of the
    definition's by operator name, and keep what they hold across executions.

    Args:
        pipeline: The module with ``define_pipeline(p)``, or the function itself: the same
            one the job runs.
        directory: Where the job keeps its snapshot store (``store/``) and its execution record
            (``record.json``). Another ``PipelineTest`` on the same directory continues the
            same job: to check that a new version of the pipeline restores an old one's
            snapshot.
        spark: The session; by default the active one, else a new ``local[2]`` one
            (:func:`local_spark`).
        args: ``p.args``. The definition still builds the sources and sinks it would use in
            production (they are never opened when substituted), so give what it reads.
        sources: Operator name (``p.readStream(..., name=...)``) -> the source to read instead.
        sinks: Operator name (``writeStream(..., name=...)``) -> the sink to write instead.
        guarantee: The processing guarantee.
        snapshot_interval_ms: From the end of one snapshot to the start of the next; 0 takes
            one after every epoch, which makes every epoch a point a crash can return to.
        state_partitions: The keyed state's partitions (and the shuffle partitions while the
            job runs, as the driver sets them).
        job_uid: Names the job's snapshot maps and sink transactions.
        timeout_s: An execution running longer fails the test with :class:`RunTimedOut`.

    Raises:
        ValueError: If one name is given a source and a sink.
        TypeError: If a source is not a ``Source`` or a sink not a ``Sink``.
    """

    def __init__(
        self,
        pipeline: DefinePipeline | ModuleType,
        directory: Path | str,
        *,
        spark: SparkSession | None = None,
        args: Mapping[str, Any] | None = None,
        sources: Mapping[str, Source] | None = None,
        sinks: Mapping[str, Sink] | None = None,
        guarantee: ProcessingGuarantee | str = ProcessingGuarantee.EXACTLY_ONCE,
        snapshot_interval_ms: int = 0,
        state_partitions: int = 2,
        job_uid: str = "pipeline-test",
        timeout_s: float = 300.0,
    ) -> None:
        self._define = _define_of(pipeline)
        self.directory = Path(directory)
        self.spark = spark if spark is not None else local_spark()
        self.args: dict[str, Any] = dict(args or {})
        self.substitutes = _substitutes(sources or {}, sinks or {})
        self.timeout_s = timeout_s
        self.store_directory = self.directory / "store"
        self.record_path = self.directory / "record.json"
        self.store = DirectorySnapshotStore(self.store_directory)
        self.settings = DriverSettings(
            job=JobIdentity(job_uid, "default", 1),
            guarantee=ProcessingGuarantee(guarantee),
            snapshot_interval_ms=snapshot_interval_ms,
            state_partitions=state_partitions,
            store=StoreAddress.embedded(str(self.store_directory.resolve())),
            idle_sleep_s=0.01,
        )
        self.executions: list[RunResult] = []
        """Every execution so far, in order."""
        self.driver: Driver | None = None
        """The last execution's driver (its ``pipeline``, ``metrics``, ``coordinator``)."""

    @property
    def record(self) -> ExecutionRecord:
        """The job's execution record as stored: ``snapshot_id`` is the restore point."""
        return FileRecordStore(self.record_path, "reader").read()

    def run(self, epochs: int | None = None) -> RunResult:
        """Runs a new execution: restores the last snapshot, then runs epochs until one of:

        - ``epochs`` epochs ran: it stops without a snapshot (``INTERRUPTED``), as a driver
          killed between two snapshots;
        - every source is exhausted: a final snapshot publishes the last output
          (``COMPLETED``);
        - no source has new input and one is unbounded: it stops after a terminal snapshot
          (``TERMINATED``, as a suspend), so ``add`` more rows and run again.

        Args:
            epochs: The most epochs this execution runs; None for no limit.

        Raises:
            PipelineRunFailed: If the execution ended any other way: the definition is wrong
                (``BAD_INPUT``), an epoch failed, the snapshot cannot be restored
                (``SNAPSHOT_INCOMPATIBLE`` for a pipeline changed in a way it cannot), ...
            RunTimedOut: If it ran longer than ``timeout_s``.
        """
        return self._execute(None, 1, epochs)

    def crash_at(self, failpoint: str, *, occurrence: int = 1) -> RunResult:
        """Runs a new execution that crashes at ``failpoint``, as a driver killed right there.

        The crash leaves the store, the record and the sinks as the step left them: a later
        :meth:`run` restores from that. Restore failpoints fire while the execution starts;
        taking failpoints at its snapshots (after the first epoch when the interval is 0).

        Args:
            failpoint: A name from :func:`every_failpoint`, e.g. ``"take.after_step_4"``
                (phase 1 done, the snapshot not yet recorded).
            occurrence: Crash the n-th time this execution reaches the step: 2 crashes in the
                second snapshot, with state and output from the first behind it.

        Raises:
            ValueError: If no failpoint has that name.
            FailpointNotReached: If the execution ended before reaching it that often.
            PipelineRunFailed: As :meth:`run`.
        """
        if occurrence < 1:
            raise ValueError(f"occurrence counts from 1, not {occurrence}")
        return self._execute(failpoint, occurrence, None)

    # --- plumbing -------------------------------------------------------------------------------

    def _execute(self, failpoint: str | None, occurrence: int, epochs: int | None) -> RunResult:
        failpoints = _NthFailpoint(failpoint, occurrence) if failpoint else None
        records = FileRecordStore.claim(self.record_path, uuid.uuid4().hex)
        stop = _StopWhenIdle(time.monotonic() + self.timeout_s, self.timeout_s)
        driver = Driver(
            self.spark,
            self._define,
            self.args,
            self.settings,
            records,
            self.store,
            failpoints=failpoints,
            poll_termination=stop,
            substitutes=self.substitutes,
        )
        stop.driver = driver
        self.driver = driver
        crashed: str | None = None
        with _session_settings(self.spark, self.settings.state_partitions):
            try:
                exit_code = driver.run(epochs)
            except FailpointCrash as crash:
                # The process "died": nothing of this execution runs on. What it wrote stays.
                crashed = crash.failpoint
                exit_code = DriverExit.FAILPOINT_CRASH
                _log.info("Crashed at failpoint=%s epochs=%d", crashed, driver.epochs)
        result = RunResult(exit_code, driver.epochs, driver.snapshots_taken, crashed)
        self.executions.append(result)
        if failpoint is not None and crashed is None:
            raise FailpointNotReached(
                f"The execution never reached failpoint {failpoint} "
                f"{_times(occurrence)}: it ended with {exit_code.name} after {driver.epochs} "
                f"epochs and {driver.snapshots_taken} snapshots"
                + (f" ({driver.exit_message})" if driver.exit_message else "")
            )
        if crashed is None and exit_code not in FINISHED:
            raise PipelineRunFailed(result, driver.exit_message)
        return result


def _times(occurrence: int) -> str:
    return "once" if occurrence == 1 else f"{occurrence} times"


def _define_of(pipeline: DefinePipeline | ModuleType) -> DefinePipeline:
    """The ``define_pipeline`` of a module, or the function given."""
    if isinstance(pipeline, ModuleType):
        define = getattr(pipeline, "define_pipeline", None)
        if not callable(define):
            raise TypeError(f"Module {pipeline.__name__} has no define_pipeline(p) function")
        result: DefinePipeline = define
        return result
    if not callable(pipeline):
        raise TypeError(f"A pipeline is a module or its define_pipeline, not {pipeline!r}")
    return pipeline


def _substitutes(
    sources: Mapping[str, Source], sinks: Mapping[str, Sink]
) -> dict[str, Source | Sink]:
    """Sources and sinks by operator name, checked before the definition runs."""
    for name, source in sources.items():
        if not isinstance(source, Source):
            raise TypeError(f"sources[{name!r}] is a {type(source).__name__}, not a Source")
    for name, sink in sinks.items():
        if not isinstance(sink, Sink):
            raise TypeError(f"sinks[{name!r}] is a {type(sink).__name__}, not a Sink")
    both = sorted(set(sources) & set(sinks))
    if both:
        raise ValueError(f"Names given both a source and a sink: {', '.join(both)}")
    return {**sources, **sinks}


class _NthFailpoint(Failpoints):
    """A crash armed at one failpoint, firing the n-th time the execution passes it."""

    def __init__(self, name: str, occurrence: int) -> None:
        super().__init__({name: FailpointAction.CRASH})  # an unknown name fails here
        self._name = name
        self._passes_left = occurrence - 1

    def hit(self, name: str) -> None:
        if name == self._name and self._passes_left > 0:
            self._passes_left -= 1
            return
        super().hit(name)


class _StopWhenIdle:
    """The driver's termination poll: a suspend once no source has new input, a deadline.

    A bounded job ends by itself; an unbounded source would keep the driver waiting for rows
    the test has not added yet, so the poll asks for a graceful stop instead, whose terminal
    snapshot commits the output.
    """

    def __init__(self, deadline: float, timeout_s: float) -> None:
        self.driver: Driver | None = None
        self._deadline = deadline
        self._timeout_s = timeout_s

    def __call__(self) -> TerminationRequest | None:
        if time.monotonic() > self._deadline:
            raise RunTimedOut(f"The execution ran longer than timeout_s={self._timeout_s}")
        driver = self.driver
        if driver is None:
            return None
        pipeline = driver.pipeline
        if pipeline.exhausted() or pipeline.plan_epoch() is not None:
            return None
        return TerminationRequest(TerminationMode.SUSPEND_GRACEFUL)


@contextmanager
def _session_settings(spark: SparkSession, state_partitions: int) -> Iterator[None]:
    """The settings the driver gives its own session, for one execution, then put back.

    The shuffle partitions are the state partitions (as ``start_spark`` sets them), Arrow is
    on, and state chunks go through the Python workers: the executors' JVM path writes to
    Hazelcast only, never to the embedded store.
    """
    wanted = {
        JVM_CHUNKS_CONF: "false",
        "spark.sql.shuffle.partitions": str(state_partitions),
        ARROW_CONF: "true",
    }
    before = {key: spark.conf.get(key, None) for key in wanted}
    for key, value in wanted.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, previous in before.items():
            if previous is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, previous)


# --- exactly once -------------------------------------------------------------------------------


@dataclass(frozen=True)
class IdReport:
    """What an output holds against the ids it must hold once each.

    Attributes:
        rows: Rows in the output.
        missing: Expected ids without a row: lost events.
        repeated: Id -> rows, for ids with more than one row: events published twice.
        strays: Ids that were not expected.
    """

    rows: int
    missing: tuple[Hashable, ...]
    repeated: Mapping[Hashable, int]
    strays: tuple[Hashable, ...]

    @property
    def exact(self) -> bool:
        """Every expected id once, and nothing else."""
        return not (self.missing or self.repeated or self.strays)

    def describe(self, what: str = "the output") -> str:
        """One sentence naming the faults, with up to ten ids of each."""
        faults = []
        if self.missing:
            faults.append(f"{len(self.missing)} ids missing (lost): {_some(self.missing)}")
        if self.repeated:
            repeats = tuple(f"{key} x{rows}" for key, rows in self.repeated.items())
            shown = _some(repeats)
            faults.append(f"{len(repeats)} ids repeated (published twice or more): {shown}")
        if self.strays:
            faults.append(f"{len(self.strays)} ids not expected: {_some(self.strays)}")
        if not faults:
            return f"{what} holds every expected id exactly once ({self.rows} rows)"
        return f"{what} is not exactly once ({self.rows} rows): " + "; ".join(faults)


def check_ids(
    output: MemorySink | Iterable[Mapping[str, Any]],
    id_column: str = "id",
    expected_ids: Iterable[Hashable] | None = None,
) -> IdReport:
    """Counts the missing, repeated and unexpected ids of an output (see
    :func:`assert_exactly_once`)."""
    rows = output.rows() if isinstance(output, MemorySink) else list(output)
    counts: Counter[Hashable] = Counter()
    for row in rows:
        if id_column not in row:
            raise KeyError(f"A row has no column {id_column!r}: {dict(row)!r}")
        counts[row[id_column]] += 1
    expected = set(expected_ids) if expected_ids is not None else None
    repeated = {key: n for key, n in _sorted(counts.items()) if n > 1}
    if expected is None:
        return IdReport(len(rows), (), repeated, ())
    missing = tuple(_sorted(expected - set(counts)))
    strays = tuple(_sorted(set(counts) - expected))
    return IdReport(len(rows), missing, repeated, strays)


def assert_exactly_once(
    output: MemorySink | Iterable[Mapping[str, Any]],
    id_column: str = "id",
    expected_ids: Iterable[Hashable] | None = None,
) -> IdReport:
    """Asserts that every expected id is in the output exactly once, and no other id.

    Give the pipeline an append-only output with one row per input event (its id) for this:
    an upserting output hides repeats by design, and totals can hide a lost event that a
    repeated one made up for.

    Args:
        output: A :class:`MemorySink` (its committed rows) or rows as dicts.
        id_column: The column holding the event id.
        expected_ids: The ids that must each be there once (e.g. ``range(100)``); None to
            check only that no id is there twice.

    Returns:
        The counts, when exact.

    Raises:
        AssertionError: Naming the missing, repeated and unexpected ids.
    """
    report = check_ids(output, id_column, expected_ids)
    if not report.exact:
        name = output.name if isinstance(output, MemorySink) and output.name else None
        raise AssertionError(report.describe(f"sink {name!r}" if name else "the output"))
    return report


def _sorted(values: Iterable[Any]) -> list[Any]:
    """Sorted naturally where the ids compare, by their text otherwise."""
    items = list(values)
    try:
        return sorted(items)
    except TypeError:
        return sorted(items, key=repr)


def _some(ids: tuple[Hashable, ...]) -> str:
    """Up to ten of ``ids``, for a message."""
    shown = ", ".join(str(i) for i in ids[:10])
    return shown + (", ..." if len(ids) > 10 else "")
