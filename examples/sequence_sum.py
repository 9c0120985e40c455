"""Sequence sum: a generated sequence, a running sum per key, PostgreSQL with two-phase commit.

The expected result is known in closed form (key k gets every value n < end with n % keys ==
k), which is why the exactly-once chaos test uses this pipeline: any lost or duplicated
output shows up as a wrong sum.

Arguments (``--arg key=value``): ``dsn`` (required), ``table`` [sums], ``keys`` [10], ``end``
[100000], ``rows_per_epoch`` [1000], ``sink_mode`` [upsert]: ``append`` inserts every output
row instead of upserting by key, a sink that is not idempotent.
"""

from __future__ import annotations

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.pipeline import Pipeline
from spark_runtime.sinks import PostgresSink
from spark_runtime.sources import SequenceSource


def expected_sums(end: int, keys: int) -> dict[int, tuple[int, int]]:
    """Returns key -> (total, count) for the values 0 .. end - 1."""
    result: dict[int, tuple[int, int]] = {}
    for key in range(min(keys, end)):
        values = range(key, end, keys)
        result[key] = (sum(values), len(values))
    return result


def build(p: Pipeline) -> None:
    """Sequence -> key = value % keys -> running sum and count -> PostgreSQL."""
    args = p.args
    keys = int(args.get("keys", 10))
    numbers = p.read(
        SequenceSource(
            rows_per_epoch=int(args.get("rows_per_epoch", 1000)), end=int(args.get("end", 100_000))
        ),
        name="numbers",
    )
    keyed = numbers.select((F.col("value") % keys).alias("key"), F.col("value"))
    sums = p.running_aggregate(
        keyed, "key", {"total": ("sum", "value"), "count": ("count", None)}, name="sums"
    )
    append = args.get("sink_mode", "upsert") == "append"
    sink = PostgresSink(str(args["dsn"]), str(args.get("table", "sums")), () if append else ["key"])
    p.write(sums, sink, name="postgres")
