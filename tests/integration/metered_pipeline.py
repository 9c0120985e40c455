"""A pipeline for the driver metrics test: a gated sequence -> sums by key -> files, and every
number into a Hazelcast map.

The gate is :class:`tests.integration.driver_pipeline.GatedSequence`: the test writes into
``limit_file`` how far the job may read. The two sinks stand for the two kinds the rows-written
metric tells apart (:mod:`spark_runtime.metrics`): Spark's file writer counts nothing, so the
file sink has no series; the map sink counts the entries it puts, one per number here.

Arguments: ``limit_file``, ``out``, ``members`` (comma-separated), ``cluster``, ``map``
(required); ``end`` [600], ``keys`` [3], ``rows_per_epoch`` [50].
"""

from __future__ import annotations

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import FileSink, HazelcastMapSink
from spark_runtime.streaming import Pipeline
from tests.integration.driver_pipeline import GatedSequence


def define_pipeline(p: Pipeline) -> None:
    """Gated sequence -> running sum and count by key -> JSON files; numbers -> a map."""
    args = p.args
    numbers = p.readStream(
        GatedSequence(
            str(args["limit_file"]),
            rows_per_epoch=int(args.get("rows_per_epoch", 50)),
            end=int(args.get("end", 600)),
        ),
        name="numbers",
    )
    keyed = numbers.select((F.col("value") % int(args.get("keys", 3))).alias("key"), "value")
    sums = keyed.groupBy("key").agg(
        F.sum("value").alias("total"), F.count("*").alias("count"), name="sums"
    )
    sums.writeStream(FileSink(str(args["out"])), name="files")
    members = str(args["members"]).split(",")
    numbers.select("value").writeStream(
        HazelcastMapSink(members, str(args["cluster"]), str(args["map"]), ["value"]), name="map"
    )
