"""Running count/sum/min/max by key, and the merge of aggregates that windows reuse.

An aggregate is ``output column -> (function, argument)``, the argument being Spark SQL (a
column name, or the resolved expression :mod:`spark_runtime.streaming.aggregation` reads from a
user's ``F.sum(...)``); ``count`` of None counts rows.

A running aggregate's state is one row per key with the aggregates so far; each epoch merges
the batch into it with one shuffle (:class:`MergePlan`). A tumbling window is the same
merge with the window's start as one more group column, so it imports the merge from here.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StructType

from spark_runtime.lineage import Checkpointed, checkpoint
from spark_runtime.state.keyed import KeyedState, StateContext

AGGREGATES = ("count", "sum", "min", "max")
"""The running aggregates: each merges a batch's partial result into the stored one."""

FLAG_COLUMN = "_sj_flag"
"""A transient boolean column marking rows of a merge: the groups touched, or windows closed."""


def _aggregate(function: str, column: str | None) -> Column:
    if function == "count":
        return F.count(F.lit(1) if column is None else F.expr(column))
    if column is None:
        raise ValueError(f"Aggregate {function} needs a column")
    return {"sum": F.sum, "min": F.min, "max": F.max}[function](F.expr(column))


def _contribution(function: str, column: str | None) -> Column:
    """What one input row adds to a running aggregate (a count adds 1 per non-null value)."""
    if function == "count":
        if column is None:
            return F.lit(1)
        return F.when(F.expr(column).isNull(), F.lit(0)).otherwise(F.lit(1))
    if column is None:
        raise ValueError(f"Aggregate {function} needs a column")
    return F.expr(column)


def _combine(function: str, column: Column) -> Column:
    """Aggregates stored values and row contributions of one group into the new value."""
    if function == "count":
        return F.coalesce(F.sum(column), F.lit(0))
    # sum/min/max skip nulls, which is what a running aggregate over sparse data needs.
    return {"sum": F.sum, "min": F.min, "max": F.max}[function](column)


def check_aggregates(aggs: Mapping[str, tuple[str, str | None]]) -> None:
    """Rejects an empty or unknown aggregate when the operator is built, not in the first epoch.

    Raises:
        ValueError: If ``aggs`` is empty or names a function not in :data:`AGGREGATES`.
    """
    if not aggs:
        raise ValueError("Give at least one aggregate, e.g. {'total': ('sum', 'value')}")
    for out, (function, _column) in aggs.items():
        if function not in AGGREGATES:
            raise ValueError(f"Aggregate {out}: {function!r} is not one of {AGGREGATES}")


def describe_aggregates(aggs: Mapping[str, tuple[str, str | None]]) -> str:
    """``out=function(argument)`` of every aggregate, for the restore check."""
    return ",".join(f"{out}={fn}({col or '*'})" for out, (fn, col) in aggs.items())


def partial_aggregates(
    batch: DataFrame, groups: Sequence[str], aggs: Mapping[str, tuple[str, str | None]]
) -> DataFrame:
    """The batch's own aggregates per group; on an empty batch, it gives the state's schema."""
    return batch.groupBy(*groups).agg(
        *[_aggregate(fn, col).alias(out) for out, (fn, col) in aggs.items()]
    )


class MergePlan:
    """The merge of a batch into stored aggregates, its column expressions built once.

    Each ``functions`` call and each Column method is a few py4j round trips into the JVM
    (about 2 ms a column on the 2-core test machine), and a merge needs some twenty of them:
    built every epoch, they were about 45 ms of a 290 ms near-empty epoch
    (docs/development/performance.md, "The epoch floor"). A Column is an unresolved expression, so
    the same ones serve every epoch's plan.

    Args:
        groups: The group columns (the state's keys).
        aggs: Output column -> (function, argument).
        state_schema: The stored aggregates' schema.
        partitions: The state partitions.
        partition_keys: The columns whose hash picks a row's partition.
    """

    def __init__(
        self,
        groups: Sequence[str],
        aggs: Mapping[str, tuple[str, str | None]],
        state_schema: StructType,
        partitions: int,
        partition_keys: Sequence[str],
    ) -> None:
        types = {f.name: f.dataType for f in state_schema.fields}
        self._groups = list(groups)
        self._partitions = partitions
        self._partition_keys = list(partition_keys)
        self._stored = [
            *[F.col(g) for g in groups],
            *[F.col(out).alias(f"_v_{out}") for out in aggs],
            F.lit(False).alias(FLAG_COLUMN),
        ]
        self._fresh = [
            *[F.col(g).cast(types[g]).alias(g) for g in groups],
            *[
                _contribution(fn, col).cast(types[out]).alias(f"_v_{out}")
                for out, (fn, col) in aggs.items()
            ],
            F.lit(True).alias(FLAG_COLUMN),
        ]
        self._combined = [
            *[
                _combine(fn, F.col(f"_v_{out}")).cast(types[out]).alias(out)
                for out, (fn, _c) in aggs.items()
            ],
            F.max(F.col(FLAG_COLUMN)).alias(FLAG_COLUMN),
        ]
        self.touched = F.col(FLAG_COLUMN)
        """Selects the rows of groups the batch touched (or windows closed)."""

    def apply(self, state: DataFrame, rows: DataFrame, state_partitioned: bool) -> DataFrame:
        """The new aggregates of every group; ``FLAG_COLUMN`` marks the groups ``rows`` touched.

        The stored aggregates and the batch's rows are unioned, hash-partitioned by the
        partition keys into the state's partitions and aggregated per group: the new state
        comes out partitioned as the state must be. (A full outer join of the state with
        the batch's partial aggregates needs three shuffles: the batch's, the state's, and
        the join output's repartitioning.)

        Args:
            state: The stored aggregates.
            rows: The batch.
            state_partitioned: Whether Spark knows ``state`` to be hash-partitioned by the
                partition keys into the state's partitions
                (:func:`~spark_runtime.lineage.hash_partitioned`). Then only the batch is
                shuffled, into the state's partitions, and partition ``p`` of the state is
                merged with partition ``p`` of the batch where it is: a near-empty epoch
                no longer sends the whole state through a shuffle. Otherwise both are.
        """
        stored = state.select(*self._stored)
        fresh = rows.select(*self._fresh)
        if state_partitioned:
            combined = stored.unionByName(
                fresh.repartition(self._partitions, *self._partition_keys)
            )
        else:
            combined = stored.unionByName(fresh).repartition(
                self._partitions, *self._partition_keys
            )
        return combined.groupBy(*self._groups).agg(*self._combined)


class RunningAggregate(KeyedState):
    """Running count/sum/min/max by key; each epoch outputs the new totals of keys it touched.

    An epoch changes only the groups it touches, so its snapshots can be incremental.

    Args:
        name: Operator name.
        context: Shared state settings.
        keys: Key columns.
        aggs: Output column -> (function, input column); ``count`` may take None.
        input_schema: The schema of the batches, to derive the state's types.
    """

    def __init__(
        self,
        name: str,
        context: StateContext,
        keys: Sequence[str],
        aggs: Mapping[str, tuple[str, str | None]],
        input_schema: StructType,
    ) -> None:
        check_aggregates(aggs)
        self.aggs = dict(aggs)
        probe = partial_aggregates(context.spark.createDataFrame([], input_schema), keys, self.aggs)
        super().__init__(name, context, keys, probe.schema)
        self._merge = MergePlan(keys, self.aggs, probe.schema, context.partitions, keys)

    tracks_changes = True

    @property
    def semantics(self) -> str:
        """Each aggregate's function and argument."""
        return describe_aggregates(self.aggs)

    def update(self, batch: DataFrame) -> DataFrame:
        """Adds the batch to the totals; returns ``keys + aggs`` of every key in the batch."""
        partitioned = self.state_partitioned
        merged = self._checkpoint_state(
            self._merge.apply(self.state, batch, partitioned), partitioned
        )
        self._replace_state(
            Checkpointed(merged.frame.drop(FLAG_COLUMN), merged.rdd_ids, merged.partitioning)
        )
        output = merged.frame.filter(self._merge.touched).drop(FLAG_COLUMN)
        if not self.records_changes:
            return output
        # The touched groups' new totals are this epoch's changes; materialised, the change
        # log outlives the state they came from, and the sinks read the small copy.
        changed = checkpoint(output)
        self._record_changes(changed)
        return changed.frame
