"""Word count: text files in a directory, a running count per word, PostgreSQL.

New files are picked up in name order, so the job can be left running while files are added.

Arguments (``--arg key=value``): ``dsn`` (required), ``input`` (the directory, required),
``table`` [word_counts], ``files_per_epoch`` [10], ``bounded`` [false]: complete once every
file present has been read.
"""

from __future__ import annotations

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import PostgresSink
from spark_runtime.sources import FileSource
from spark_runtime.streaming import Pipeline


def define_pipeline(p: Pipeline) -> None:
    """Lines -> lower-case words -> running count per word -> PostgreSQL (upsert by word)."""
    args = p.args
    lines = p.readStream(
        FileSource(
            str(args["input"]),
            "text",
            max_files_per_epoch=int(args.get("files_per_epoch", 10)),
            bounded=str(args.get("bounded", "false")).lower() == "true",
        ),
        name="lines",
    )
    words = lines.select(
        F.explode(F.split(F.lower(F.col("value")), r"[^\p{L}\p{N}']+")).alias("word")
    ).filter(F.col("word") != "")
    counts = words.groupBy("word").count(name="counts")
    counts.writeStream(
        PostgresSink(str(args["dsn"]), str(args.get("table", "word_counts")), ["word"]),
        name="postgres",
    )
