"""Word statistics: chat messages -> per-word running count, first and last message -> PostgreSQL.

Messages are JSON lines files in a directory (``{"id": 7, "author": "ana", "text": "..."}``),
picked up in name order. Two sinks, both two-phase (exactly once):

- ``stats``: per word, how many times it was written and the ids of the first and the last
  message that had it, upserted by word: the result table of an update stream.
- ``message_ids``: one row per message read, appended to a table without a key, so a message
  processed twice is two rows and a lost one no row (``docs/guides/testing-pipelines.md``):
  what a test checks exactly-once on, since an upsert hides repeats by design.

Its tests (``test_word_stats.py`` beside it) run this ``define_pipeline`` unchanged with the test
kit (``spark_runtime.testing``), on memory sources and sinks put in place of these by name.

Arguments (``--arg key=value``): ``dsn`` and ``input`` (required), ``stats_table``
[word_stats], ``ids_table`` [message_ids], ``files_per_epoch`` [10], ``bounded`` [false]:
complete once every file present has been read.
"""

from __future__ import annotations

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import PostgresSink
from spark_runtime.sources import FileSource
from spark_runtime.streaming import Pipeline

MESSAGE_SCHEMA = "id long, author string, text string"
"""One chat message: the id is unique and increasing."""

WORD_PATTERN = r"[^\p{L}\p{N}']+"
"""What separates words: anything but letters, digits and apostrophes."""


def define_pipeline(p: Pipeline) -> None:
    """Messages -> words -> running statistics per word; and every message's id."""
    args = p.args
    messages = p.readStream(
        FileSource(
            str(args["input"]),
            "json",
            MESSAGE_SCHEMA,
            max_files_per_epoch=int(args.get("files_per_epoch", 10)),
            bounded=str(args.get("bounded", "false")).lower() == "true",
        ),
        name="messages",
    )
    words = messages.select(
        "id", F.explode(F.split(F.lower(F.col("text")), WORD_PATTERN)).alias("word")
    ).filter(F.col("word") != "")
    stats = words.groupBy("word").agg(
        F.count("*").alias("count"),
        F.min("id").alias("first_id"),
        F.max("id").alias("last_id"),
        name="word_stats",
    )
    dsn = str(args["dsn"])
    stats.writeStream(
        PostgresSink(dsn, str(args.get("stats_table", "word_stats")), ["word"]), name="stats"
    )
    messages.select("id").writeStream(
        PostgresSink(dsn, str(args.get("ids_table", "message_ids"))), name="message_ids"
    )
