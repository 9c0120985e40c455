"""The pipeline API: streams of epoch batches, written as PySpark Structured Streaming is.

A pipeline module defines ``define_pipeline(p)``; the runtime calls it once per execution::

    from pyspark.sql import functions as F
    from spark_runtime.streaming import Pipeline

    def define_pipeline(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=1000), name="numbers")
        sums = (
            numbers.withColumn("key", F.col("value") % 10)
            .groupBy("key")
            .agg(F.sum("value").alias("total"), name="sums")
        )
        sums.writeStream(PostgresSink(dsn, "sums", ["key"]), name="postgres")

- :mod:`~spark_runtime.streaming.stream`: ``EpochStream`` and ``GroupedEpochStream``
- :mod:`~spark_runtime.streaming.aggregation`: which aggregates and windows the state keeps
- :mod:`~spark_runtime.streaming.durations`: duration strings
"""

from spark_runtime.pipeline import DefinePipeline, Pipeline
from spark_runtime.streaming.stream import EpochStream, GroupedEpochStream, Watermark

__all__ = ["DefinePipeline", "EpochStream", "GroupedEpochStream", "Pipeline", "Watermark"]
