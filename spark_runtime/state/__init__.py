"""Keyed state operators: running aggregations, de-duplication, tumbling windows, pandas state.

- :mod:`~spark_runtime.state.keyed`: ``KeyedState``, the base every operator shares (fixed hash
  partitions, saved as Arrow IPC chunks from the executors and restored from them),
  ``StateContext``
- :mod:`~spark_runtime.state.aggregates`: ``RunningAggregate``, ``AGGREGATES`` and the one-shuffle
  merge of aggregates the windows reuse
- :mod:`~spark_runtime.state.deduplicate`: ``Deduplicate``
- :mod:`~spark_runtime.state.windows`: ``TumblingWindow``
- :mod:`~spark_runtime.state.pandas_state`: ``PandasState``, ``StateFunction``

Every update materialises the new state (``localCheckpoint``) before the epoch's output is
used, so an epoch computes each operator once and the plan never grows with the epoch count.
Every public name is importable from here, as the pipeline API does.
"""

from spark_runtime.state.aggregates import AGGREGATES, RunningAggregate
from spark_runtime.state.deduplicate import Deduplicate
from spark_runtime.state.keyed import (
    DRIVER_RESTORE_MAX_BYTES,
    DRIVER_RESTORE_MAX_CHUNKS,
    KeyedState,
    StateContext,
)
from spark_runtime.state.pandas_state import PandasState, StateFunction
from spark_runtime.state.windows import TumblingWindow

__all__ = [
    "AGGREGATES",
    "DRIVER_RESTORE_MAX_BYTES",
    "DRIVER_RESTORE_MAX_CHUNKS",
    "Deduplicate",
    "KeyedState",
    "PandasState",
    "RunningAggregate",
    "StateContext",
    "StateFunction",
    "TumblingWindow",
]
