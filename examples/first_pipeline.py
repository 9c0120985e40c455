"""The README's first example: a running sum per key, exactly once into files, on a laptop.

Run it with nothing but the installed package (``pip install '.[runtime]'`` from a checkout)::

    python -m spark_runtime run first_pipeline.py

It counts to ``end`` (20,000) at ``rate`` numbers a second (2,000), keeps a running sum per
key (``n % 10``), and writes two outputs as CSV files with two-phase commit: ``out/sums``, the
sums of each snapshot, and ``out/events``, one row per number, so a repeated or lost number
would show. Arguments: ``--arg end=...``, ``--arg rate=...``, ``--arg out=...``. The pace is
wall-clock time: a job restored after a while catches up at once, then goes on at ``rate``.
"""

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import FileSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline


def define_pipeline(p: Pipeline) -> None:
    end, rate = int(p.args.get("end", 20_000)), float(p.args.get("rate", 2_000))
    out = p.args.get("out", "out")
    numbers = p.readStream(SequenceSource(rows_per_second=rate, end=end), name="numbers")
    numbers.writeStream(FileSink(f"{out}/events", fmt="csv"), name="events")
    sums = (
        numbers.withColumn("key", F.col("value") % 10)
        .groupBy("key")
        .agg(F.sum("value").alias("total"), F.count("value").alias("count"), name="sums")
    )
    sums.writeStream(FileSink(f"{out}/sums", fmt="csv"), name="sums-out")
