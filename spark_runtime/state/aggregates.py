"""Running count/sum/min/max by key, and the merge of aggregates that windows reuse.

An aggregate is ``output column -> (function, argument)``, the argument being Spark SQL (a
column name, or the resolved expression :mod:`spark_runtime.streaming.aggregation` reads from a
user's ``F.sum(...)``); ``count`` of None counts rows.

A running aggregate's state is one row per key with the aggregates so far; each epoch merges
the batch into it with one shuffle (:func:`merge_aggregates`). A tumbling window is the same
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


def merge_aggregates(
    state: DataFrame,
    rows: DataFrame,
    groups: Sequence[str],
    aggs: Mapping[str, tuple[str, str | None]],
    state_schema: StructType,
    partitions: int,
    partition_keys: Sequence[str],
) -> DataFrame:
    """The new aggregates of every group; ``FLAG_COLUMN`` marks the groups ``rows`` touched.

    The stored aggregates and the batch's rows are unioned, hash-partitioned by
    ``partition_keys`` into the state's ``partitions`` and aggregated per group: one shuffle,
    whose partitioning the aggregation reuses, so the new state comes out partitioned as
    the state must be. (A full outer join of the state with the batch's partial aggregates
    needs three: the batch's, the state's, and the join output's repartitioning.)
    """
    types = {f.name: f.dataType for f in state_schema.fields}
    stored = state.select(
        *groups, *[F.col(out).alias(f"_v_{out}") for out in aggs], F.lit(False).alias(FLAG_COLUMN)
    )
    fresh = rows.select(
        *[F.col(g).cast(types[g]).alias(g) for g in groups],
        *[
            _contribution(fn, col).cast(types[out]).alias(f"_v_{out}")
            for out, (fn, col) in aggs.items()
        ],
        F.lit(True).alias(FLAG_COLUMN),
    )
    combined = stored.unionByName(fresh).repartition(partitions, *partition_keys)
    return combined.groupBy(*groups).agg(
        *[
            _combine(fn, F.col(f"_v_{out}")).cast(types[out]).alias(out)
            for out, (fn, _c) in aggs.items()
        ],
        F.max(F.col(FLAG_COLUMN)).alias(FLAG_COLUMN),
    )


class RunningAggregate(KeyedState):
    """Running count/sum/min/max by key; each epoch outputs the new totals of keys it touched.

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

    @property
    def semantics(self) -> str:
        """Each aggregate's function and argument."""
        return describe_aggregates(self.aggs)

    def update(self, batch: DataFrame) -> DataFrame:
        """Adds the batch to the totals; returns ``keys + aggs`` of every key in the batch."""
        merged = checkpoint(
            merge_aggregates(
                self.state,
                batch,
                self.keys,
                self.aggs,
                self.state_schema,
                self._context.partitions,
                self.keys,
            )
        )
        self._replace_state(Checkpointed(merged.frame.drop(FLAG_COLUMN), merged.rdd_ids))
        return merged.frame.filter(F.col(FLAG_COLUMN)).drop(FLAG_COLUMN)
