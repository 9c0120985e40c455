"""The pipeline API user modules program against: ``build(p)`` with PySpark DataFrames.

A pipeline module defines ``build(p)``. The runtime calls it once to *discover* the pipeline
(every source, state operator and sink becomes a snapshot participant before restore runs,
as Jet knows its DAG before restoring it), and then once per epoch, when ``p.read`` returns
that epoch's batch and the state operators return that epoch's output. Between those calls
the user's code only sees ordinary DataFrames, so any PySpark transformation works.

Operators are matched between calls by name: give ``name=`` or rely on the order of calls,
which requires ``build`` to make the same calls every time.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from snapshot_protocol.chunks import PipelineShape
from snapshot_protocol.ports import Participant
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.sinks.base import Sink, StagedSink
from spark_runtime.sinks.participant import SinkParticipant
from spark_runtime.sinks.staged import StagedSinkParticipant
from spark_runtime.sources.base import Offset, Source
from spark_runtime.sources.participant import SourceParticipant
from spark_runtime.state import (
    Deduplicate,
    KeyedState,
    PandasState,
    RunningAggregate,
    StateContext,
    StateFunction,
    TumblingWindow,
)

_log = logging.getLogger(__name__)


_Node = TypeVar("_Node")


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


class Pipeline:
    """The ``p`` handed to ``build(p)``.

    Args:
        spark: The session.
        state: Shared settings of the state operators.
        guarantee: The processing guarantee.
        job_uid: Names the job's sink transactions.
        args: The pipeline's arguments (``spec.pipeline.args``).
    """

    def __init__(
        self,
        spark: SparkSession,
        state: StateContext,
        guarantee: ProcessingGuarantee,
        job_uid: str,
        args: Mapping[str, Any],
    ) -> None:
        self.spark = spark
        self.args = dict(args)
        self._state_context = state
        self._guarantee = guarantee
        self._job_uid = job_uid
        self._sources: dict[str, SourceParticipant] = {}
        self._states: dict[str, KeyedState] = {}
        self._sinks: dict[str, SinkParticipant | StagedSinkParticipant] = {}
        self._participants: list[Participant] = []
        self._counters: dict[str, int] = {}
        self._discovering = True
        self._epoch = -1
        self._batches: dict[str, DataFrame] = {}

    # --- the user's API ---------------------------------------------------------------------

    def read(self, source: Source, name: str | None = None) -> DataFrame:
        """Returns this epoch's batch of ``source`` (empty if it has nothing new)."""
        key = self._name("source", name)
        if self._discovering:
            self._register(self._sources, key, SourceParticipant(key, source))
            return self.spark.createDataFrame([], source.schema(self.spark))
        self._lookup(self._sources, key)
        return self._batches[key]

    def running_aggregate(
        self,
        frame: DataFrame,
        key: str | Sequence[str],
        aggs: Mapping[str, tuple[str, str | None]],
        name: str | None = None,
    ) -> DataFrame:
        """Running aggregates by key, e.g. ``aggs={"total": ("sum", "value")}``.

        Functions: count, sum, min, max. Returns the key and the new aggregates of every key
        the epoch touched.
        """
        keys = _keys(key)
        return self._stateful(
            "aggregate",
            name,
            frame,
            lambda op_name: RunningAggregate(
                op_name, self._state_context, keys, aggs, frame.schema
            ),
        )

    def deduplicate(
        self, frame: DataFrame, key: str | Sequence[str], name: str | None = None
    ) -> DataFrame:
        """Returns the rows whose key was never seen before, one per key."""
        keys = _keys(key)
        return self._stateful(
            "dedup",
            name,
            frame,
            lambda op_name: Deduplicate(op_name, self._state_context, keys, frame.schema),
        )

    def tumbling_window(
        self,
        frame: DataFrame,
        key: str | Sequence[str],
        time_column: str,
        window_seconds: int,
        aggs: Mapping[str, tuple[str, str | None]],
        watermark_delay_seconds: int = 0,
        name: str | None = None,
    ) -> DataFrame:
        """Aggregates per key and tumbling event-time window; emits windows once closed.

        A window closes when the watermark (latest event time minus the delay) passes its
        end; rows arriving for a closed window are dropped. Output: key, ``window_start``,
        aggregates, ``window_end``.
        """
        keys = _keys(key)
        return self._stateful(
            "window",
            name,
            frame,
            lambda op_name: TumblingWindow(
                op_name,
                self._state_context,
                keys,
                time_column,
                window_seconds,
                aggs,
                watermark_delay_seconds,
                frame.schema,
            ),
        )

    def map_groups_with_state(
        self,
        frame: DataFrame,
        key: str | Sequence[str],
        function: StateFunction,
        state_schema: StructType | str,
        output_schema: StructType | str,
        name: str | None = None,
    ) -> DataFrame:
        """Runs ``function(key, batch_rows, state_rows) -> (new_state_rows, output_rows)``.

        The rows are pandas DataFrames; see :data:`spark_runtime.state.StateFunction`.
        """
        keys = _keys(key)
        return self._stateful(
            "pandas",
            name,
            frame,
            lambda op_name: PandasState(
                op_name,
                self._state_context,
                keys,
                function,
                self._schema(state_schema),
                self._schema(output_schema),
                frame.schema,
            ),
        )

    def write(self, frame: DataFrame, sink: Sink, name: str | None = None) -> None:
        """Sends ``frame`` to ``sink`` (published per the processing guarantee)."""
        key = self._name("sink", name)
        if self._discovering:
            sink.open(frame.schema, self._job_uid, key)
            participant = (
                StagedSinkParticipant(key, sink, self._guarantee, self._state_context)
                if isinstance(sink, StagedSink)
                else SinkParticipant(key, sink, self._guarantee)
            )
            self._register(self._sinks, key, participant)
            return
        self._lookup(self._sinks, key).accept(self._epoch, frame)

    # --- the runtime's side ------------------------------------------------------------------

    @property
    def participants(self) -> list[Participant]:
        """Every source, state operator and sink, in the order ``build`` made them."""
        return list(self._participants)

    def shape(self, state_partitions: int) -> PipelineShape:
        """What a snapshot must have been written by for this pipeline to restore it.

        Each participant is described by what its chunks hold: a source or sink by its class
        (offsets and transaction ids mean nothing to another kind), a state operator by its
        class, keys and state schema. Restore step 4 compares this with the snapshot's.
        """
        described: dict[str, str] = {}
        for participant in self._participants:
            if isinstance(participant, KeyedState):
                described[participant.name] = (
                    f"{type(participant).__name__}(keys={','.join(participant.keys)}; "
                    f"{participant.state_schema.simpleString()})"
                )
            elif isinstance(participant, SourceParticipant):
                described[participant.name] = type(participant.source).__name__
            elif isinstance(participant, SinkParticipant | StagedSinkParticipant):
                described[participant.name] = type(participant.sink).__name__
            else:
                described[participant.name] = type(participant).__name__
        return PipelineShape(described, state_partitions)

    def discover(self, build: Callable[[Pipeline], None]) -> None:
        """Runs ``build`` once on empty batches to register every participant.

        Raises:
            ValueError: If the pipeline reads no source or writes no sink.
        """
        self._counters = {}
        build(self)
        self._discovering = False
        if not self._sources or not self._sinks:
            raise ValueError("A pipeline must read at least one source and write one sink")

    def plan_epoch(self) -> EpochPlan | None:
        """Decides the next epoch's ranges; None if no source has anything new.

        Once every source is exhausted and a state operator still holds open output (a
        tumbling window not yet closed), returns a closing plan without ranges: its epoch
        emits that output, and the operators save that they did so with the next snapshot.
        So the driver runs the closing epoch before the final snapshot, exactly once per
        snapshot lineage, without knowing about it.
        """
        ranges = {}
        for name, participant in self._sources.items():
            end = participant.source.next_offset(participant.offset)
            if end is not None:
                ranges[name] = (participant.offset, end)
        if ranges:
            return EpochPlan(ranges)
        if self.exhausted() and any(s.holds_open_output for s in self._states.values()):
            return EpochPlan({}, end_of_input=True)
        return None

    def exhausted(self) -> bool:
        """Whether every source has reached its end."""
        return all(p.source.is_exhausted(p.offset) for p in self._sources.values())

    def run_epoch(self, build: Callable[[Pipeline], None], epoch: int, plan: EpochPlan) -> None:
        """Runs one epoch over ``plan`` and advances the sources' offsets."""
        self._epoch = epoch
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
        self._counters = {}
        build(self)
        for name, (_start, end) in plan.ranges.items():
            self._sources[name].offset = end
        self._batches = {}

    # --- plumbing ----------------------------------------------------------------------------

    def _stateful(
        self,
        kind: str,
        name: str | None,
        frame: DataFrame,
        make: Callable[[str], KeyedState],
    ) -> DataFrame:
        key = self._name(kind, name)
        if self._discovering:
            operator = make(key)
            self._register(self._states, key, operator)
            return self.spark.createDataFrame([], operator.output_schema)
        return self._lookup(self._states, key).update(frame)

    def _name(self, kind: str, name: str | None) -> str:
        count = self._counters.get(kind, 0)
        self._counters[kind] = count + 1
        chosen = name if name is not None else f"{kind}-{count}"
        if "/" in chosen or not chosen:
            raise ValueError(f"Operator name {chosen!r} must be non-empty without '/'")
        return chosen

    def _register(self, registry: dict[str, _Node], key: str, node: _Node) -> None:
        if key in self._all_names():
            raise ValueError(f"Two operators are named {key!r}; give each a unique name=")
        registry[key] = node
        assert isinstance(
            node, SourceParticipant | KeyedState | SinkParticipant | StagedSinkParticipant
        )
        self._participants.append(node)

    def _all_names(self) -> set[str]:
        return {*self._sources, *self._states, *self._sinks}

    def _lookup(self, registry: dict[str, _Node], key: str) -> _Node:
        node = registry.get(key)
        if node is None:
            raise ValueError(
                f"build() used operator {key!r}, which it did not make when the pipeline was "
                "discovered; build() must make the same calls in every epoch"
            )
        return node

    def _schema(self, schema: StructType | str) -> StructType:
        if isinstance(schema, StructType):
            return schema
        parsed: StructType = self.spark.createDataFrame([], schema).schema
        return parsed


def _keys(key: str | Sequence[str]) -> list[str]:
    return [key] if isinstance(key, str) else list(key)
