"""The pipeline a module defines once, and the epochs the runtime runs through it.

A pipeline module defines ``define_pipeline(p)``. The runtime calls it once per execution,
before restore: ``p.readStream(source)`` returns an :class:`~spark_runtime.streaming.EpochStream`,
and every transformation on it adds a node to the graph this module keeps (each source,
state operator and sink becomes a snapshot participant there, as Jet knows its DAG before
restoring it). Then, for every epoch, :meth:`Pipeline.run_epoch` evaluates the graph on that
epoch's batches: each stateless node on the epoch's batch alone, each state operator merging
the batch into the state it keeps across epochs, each sink receiving the epoch's output.

Before the first epoch of an execution each source is asked whether its restored offset still
points at data its upstream holds (:meth:`~spark_runtime.sources.base.Source.expired`: Kafka's
retention may have deleted records the job never read); ``spec.expiredOffsets`` decides here,
once for every kind of source, whether that stops the execution or the source goes on from
its earliest data.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, TypeVar, cast

from pyspark.sql import DataFrame, SparkSession

from snapshot_protocol.chunks import PipelineShape
from snapshot_protocol.ports import Participant
from snapshotjob_contract.spec import ExpiredOffsetsPolicy, ProcessingGuarantee
from spark_runtime.sinks.base import Sink, StagedSink
from spark_runtime.sinks.foreach_batch import ForeachBatchParticipant, ForeachBatchSink
from spark_runtime.sinks.participant import SinkParticipant
from spark_runtime.sinks.staged import StagedSinkParticipant
from spark_runtime.sources.base import Offset, OffsetsExpired, Source
from spark_runtime.sources.participant import SourceParticipant
from spark_runtime.state import KeyedState, StateContext

if TYPE_CHECKING:
    from spark_runtime.streaming.stream import EpochStream

_log = logging.getLogger(__name__)

_Operator = TypeVar("_Operator", Source, Sink)

DefinePipeline = Callable[["Pipeline"], None]
"""A pipeline module's ``define_pipeline(p)``."""


class RowCounts(Protocol):
    """Told the rows the pipeline read and wrote, where the sources and sinks can count them
    without a Spark job of their own, and the records a restore skipped (the driver's metrics,
    :mod:`spark_runtime.metrics`)."""

    def rows_in(self, source: str, rows: int) -> None:
        """Rows an epoch read from the source named ``source``."""

    def rows_out(self, sink: str, rows: int) -> None:
        """Rows the sink named ``sink`` published."""

    def records_skipped(self, source: str, records: int) -> None:
        """Records of the source named ``source`` that were gone when it was restored."""

    def records_behind(self, source: str, records: int) -> None:
        """Records the source named ``source`` holds past the job's position, at a plan."""


@dataclass(frozen=True)
class EpochPlan:
    """The ranges one epoch reads: source name -> (start offset, end offset).

    Attributes:
        ranges: Source name -> (start offset, end offset); sources not named read nothing.
        end_of_input: The closing epoch of a bounded job: every source is exhausted, and
            state operators release what they hold open (a window's watermark goes to
            +infinity) so it is emitted before the final snapshot.
    """

    ranges: Mapping[str, tuple[Offset, Offset]]
    end_of_input: bool = False


@dataclass(frozen=True)
class _Node:
    """One step of the graph: how an epoch's frame is made from its inputs' frames."""

    inputs: tuple[int, ...]
    compute: Callable[[list[DataFrame]], DataFrame]


class Pipeline:
    """The ``p`` handed to ``define_pipeline(p)``, and the graph it defines.

    Args:
        spark: The session.
        state: Shared settings of the state operators.
        guarantee: The processing guarantee.
        job_uid: Names the job's sink transactions.
        args: The pipeline's arguments (``spec.pipeline.args``).
        open_sinks: Open each sink as it is added (connect, create its table); False to
            define the pipeline only to learn its shape.
        rows: Told the rows read and written, where they are counted; not counted if omitted.
        substitutes: For tests (:mod:`spark_runtime.testing`): operator name -> the source or
            sink to use in place of the one the definition reads or writes under that name,
            so a module's own ``define_pipeline`` runs on memory sources and sinks unchanged.
        expired_offsets: What the first epoch does with a source whose restored offset points
            at data its upstream deleted (``spec.expiredOffsets``).
    """

    def __init__(
        self,
        spark: SparkSession,
        state: StateContext,
        guarantee: ProcessingGuarantee,
        job_uid: str,
        args: Mapping[str, Any],
        *,
        open_sinks: bool = True,
        rows: RowCounts | None = None,
        substitutes: Mapping[str, Source | Sink] | None = None,
        expired_offsets: ExpiredOffsetsPolicy = ExpiredOffsetsPolicy.FAIL,
    ) -> None:
        self.spark = spark
        self._substitutes = dict(substitutes or {})
        # False only to learn the pipeline's shape (the snapshot command's compatibility
        # check): defining it then touches no external system.
        self._open_sinks = open_sinks
        self._rows = rows
        self.args = dict(args)
        self.state_context = state
        self._guarantee = guarantee
        self._job_uid = job_uid
        self._sources: dict[str, SourceParticipant] = {}
        self._states: dict[str, KeyedState] = {}
        self._sinks: dict[str, tuple[int, SinkParticipant | StagedSinkParticipant]] = {}
        self._participants: list[Participant] = []
        self._nodes: list[_Node] = []
        self._counters: dict[str, int] = {}
        self._defined = False
        self._batches: dict[str, DataFrame] = {}
        self._expired_offsets = expired_offsets
        self._offsets_checked: set[str] = set()
        """Sources whose offset this execution has compared with what their upstream holds."""

    # --- the user's API ---------------------------------------------------------------------

    def readStream(self, source: Source, *, name: str | None = None) -> EpochStream:
        """Returns the stream of ``source``'s epoch batches, like ``spark.readStream...load()``.

        Args:
            source: What to read.
            name: The source's name in snapshots; by default ``source-<n>`` in the order the
                sources were read. Name every operator of a job whose definition may change.
        """
        from spark_runtime.streaming.stream import EpochStream

        self._check_defining()
        key = self._register_name("source", name)
        source = self._substitute(key, source)
        participant = SourceParticipant(key, source)
        self._sources[key] = participant
        self._participants.append(participant)
        node = self.add_node((), lambda _inputs: self._batches[key])
        return EpochStream(self, node, self.spark.createDataFrame([], source.schema(self.spark)))

    # --- what EpochStream builds with -------------------------------------------------------

    def add_node(
        self, inputs: Sequence[int], compute: Callable[[list[DataFrame]], DataFrame]
    ) -> int:
        """Adds a step computing an epoch's frame from its inputs'; returns its index."""
        self._check_defining()
        self._nodes.append(_Node(tuple(inputs), compute))
        return len(self._nodes) - 1

    def add_state(
        self, kind: str, name: str | None, input_node: int, make: Callable[[str], KeyedState]
    ) -> tuple[int, KeyedState]:
        """Adds a state operator updated with ``input_node``'s frame every epoch."""
        key = self._register_name(kind, name)
        operator = make(key)
        self._states[key] = operator
        self._participants.append(operator)
        return self.add_node((input_node,), lambda inputs: operator.update(inputs[0])), operator

    def add_sink(self, sink: Sink, name: str | None, input_node: int, schema_of: DataFrame) -> None:
        """Adds a sink that receives ``input_node``'s frame every epoch."""
        self._check_defining()
        key = self._register_name("sink", name)
        sink = self._substitute(key, sink)
        if self._open_sinks:
            sink.open(schema_of.schema, self._job_uid, key)
        count = self._rows.rows_out if self._rows is not None else None
        participant: SinkParticipant | StagedSinkParticipant
        if isinstance(sink, ForeachBatchSink):
            # Staged like any staged sink, but handed to its function whole, on the driver.
            participant = ForeachBatchParticipant(
                key, sink, self._guarantee, self.state_context, count
            )
        elif isinstance(sink, StagedSink):
            participant = StagedSinkParticipant(
                key, sink, self._guarantee, self.state_context, count
            )
        else:
            participant = SinkParticipant(key, sink, self._guarantee, count)
        self._sinks[key] = (input_node, participant)
        self._participants.append(participant)

    # --- the runtime's side ------------------------------------------------------------------

    @property
    def participants(self) -> list[Participant]:
        """Every source, state operator and sink, in the order the definition made them."""
        return list(self._participants)

    def shape(self, state_partitions: int) -> PipelineShape:
        """What a snapshot must have been written by for this pipeline to restore it.

        Each participant is described by what its chunks hold: a source or sink by its class
        (offsets and transaction ids mean nothing to another kind), a state operator by its
        class, keys, state schema and :attr:`~spark_runtime.state.KeyedState.semantics` (a
        window's length, the aggregates' functions and arguments, the timeout kind). Restore
        step 4 compares this with the snapshot's.
        """
        described: dict[str, str] = {}
        for participant in self._participants:
            if isinstance(participant, KeyedState):
                semantics = f"; {participant.semantics}" if participant.semantics else ""
                described[participant.name] = (
                    f"{type(participant).__name__}(keys={','.join(participant.keys)}; "
                    f"{participant.state_schema.simpleString()}{semantics})"
                )
            elif isinstance(participant, SourceParticipant):
                described[participant.name] = type(participant.source).__name__
            elif isinstance(participant, SinkParticipant | StagedSinkParticipant):
                described[participant.name] = type(participant.sink).__name__
            else:
                described[participant.name] = type(participant).__name__
        return PipelineShape(described, state_partitions)

    def define(self, define_pipeline: DefinePipeline) -> None:
        """Runs the module's ``define_pipeline`` once, building the graph.

        Raises:
            ValueError: If the definition is wrong (no source or sink, a construct that is not
                supported); the message says what to change.
        """
        if self._defined:
            raise ValueError("The pipeline is defined once per execution")
        define_pipeline(self)
        self._defined = True
        if not self._sources or not self._sinks:
            raise ValueError(
                "A pipeline must read at least one source (p.readStream) and write one sink "
                "(stream.writeStream)"
            )
        unused = sorted(set(self._substitutes) - set(self._sources) - set(self._sinks))
        if unused:
            raise ValueError(
                f"Substitutes name no source or sink of the pipeline: {', '.join(unused)}; its "
                f"sources are {', '.join(self._sources)} and its sinks {', '.join(self._sinks)} "
                "(name=... in readStream and writeStream)"
            )

    def plan_epoch(self) -> EpochPlan | None:
        """Decides the next epoch's ranges; None if no source has anything new.

        Once every source is exhausted and a state operator still holds open output (a
        tumbling window not yet closed), returns a closing plan without ranges: its epoch
        emits that output, and the operators save that they did so with the next snapshot.
        So the driver runs the closing epoch before the final snapshot, exactly once per
        snapshot lineage, without knowing about it.

        The driver calls :meth:`check_offsets` before it, so the restored offsets are
        checked before they are first used.

        Each source's lag is reported as its plan finds it: the records past the position the
        job has read to, from what ``next_offset`` learnt
        (:meth:`~spark_runtime.sources.base.Source.records_behind`).
        """
        ranges = {}
        for name, participant in self._sources.items():
            end = participant.source.next_offset(participant.offset)
            if end is not None:
                ranges[name] = (participant.offset, end)
            if self._rows is not None:
                behind = participant.source.records_behind(participant.offset)
                if behind is not None:
                    self._rows.records_behind(name, behind)
        if ranges:
            return EpochPlan(ranges)
        if self.exhausted() and any(s.holds_open_output for s in self._states.values()):
            return EpochPlan({}, end_of_input=True)
        return None

    def check_offsets(self) -> None:
        """Compares each source's offset with what its upstream still holds, once per source.

        The driver calls it before every :meth:`plan_epoch`; it asks each source once per
        execution, before its offset is first used (so, after a restore, with the restored
        one). A source that lost data stops the execution under Fail, or goes on from its
        earliest data under Earliest, logged and counted. A source whose check failed (its
        upstream unreachable) is asked again at the next call, and the driver retries the
        failure as it retries ``next_offset``'s.

        Not part of :meth:`plan_epoch`, which others call too (the test kit's idle check):
        the execution ends where the driver plans, with exit 71.

        Raises:
            OffsetsExpired: A source's offset points at deleted data and
                ``spec.expiredOffsets`` is Fail.
        """
        for name, participant in self._sources.items():
            if name in self._offsets_checked:
                continue
            found = participant.source.expired(participant.offset)
            if found is not None and found.ranges:
                if self._expired_offsets is not ExpiredOffsetsPolicy.EARLIEST:
                    raise OffsetsExpired(name, found.ranges)
                _log.warning(
                    "Skipped records no longer in the source source=%s records=%d "
                    "partitions=%s policy=%s",
                    name,
                    found.lost,
                    "; ".join(expired.describe() for expired in found.ranges),
                    self._expired_offsets.value,
                )
                participant.offset = found.resumed
            if self._rows is not None:
                self._rows.records_skipped(name, found.lost if found is not None else 0)
            self._offsets_checked.add(name)

    def exhausted(self) -> bool:
        """Whether every source has reached its end."""
        return all(p.source.is_exhausted(p.offset) for p in self._sources.values())

    def run_epoch(self, epoch: int, plan: EpochPlan) -> None:
        """Runs one epoch over ``plan`` through the graph and advances the sources' offsets.

        Every node is evaluated once, in the order it was defined (inputs come first): a
        state operator merges the epoch exactly once even when several sinks read its output.
        """
        self._batches = {}
        for name, participant in self._sources.items():
            if name in plan.ranges:
                start, end = plan.ranges[name]
                self._batches[name] = participant.source.read(self.spark, start, end)
            else:
                self._batches[name] = self.spark.createDataFrame(
                    [], participant.source.schema(self.spark)
                )
        if plan.end_of_input:
            open_states = [s for s in self._states.values() if s.holds_open_output]
            _log.info(
                "Closing epoch at end of input epoch=%d operators=%s",
                epoch,
                ",".join(s.name for s in open_states),
            )
            for operator in open_states:
                operator.end_input()
        frames: list[DataFrame] = []
        for node in self._nodes:
            frames.append(node.compute([frames[i] for i in node.inputs]))
        for input_node, sink in self._sinks.values():
            sink.accept(epoch, frames[input_node])
        for name, (_start, end) in plan.ranges.items():
            self._sources[name].offset = end
        self._batches = {}
        self._count_rows_in(plan)

    def _count_rows_in(self, plan: EpochPlan) -> None:
        """Reports the rows an epoch read, from the sources whose offsets tell."""
        if self._rows is None:
            return
        for name, (start, end) in plan.ranges.items():
            rows = self._sources[name].source.rows_between(start, end)
            if rows is not None:
                self._rows.rows_in(name, rows)

    # --- plumbing ----------------------------------------------------------------------------

    def _substitute(self, name: str, given: _Operator) -> _Operator:
        """The test's substitute for the operator ``name``, else ``given``.

        Raises:
            TypeError: If the substitute is not of the kind it replaces (a sink for a source).
        """
        substitute = self._substitutes.get(name)
        if substitute is None:
            return given
        kind: type = Source if isinstance(given, Source) else Sink
        if not isinstance(substitute, kind):
            raise TypeError(
                f"The substitute for {name} is a {type(substitute).__name__}, not a "
                f"{kind.__name__} like the {type(given).__name__} it replaces"
            )
        return cast(_Operator, substitute)

    def _check_defining(self) -> None:
        if self._defined:
            raise ValueError(
                "The pipeline is already defined: streams are built in define_pipeline(p) only"
            )

    def _register_name(self, kind: str, name: str | None) -> str:
        count = self._counters.get(kind, 0)
        self._counters[kind] = count + 1
        chosen = name if name is not None else f"{kind}-{count}"
        if "/" in chosen or not chosen:
            raise ValueError(f"Operator name {chosen!r} must be non-empty without '/'")
        if chosen in {*self._sources, *self._states, *self._sinks}:
            raise ValueError(f"Two operators are named {chosen!r}; give each a unique name=")
        return chosen
