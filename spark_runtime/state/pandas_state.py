"""Arbitrary keyed state over pandas, with Spark's own ``GroupState`` and timeouts.

The user's function has the shape ``applyInPandasWithState`` gives it:
``func(key, batches, state) -> Iterator[pd.DataFrame]``, where ``state`` is PySpark's
:class:`pyspark.sql.streaming.state.GroupState` itself, so ``get``/``update``/``remove``,
``setTimeoutDuration``/``setTimeoutTimestamp`` and ``hasTimedOut`` behave as Spark documents
them. Each key's value and timeout are stored as one row of the operator's keyed state, so
they are saved with every snapshot and restored with it.

As in Spark, each epoch calls the function for every key of the epoch's batch, then once with
``hasTimedOut`` for every other key whose timeout passed: the epoch's processing time (taken on
the driver when the epoch reaches this operator) for ``ProcessingTimeTimeout``, the watermark for
``EventTimeTimeout``. A timeout must be set again in every call, or the key no longer times out.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import pandas as pd
from pyspark.sql import DataFrame, Row
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout
from pyspark.sql.types import LongType, StringType, StructField, StructType

from spark_runtime.lineage import Checkpointed, checkpoint
from spark_runtime.state.keyed import KeyedState, StateContext

StateFunction = Callable[
    [tuple[Any, ...], Iterator[pd.DataFrame], GroupState], Iterator[pd.DataFrame]
]
"""``func(key, batches, state) -> output frames``, as for ``applyInPandasWithState``."""

TIMEOUTS = (
    GroupStateTimeout.NoTimeout,
    GroupStateTimeout.ProcessingTimeTimeout,
    GroupStateTimeout.EventTimeTimeout,
)
OUTPUT_MODES = ("append", "update")

_KIND = "_sj_kind"
_TIMEOUT = "_sj_timeout_ms"
_NO_TIMESTAMP = GroupState.NO_TIMESTAMP


def _python(value: Any) -> Any:
    """A stored pandas value as the plain Python value Spark hands ``GroupState``."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    if value is pd.NaT:
        return None
    if hasattr(value, "to_pydatetime"):
        return value.to_pydatetime()
    return value.item() if hasattr(value, "item") else value


class PandasState(KeyedState):
    """Runs a user's function per key over the epoch's rows with a ``GroupState``.

    Args:
        name: Operator name.
        context: Shared state settings.
        keys: Key columns.
        function: The state function.
        state_schema: The schema of one key's state value (the tuple ``update`` takes).
        output_schema: The schema of the function's output frames.
        input_schema: The schema of the batches.
        timeout: One of :data:`TIMEOUTS`.
        event_time: The watermark's column and delay in seconds, if the stream has one.
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
        timeout: str = GroupStateTimeout.NoTimeout,
        event_time: tuple[str, int] | None = None,
    ) -> None:
        if timeout not in TIMEOUTS:
            raise ValueError(f"timeoutConf {timeout!r} is not one of {', '.join(TIMEOUTS)}")
        if timeout == GroupStateTimeout.EventTimeTimeout and event_time is None:
            raise ValueError(
                "EventTimeTimeout needs a watermark: call withWatermark(...) on the stream first"
            )
        key_fields = [input_schema[k] for k in keys]
        super().__init__(
            name,
            context,
            keys,
            StructType([*key_fields, *state_schema.fields, StructField(_TIMEOUT, LongType())]),
        )
        self.function = function
        self.value_schema = state_schema
        self.timeout = timeout
        self.event_time = event_time
        self.watermark_ms: int | None = None
        self._output_schema = output_schema
        self._combined = StructType(
            [
                *key_fields,
                StructField(_KIND, StringType(), False),
                *[StructField(f"_st_{f.name}", f.dataType, True) for f in state_schema.fields],
                StructField(_TIMEOUT, LongType(), True),
                *[StructField(f"_out_{f.name}", f.dataType, True) for f in output_schema.fields],
            ]
        )

    @property
    def output_schema(self) -> StructType:
        """The schema the function's output rows have."""
        return self._output_schema

    @property
    def semantics(self) -> str:
        """The timeout kind: timeouts stored under one mean nothing under another."""
        return f"timeout={self.timeout}"

    def driver_values(self) -> dict[str, Any]:
        """Adds the watermark (epoch milliseconds or None)."""
        return {**super().driver_values(), "watermarkMs": self.watermark_ms}

    def load_driver_values(self, values: Mapping[str, Any]) -> None:
        """Restores the watermark."""
        super().load_driver_values(values)
        self.watermark_ms = values.get("watermarkMs")

    def _reset_driver_values(self) -> None:
        self.watermark_ms = None

    def _advance_watermark(self, batch: DataFrame) -> None:
        if self.event_time is None:
            return
        column, delay_s = self.event_time
        latest = batch.agg(F.max(F.unix_millis(F.col(column)))).first()
        if latest is not None and latest[0] is not None:
            candidate = int(latest[0]) - delay_s * 1000
            if self.watermark_ms is None or candidate > self.watermark_ms:
                self.watermark_ms = candidate

    def update(self, batch: DataFrame) -> DataFrame:
        """Calls the function per key (and per timed-out key) and returns its output rows."""
        self._advance_watermark(batch)
        per_key = _PerKey(
            self.function,
            list(self.keys),
            self.value_schema,
            [f.name for f in self.output_schema.fields],
            [f.name for f in self._combined.fields],
            self.timeout,
            int(time.time() * 1000),
            self.watermark_ms,
        )
        key_names = list(self.keys)

        # PySpark counts a function's parameters to tell the cogroup's forms apart: a plain
        # function, since a callable object's ``self`` would count as a fourth.
        def call(key: tuple[Any, ...], rows: pd.DataFrame, stored: pd.DataFrame) -> pd.DataFrame:
            return per_key(key, rows, stored)

        grouped = batch.groupBy(*key_names).cogroup(self.state.groupBy(*key_names))
        combined = checkpoint(self._partitioned(grouped.applyInPandas(call, self._combined)))
        is_state = F.col(_KIND) == F.lit("s")
        new_state = combined.frame.filter(is_state).select(
            *key_names,
            *[F.col(f"_st_{f.name}").cast(f.dataType).alias(f.name) for f in self.value_schema],
            F.col(_TIMEOUT),
        )
        self._replace_state(Checkpointed(new_state, combined.rdd_ids))
        return combined.frame.filter(~is_state).select(
            *[F.col(f"_out_{f.name}").cast(f.dataType).alias(f.name) for f in self.output_schema]
        )


class _PerKey:
    """The cogroup function: one key's rows and stored state in, its new state and output out.

    A class rather than a closure, so that what is shipped to the executors is explicit.
    """

    def __init__(
        self,
        function: StateFunction,
        key_names: list[str],
        value_schema: StructType,
        output_names: list[str],
        combined_names: list[str],
        timeout: str,
        processing_ms: int,
        watermark_ms: int | None,
    ) -> None:
        self.function = function
        self.key_names = key_names
        self.value_schema = value_schema
        self.value_names = [f.name for f in value_schema.fields]
        self.output_names = output_names
        self.combined_names = combined_names
        self.timeout = timeout
        self.processing_ms = processing_ms
        self.watermark_ms = watermark_ms

    def _timed_out(self, timeout_ms: int) -> bool:
        if timeout_ms == _NO_TIMESTAMP:
            return False
        if self.timeout == GroupStateTimeout.ProcessingTimeTimeout:
            return timeout_ms <= self.processing_ms
        if self.timeout == GroupStateTimeout.EventTimeTimeout:
            return self.watermark_ms is not None and timeout_ms <= self.watermark_ms
        return False

    def __call__(
        self, key: tuple[Any, ...], rows: pd.DataFrame, stored: pd.DataFrame
    ) -> pd.DataFrame:
        exists = len(stored) > 0
        value = [_python(v) for v in stored.iloc[0][self.value_names]] if exists else None
        old_timeout = (
            int(stored.iloc[0][_TIMEOUT])
            if exists and not pd.isna(stored.iloc[0][_TIMEOUT])
            else _NO_TIMESTAMP
        )
        timed_out = rows.empty and exists and self._timed_out(old_timeout)
        if rows.empty and not timed_out:
            # Untouched key: its value and timeout stay as they are.
            return self._frame(key, [(value, old_timeout)] if value is not None else [], [])
        # PySpark's own GroupState, built as its applyInPandasWithState runner builds it (the
        # constructor and ``_timeout_timestamp`` are PySpark's internals; test_pipeline_api
        # runs the same function on Structured Streaming and here, which pins them).
        state = GroupState(
            Row(*(value or [])),
            self.processing_ms,
            self.watermark_ms if self.watermark_ms is not None else _NO_TIMESTAMP,
            self.timeout,
            timed_out,
            self.watermark_ms is not None,
            exists,
            False,
            False,
            _NO_TIMESTAMP,
            b"",
            self.value_schema,
        )
        batches = iter([] if rows.empty else [rows.reset_index(drop=True)])
        outputs = [frame for frame in self.function(key, batches, state) if len(frame)]
        kept = [] if not state.exists else [(list(state.get), state._timeout_timestamp)]
        return self._frame(key, kept, outputs)

    def _frame(
        self,
        key: tuple[Any, ...],
        kept: Sequence[tuple[list[Any], int]],
        outputs: list[pd.DataFrame],
    ) -> pd.DataFrame:
        parts = []
        for value, timeout_ms in kept:
            part = pd.DataFrame(
                {f"_st_{c}": [v] for c, v in zip(self.value_names, value, strict=True)}
            )
            part[_TIMEOUT] = timeout_ms
            part[_KIND] = "s"
            parts.append(part)
        for output in outputs:
            missing = [c for c in self.output_names if c not in output.columns]
            if missing:
                raise ValueError(
                    f"The state function's output lacks columns {missing} of its outputStructType"
                )
            part = pd.DataFrame({f"_out_{c}": output[c].to_numpy() for c in self.output_names})
            part[_KIND] = "o"
            parts.append(part)
        if not parts:
            return pd.DataFrame(columns=self.combined_names)
        frame = pd.concat(parts, ignore_index=True)
        for name, value in zip(self.key_names, key, strict=True):
            frame[name] = value
        # A state row has no output values and an output row no state: those cells are None
        # in object columns, which Arrow takes as nulls of any type (NaN would have to be
        # cast from float, which fails for strings).
        for name in self.combined_names:
            if name not in frame.columns:
                frame[name] = pd.Series([None] * len(frame), dtype=object)
            elif frame[name].isna().any():
                frame[name] = frame[name].astype(object).where(frame[name].notna(), None)
        return frame[self.combined_names]
