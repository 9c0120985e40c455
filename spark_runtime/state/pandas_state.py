"""A general per-key state function over pandas, for state no built-in operator keeps."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StringType, StructField, StructType

from spark_runtime.lineage import Checkpointed, checkpoint
from spark_runtime.state.keyed import KeyedState, StateContext

StateFunction = Callable[
    [tuple[Any, ...], pd.DataFrame, pd.DataFrame], tuple[pd.DataFrame, pd.DataFrame]
]
"""``fn(key, batch_rows, state_rows) -> (new_state_rows, output_rows)`` for one key.

``state_rows`` and ``new_state_rows`` have the state schema without the key columns; an empty
``new_state_rows`` removes the key's state. Called only for keys present in the batch."""

_KIND = "_sj_kind"


class PandasState(KeyedState):
    """A general per-key state function over pandas, like Spark's ``applyInPandasWithState``.

    Each epoch cogroups the batch and the state by key and calls the function for every key in
    the batch; keys only in the state keep their state untouched.

    Args:
        name: Operator name.
        context: Shared state settings.
        keys: Key columns.
        function: The state function.
        state_schema: Schema of the per-key state rows, without the key columns.
        output_schema: Schema of the output rows.
        input_schema: The schema of the batches.
    """

    def __init__(
        self,
        name: str,
        context: StateContext,
        keys: Sequence[str],
        function: StateFunction,
        state_schema: StructType,
        output_schema: StructType,
        input_schema: StructType,
    ) -> None:
        key_fields = [input_schema[k] for k in keys]
        super().__init__(name, context, keys, StructType([*key_fields, *state_schema.fields]))
        self.function = function
        self.value_schema = state_schema
        self._output_schema = output_schema
        self._combined = StructType(
            [
                *key_fields,
                StructField(_KIND, StringType(), False),
                *[StructField(f"_st_{f.name}", f.dataType, True) for f in state_schema.fields],
                *[StructField(f"_out_{f.name}", f.dataType, True) for f in output_schema.fields],
            ]
        )

    @property
    def output_schema(self) -> StructType:
        """The schema the function's output rows have."""
        return self._output_schema

    def update(self, batch: DataFrame) -> DataFrame:
        """Runs the function per key and returns its output rows."""
        key_names = list(self.keys)
        value_names = [f.name for f in self.value_schema.fields]
        output_names = [f.name for f in self.output_schema.fields]
        combined_names = [f.name for f in self._combined.fields]
        function = self.function

        def per_key(key: tuple[Any, ...], rows: pd.DataFrame, stored: pd.DataFrame) -> pd.DataFrame:
            stored_values = stored[value_names].reset_index(drop=True)
            if rows.empty:
                new_state, output = stored_values, pd.DataFrame(columns=output_names)
            else:
                new_state, output = function(key, rows.reset_index(drop=True), stored_values)
            parts = []
            if len(new_state):
                part = pd.DataFrame({f"_st_{c}": new_state[c].to_numpy() for c in value_names})
                part[_KIND] = "s"
                parts.append(part)
            if len(output):
                part = pd.DataFrame({f"_out_{c}": output[c].to_numpy() for c in output_names})
                part[_KIND] = "o"
                parts.append(part)
            if not parts:
                return pd.DataFrame(columns=combined_names)
            frame = pd.concat(parts, ignore_index=True)
            for name, value in zip(key_names, key, strict=True):
                frame[name] = value
            return frame.reindex(columns=combined_names)

        grouped = batch.groupBy(*key_names).cogroup(self.state.groupBy(*key_names))
        combined = checkpoint(self._partitioned(grouped.applyInPandas(per_key, self._combined)))
        is_state = F.col(_KIND) == F.lit("s")
        new_state = combined.frame.filter(is_state).select(
            *key_names,
            *[F.col(f"_st_{f.name}").cast(f.dataType).alias(f.name) for f in self.value_schema],
        )
        self._replace_state(Checkpointed(new_state, combined.rdd_ids))
        return combined.frame.filter(~is_state).select(
            *[F.col(f"_out_{f.name}").cast(f.dataType).alias(f.name) for f in self.output_schema]
        )
