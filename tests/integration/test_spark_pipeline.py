"""The pipeline's epoch planning at the end of bounded input, on a real local Spark.

The driver loop only knows ``plan_epoch`` / ``run_epoch`` / ``exhausted``; a bounded job with a
tumbling window must get exactly one closing epoch from ``plan_epoch`` after its sources are
exhausted, whose output holds the windows the watermark never closed.
"""

from __future__ import annotations

from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime import cds
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.sinks import Sink
from spark_runtime.sources import SequenceSource
from spark_runtime.state import StateContext
from spark_runtime.streaming import Pipeline


class _Collect(Sink):
    """Keeps every written row, per write."""

    def __init__(self) -> None:
        self.writes: list[list[tuple[Any, ...]]] = []

    def write(self, frame: DataFrame) -> None:
        self.writes.append(sorted(tuple(row) for row in frame.collect()))


def _pipeline(spark: SparkSession, window: bool) -> tuple[Pipeline, _Collect]:
    sink = _Collect()

    def define_pipeline(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=30, end=90, event_time_step_ms=1000))
        keyed = numbers.select((F.col("value") % 2).alias("key"), "value", "timestamp")
        if window:
            windows = (
                keyed.withWatermark("timestamp", "0 seconds")
                .groupBy("key", F.window("timestamp", "40 seconds"))
                .agg(F.count("*").alias("n"))
            )
            out = windows.select("key", F.unix_timestamp("window.start").alias("start"), "n")
        else:
            out = keyed.groupBy("key").agg(F.count("*").alias("n"))
        out.writeStream(sink)

    context = StateContext(spark, 4, StoreAddress(("127.0.0.1:1",), "unused"))
    pipeline = Pipeline(spark, context, ProcessingGuarantee.NONE, "uid", {})
    pipeline.define(define_pipeline)
    return pipeline, sink


def _run_all(pipeline: Pipeline) -> list[bool]:
    """Runs epochs until plan_epoch has none; returns each plan's end_of_input."""
    kinds = []
    while (plan := pipeline.plan_epoch()) is not None:
        kinds.append(plan.end_of_input)
        pipeline.run_epoch(len(kinds) - 1, plan)
        assert len(kinds) < 10, "plan_epoch never ran out"
    return kinds


def test_bounded_window_job_gets_one_closing_epoch(spark: SparkSession) -> None:
    pipeline, sink = _pipeline(spark, window=True)
    assert _run_all(pipeline) == [False, False, False, True]
    assert pipeline.exhausted()
    # Epochs end at 29 s, 59 s, 89 s (no delay): [0, 40) closes in epoch 1, [40, 80) in
    # epoch 2; [80, 120) only in the closing epoch.
    assert sink.writes == [
        [],
        [(0, 0, 20), (1, 0, 20)],
        [(0, 40, 20), (1, 40, 20)],
        [(0, 80, 5), (1, 80, 5)],
    ]
    assert pipeline.plan_epoch() is None


def test_job_without_windows_gets_no_closing_epoch(spark: SparkSession) -> None:
    pipeline, sink = _pipeline(spark, window=False)
    assert _run_all(pipeline) == [False, False, False]
    assert len(sink.writes) == 3


def test_the_drivers_jvm_maps_its_classes_from_the_archive(spark: SparkSession) -> None:
    """``make install`` builds the archive and every session's JVM maps it (spark_runtime/cds.py).

    ``UseSharedSpaces`` is what the JVM decided: false if it refused the archive.
    """
    archive = cds.archive_path()
    assert archive is not None and cds.java_options(), f"no valid archive at {archive}"
    jvm = spark.sparkContext._jvm
    assert jvm is not None
    bean = jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
        jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
    )
    assert bean.getVMOption("SharedArchiveFile").getValue() == str(archive)
    assert bean.getVMOption("UseSharedSpaces").getValue() == "true"
