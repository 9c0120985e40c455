"""Sequence -> running sum per key -> a Hazelcast map: a bounded job whose output a test reads.

Why this pipeline for the end-to-end tests: its exact result is known in closed form (key k
holds the sum and count of every n < end with n % keys == k), so any lost or duplicated epoch
shows up as a wrong number, and its sink is the installation's own Hazelcast cluster, which
the test can read with ``kubectl exec`` into a member without any other service in the
cluster. The map sink upserts by key, so a replay after a restore ends in the same map.

Arguments (``spec.pipeline.args``): ``map`` (required), ``keys`` [5], ``end`` [1000],
``rows_per_epoch`` [100] or ``rows_per_second`` (paces the job, for tests that suspend it),
``members`` and ``cluster_name`` (default: the installation's store, from the driver's
``SJ_HAZELCAST_ADDRESS`` / ``SJ_HAZELCAST_CLUSTER``).
"""

from __future__ import annotations

import os

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import HazelcastMapSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline


def expected_sums(end: int, keys: int) -> dict[str, dict[str, int]]:
    """Returns the map's final content: key -> {"key", "total", "count"} for 0 .. end - 1."""
    result: dict[str, dict[str, int]] = {}
    for key in range(min(keys, end)):
        values = range(key, end, keys)
        result[str(key)] = {"key": key, "total": sum(values), "count": len(values)}
    return result


def define_pipeline(p: Pipeline) -> None:
    """Sequence -> key = value % keys -> running sum and count -> Hazelcast map."""
    args = p.args
    keys = int(args.get("keys", 5))
    end = int(args.get("end", 1000))
    if "rows_per_second" in args:
        source = SequenceSource(rows_per_second=float(args["rows_per_second"]), end=end)
    else:
        source = SequenceSource(rows_per_epoch=int(args.get("rows_per_epoch", 100)), end=end)
    numbers = p.readStream(source, name="numbers")
    keyed = numbers.select((F.col("value") % keys).alias("key"), F.col("value"))
    sums = keyed.groupBy("key").agg(
        F.sum("value").alias("total"), F.count("*").alias("count"), name="sums"
    )
    members = str(args.get("members") or os.environ.get("SJ_HAZELCAST_ADDRESS", ""))
    cluster = str(args.get("cluster_name") or os.environ.get("SJ_HAZELCAST_CLUSTER", "dev"))
    if not members:
        raise ValueError("No Hazelcast members: give args.members or run under the operator")
    sink = HazelcastMapSink(members.split(","), cluster, str(args["map"]), ["key"])
    sums.writeStream(sink, name="map")
