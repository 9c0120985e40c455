"""The conformance kit's machinery: scenarios, their registries, rows and checks.

Why a module of its own: :mod:`spark_runtime.testing.sink_conformance` holds the scenarios a
sink author reads to know what is checked; what runs them (a scenario's rows and fresh sink
instances, the registries, how failures are gathered) is the same for every kind of sink.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks.base import EPOCH_COLUMN, Sink, StagedSink, TransactionalSink
from spark_runtime.sinks.foreach_batch import ForeachBatchSink

ROWS_PER_BATCH = 6
"""Rows per batch: more than a few sink partitions, so a sink that splits its output into
transactions gets several."""

RECOVER_ALL = 10**12
"""A ``through_snapshot_id`` above every id the kit uses: cleans up after a scenario."""

ToFrame = Callable[[SparkSession, Sequence[str]], DataFrame]
"""Makes the frame a sink is given from the rows' values (one row per value)."""

ReadValues = Callable[[], Iterable[str]]
"""The values of the rows a reader of the destination sees now, duplicates included."""

BatchFunction = Callable[..., None]
"""A ``foreachBatch`` function: ``func(batch_df, batch_id)`` or
``func(batch_df, batch_id, job_uid)``."""

KIT_JOB_UID = "kit-job"
"""The job uid the kit calls a three-argument ``foreachBatch`` function with."""


@dataclass(frozen=True)
class ScenarioFailure:
    """One scenario the sink failed: its name (a key of a ``*_SCENARIOS``) and what was wrong."""

    scenario: str
    problem: str

    def __str__(self) -> str:
        return f"[{self.scenario}] {self.problem}"


class SinkConformanceError(AssertionError):
    """The sink failed scenarios of the kit (:attr:`failures`); pytest reports the list."""

    def __init__(self, subject: str, failures: Sequence[ScenarioFailure]) -> None:
        self.failures = list(failures)
        listed = "\n".join(f"- {failure}" for failure in self.failures)
        super().__init__(f"{subject} fails {len(self.failures)} scenario(s) of the kit:\n{listed}")


def key_value_frame(spark: SparkSession, values: Sequence[str]) -> DataFrame:
    """The kit's default rows: ``key`` and ``value`` strings, both the row's value (a Kafka
    sink's columns; a table or files take them as they are)."""
    return spark.createDataFrame([(v, v) for v in values], "key string, value string")


class WrongResultError(Exception):
    """What a scenario found wrong."""


class Scenario:
    """One scenario's rows, sinks and checks; ``make`` builds a sink or a foreachBatch function."""

    def __init__(
        self,
        name: str,
        make: Callable[[], object],
        read_values: ReadValues,
        spark: SparkSession,
        to_frame: ToFrame,
        job_uid: str,
        sink_name: str,
    ) -> None:
        self.name, self.spark, self.job_uid = name, spark, job_uid
        self.sink_name = f"{sink_name}-{name}"
        self._make, self._read_values, self._to_frame = make, read_values, to_frame
        self.opened: set[tuple[str, str]] = set()

    def _sink(self, kind: type, job_uid: str, sink_name: str) -> Any:
        made = self._make()
        if not isinstance(made, kind):
            raise TypeError(f"make_sink() made a {type(made).__name__}, not a {kind.__name__}")
        identity = (job_uid or self.job_uid, sink_name or self.sink_name)
        cast(Sink, made).open(self._to_frame(self.spark, ["schema"]).schema, *identity)
        self.opened.add(identity)
        return made

    def transactional(self, job_uid: str = "", sink_name: str = "") -> TransactionalSink:
        """A new instance, opened as a new process opens it."""
        return cast(TransactionalSink, self._sink(TransactionalSink, job_uid, sink_name))

    def staged(self) -> StagedSink:
        """A new instance, opened as a new process opens it."""
        return cast(StagedSink, self._sink(StagedSink, "", ""))

    def function(self, job_uid: str = KIT_JOB_UID) -> Callable[[DataFrame, int], None]:
        """The foreachBatch function, as a new process of job ``job_uid`` would call it."""
        made = self._make()
        if not callable(made):
            raise TypeError(f"make_function() made a {type(made).__name__}, not a function")
        sink = ForeachBatchSink(made)
        return lambda frame, batch_id: sink.call(frame, batch_id, job_uid)

    def values(self, snapshot_id: int) -> list[str]:
        """The rows of one batch, unique to this scenario and snapshot."""
        return [f"{self.name}:{snapshot_id}:{n}" for n in range(ROWS_PER_BATCH)]

    def frame(self, values: Sequence[str], epoch: int | None = None) -> DataFrame:
        """The rows as a sink gets them; with ``epoch``, the epoch column of buffered output."""
        frame = self._to_frame(self.spark, values)
        return frame if epoch is None else frame.withColumn(EPOCH_COLUMN, F.lit(epoch))

    def batches(self, values: Sequence[str]) -> list[pa.RecordBatch]:
        """The rows as a staged chunk holds them: Arrow, with the epoch column."""
        return list(self.frame(values, epoch=0).toArrow().to_batches())

    def expect(self, values: Sequence[str], times: int, after: str) -> None:
        """Checks that each of ``values`` is seen ``times`` times (0 or 1) now."""
        wanted = set(values)
        counts = Counter(v for v in self._read_values() if v in wanted)
        if any(counts[v] != times for v in values):
            raise WrongResultError(
                f"after {after}: expected each of its {len(values)} rows "
                f"{'once' if times else 'absent'}, but {describe(values, counts)}"
            )


Check = Callable[[Scenario], None]
TRANSACTIONAL: dict[str, Check] = {}
STAGED: dict[str, Check] = {}
FOREACH: dict[str, Check] = {}


def scenario(registry: dict[str, Check], name: str) -> Callable[[Check], Check]:
    """Registers a check under ``name``; its docstring says what it checks."""

    def register(check: Check) -> Check:
        registry[name] = check
        return check

    return register


def describe(values: Sequence[str], counts: Counter[str]) -> str:
    """How often the rows were seen, e.g. ``2 absent (a, b); 4 seen twice (c, ...)``."""
    by_count: dict[int, list[str]] = {}
    for value in values:
        by_count.setdefault(counts[value], []).append(value)
    words = {0: "absent", 1: "seen once", 2: "seen twice"}
    parts = []
    for count, seen in sorted(by_count.items()):
        shown = ", ".join(seen[:3]) + (", ..." if len(seen) > 3 else "")
        parts.append(f"{len(seen)} {words.get(count, f'seen {count} times')} ({shown})")
    return "; ".join(parts)


def run_scenarios(
    subject: str,
    registry: Mapping[str, Check],
    selected: Collection[str] | None,
    scenario: Callable[[str], Scenario],
    settle: Callable[[Scenario], None] | None = None,
) -> list[str]:
    """Runs the selected scenarios; returns their names, or raises with every failure."""
    unknown = sorted(set(selected or ()) - set(registry))
    if unknown:
        raise ValueError(f"No scenario {unknown}; the kit's are {', '.join(registry)}")
    names = [name for name in registry if selected is None or name in selected]
    failures = []
    for name in names:
        s = scenario(name)
        try:
            registry[name](s)
        except WrongResultError as wrong:
            failures.append(ScenarioFailure(name, str(wrong)))
        except Exception as error:  # the sink raised: reported with the scenario, not fatal
            failures.append(ScenarioFailure(name, f"raised {type(error).__name__}: {error}"))
        finally:
            if settle is not None:
                settle(s)
    if failures:
        raise SinkConformanceError(subject, failures)
    return names


def catalogue(registry: Mapping[str, Check]) -> Mapping[str, str]:
    return {name: inspect.cleandoc(check.__doc__ or "") for name, check in registry.items()}
