"""A pipeline for driver-process tests: a gated sequence -> running sum by key -> files.

The test decides how far the job may read by writing a number into ``limit_file`` (nothing
read while it is missing), so it can stop the job's progress at an exact offset, take
exports of a known state and then let the job run to ``end``. The output of every snapshot is
a published directory of JSON rows ``{key, total, count}``: the new running sum of every key
the epoch touched, so replayed or lost input shows up as a wrong or repeated row.

With ``events_out``, every number read is also appended, as ``{value}``, to files there: an
append-only sink where a lost or repeated event shows as a missing or extra row.

Arguments: ``limit_file``, ``out`` (required); ``end`` [600], ``keys`` [3],
``rows_per_epoch`` [50], ``events_out``.
"""

from __future__ import annotations

from pathlib import Path

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import FileSink
from spark_runtime.sources import Offset, SequenceSource
from spark_runtime.streaming import Pipeline


class GatedSequence(SequenceSource):
    """A sequence that reads no further than the number in ``limit_file``."""

    def __init__(self, limit_file: str, *, rows_per_epoch: int, end: int) -> None:
        super().__init__(rows_per_epoch=rows_per_epoch, end=end)
        self.limit_file = Path(limit_file)

    def next_offset(self, offset: Offset) -> Offset | None:
        """The sequence's next offset, capped by the limit."""
        proposed = super().next_offset(offset)
        try:
            limit = int(self.limit_file.read_text().strip() or 0)
        except FileNotFoundError:
            limit = 0
        if proposed is None or int(offset["next"]) >= limit:
            return None
        return {**proposed, "next": min(int(proposed["next"]), limit)}


def define_pipeline(p: Pipeline) -> None:
    """Gated sequence -> key = value % keys -> running sum and count -> JSON files."""
    args = p.args
    keys = int(args.get("keys", 3))
    numbers = p.readStream(
        GatedSequence(
            str(args["limit_file"]),
            rows_per_epoch=int(args.get("rows_per_epoch", 50)),
            end=int(args.get("end", 600)),
        ),
        name="numbers",
    )
    keyed = numbers.select((F.col("value") % keys).alias("key"), F.col("value"))
    sums = keyed.groupBy("key").agg(
        F.sum("value").alias("total"), F.count("*").alias("count"), name="sums"
    )
    sums.writeStream(FileSink(str(args["out"])), name="files")
    if "events_out" in args:
        numbers.writeStream(FileSink(str(args["events_out"])), name="events")
