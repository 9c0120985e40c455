"""What a user's ``groupBy(...).agg(...)`` asks of the state store, read from Spark's own plan.

A running aggregate keeps one row per key and merges each epoch's rows into it, so every
aggregate must be one the store can merge: ``count``, ``sum``, ``min`` and ``max``. Rather than
parse the user's Column text, the expressions are analysed by Spark against an empty batch of
the stream's schema: the analysed ``Aggregate`` names each output column, its function and the
SQL of its argument, exactly as Spark resolved them. Anything else (an average, a distinct
count, arithmetic around an aggregate) is rejected with what to write instead.

``F.window`` group columns are recognised the same way, by the function Spark prints.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.streaming.durations import parse_seconds, whole_seconds

MERGEABLE = {"Sum": "sum", "Count": "count", "Min": "min", "Max": "max"}
"""Spark's aggregate function classes the state store merges, by the runtime's name."""

_ADVICE = {
    "Average": "keep F.sum and F.count and divide them in a select() after the aggregation",
    "Count": "a distinct count cannot be merged: deduplicate with dropDuplicates first, then count",
}

_WINDOW = re.compile(
    r"^Column<'window\((?P<time>.+), '(?P<size>[^']*)', '(?P<slide>[^']*)', '(?P<start>[^']*)'\)'>$"
)


@dataclass(frozen=True)
class TumblingWindowSpec:
    """An ``F.window(time_column, duration)`` group column.

    Attributes:
        time_column: The event-time column.
        seconds: The window's length.
    """

    time_column: str
    seconds: int


def column_name(column: str | Column, columns: Sequence[str], what: str) -> str:
    """Returns the name a group or subset column refers to.

    Raises:
        ValueError: If the column is an expression, not one of ``columns``.
    """
    name = column if isinstance(column, str) else str(column)[len("Column<'") : -len("'>")]
    name = name.strip("`")
    if name not in columns:
        raise ValueError(
            f"{what} {column!s} is not a column of the stream ({', '.join(columns)}): give a "
            "column name, and add a computed key with withColumn() first"
        )
    return name


def window_spec(column: str | Column, columns: Sequence[str]) -> TumblingWindowSpec | None:
    """Returns the window an ``F.window`` group column asks for; None for other columns.

    Raises:
        ValueError: For a sliding window, a start offset, a session window, or a window over an
            expression instead of a time column.
    """
    if isinstance(column, str):
        return None
    text = str(column)
    if text.startswith("Column<'session_window("):
        raise ValueError(
            "F.session_window is not supported: only tumbling windows, F.window(time, duration), "
            "are kept in snapshots"
        )
    match = _WINDOW.match(text)
    if match is None:
        return None
    size, slide = match.group("size"), match.group("slide")
    if parse_seconds(slide, "The window's slide") != parse_seconds(size, "The window"):
        raise ValueError(
            f"Sliding windows ({size} every {slide}) are not supported: use a tumbling window, "
            f"F.window(time, {size!r})"
        )
    if parse_seconds(match.group("start"), "The window's start time") != 0:
        raise ValueError("A window start time offset is not supported: windows start at 0")
    time = column_name(match.group("time"), columns, "The window's time column")
    return TumblingWindowSpec(time, whole_seconds(size, "The window", minimum=1))


def aggregate_functions(
    template: DataFrame, groups: Sequence[str], expressions: Sequence[Column]
) -> dict[str, tuple[str, str]]:
    """Maps every aggregate column to (function, SQL of its argument), as Spark resolves it.

    Args:
        template: An empty batch with the stream's schema.
        groups: The group columns.
        expressions: The user's ``agg(...)`` arguments.

    Returns:
        Output column -> (``count``/``sum``/``min``/``max``, argument SQL), in the given order.

    Raises:
        ValueError: If there is no expression, one is not a single mergeable aggregate, or two
            have the same output name.
    """
    if not expressions:
        raise ValueError("agg() needs at least one aggregate, e.g. agg(F.sum('value'))")
    for expression in expressions:
        if not isinstance(expression, Column):
            raise ValueError(
                f"agg() takes Columns such as F.sum('value'), not {type(expression).__name__}"
            )
    plan = template.groupBy(*groups).agg(*expressions)._jdf.queryExecution().analyzed()
    outputs = plan.aggregateExpressions()
    found: dict[str, tuple[str, str]] = {}
    for index in range(len(groups), outputs.size()):
        named = outputs.apply(index)
        name = str(named.name())
        if any(c in name for c in ".`"):
            raise ValueError(
                f"Aggregate column {name!r}: give it a name without '.' or '`' with alias()"
            )
        if name in found or name in groups:
            raise ValueError(
                f"Two output columns are named {name!r}: give each aggregate an alias()"
            )
        found[name] = _mergeable(
            named.child() if named.getClass().getSimpleName() == "Alias" else named, name
        )
    return found


def _mergeable(expression: Any, name: str) -> tuple[str, str]:
    # ``expression`` is a py4j handle on Catalyst's resolved expression.
    kind = expression.getClass().getSimpleName()
    if kind != "AggregateExpression":
        raise ValueError(
            f"Aggregate column {name!r} is {expression.sql()}: an aggregate inside other "
            "arithmetic cannot be kept per key; aggregate alone and compute on the output"
        )
    function = expression.aggregateFunction()
    spark_name = function.getClass().getSimpleName()
    distinct = bool(expression.isDistinct())
    if spark_name not in MERGEABLE or distinct:
        advice = _ADVICE.get(spark_name, f"use one of {', '.join(MERGEABLE.values())}")
        raise ValueError(
            f"Aggregate column {name!r} is {expression.sql()}, which the state store cannot "
            f"merge epoch by epoch: {advice}"
        )
    if expression.filter().isDefined():
        raise ValueError(f"Aggregate column {name!r}: FILTER clauses are not supported")
    arguments = function.children()
    if arguments.size() != 1:
        raise ValueError(f"Aggregate column {name!r} must take exactly one argument")
    return MERGEABLE[spark_name], str(arguments.apply(0).sql())


def argument(sql: str) -> Column:
    """The Column an aggregate's argument SQL stands for."""
    return F.expr(sql)
