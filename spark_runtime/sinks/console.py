"""The console as a sink, for trying a pipeline out.

It only prints, so it cannot take part in two-phase commit and writes every epoch.
"""

from __future__ import annotations

import json

from pyspark.sql import DataFrame

from spark_runtime.sinks.base import EPOCH_COLUMN, Sink


class ConsoleSink(Sink):
    """Prints up to ``limit`` rows of every epoch's output on the driver; for trying things out.

    Args:
        limit: Rows printed per epoch at most.
    """

    def __init__(self, limit: int = 20) -> None:
        self.limit = limit

    def write(self, frame: DataFrame) -> None:
        """Prints the rows."""
        columns = [c for c in frame.columns if c != EPOCH_COLUMN]
        for row in frame.select(*columns).limit(self.limit).collect():
            print(json.dumps(row.asDict(), default=str), flush=True)
