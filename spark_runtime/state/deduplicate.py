"""De-duplication by key: the state is the set of keys seen so far."""

from __future__ import annotations

import sys
from collections.abc import Sequence

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from spark_runtime.lineage import checkpoint, hold
from spark_runtime.state.keyed import KeyedState, StateContext


class Deduplicate(KeyedState):
    """Passes the first row of every key and drops later rows with a key seen before.

    Which row of one batch wins for a key is Spark's choice; give rows with equal keys equal
    content if replays must reproduce the output exactly. An epoch only adds the keys it saw
    first, so its snapshots can be incremental.
    """

    tracks_changes = True

    def __init__(
        self, name: str, context: StateContext, keys: Sequence[str], input_schema: StructType
    ) -> None:
        key_fields = [input_schema[k] for k in keys]
        super().__init__(name, context, keys, StructType(key_fields))
        self._input_schema = input_schema

    @property
    def output_schema(self) -> StructType:
        """The input's schema: output rows are input rows."""
        return self._input_schema

    def update(self, batch: DataFrame) -> DataFrame:
        """Returns the batch's rows whose key was never seen, one per key."""
        unseen = batch.dropDuplicates(list(self.keys)).join(
            self.state, list(self.keys), "left_anti"
        )
        # A join on column names puts the keys first; output rows keep the input's order.
        fresh = checkpoint(unseen.select(*batch.columns))
        seen = self.state.unionByName(fresh.frame.select(*self.keys))
        self._replace_state(checkpoint(self._partitioned(seen)))
        if self.records_changes:
            # The new keys are the epoch's changes: held from the output's stored data, or
            # copied if it cannot be held.
            keys = fresh.frame.select(*self.keys)
            self._record_changes(hold(keys, sys.maxsize) or checkpoint(keys))
        return self._keep_output(fresh)
