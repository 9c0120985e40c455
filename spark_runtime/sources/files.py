"""Files in a directory: replayable because a file, once there, is never changed.

The offset is the last file name read, so a range is "the files named after this one up to
that one", which reads the same files every time as long as producers add files atomically
and in increasing name order.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StringType, StructField, StructType

from spark_runtime.sources.base import Offset, Source

FILE_FORMATS = ("json", "csv", "parquet", "text")
"""The formats a file source reads; each is read with a fixed schema, so a replay agrees."""


class FileSource(Source):
    """Files in a directory, read in name order; each file is read once, whole.

    Producers must add files atomically (write elsewhere or under a name starting with ``.``
    or ``_``, then rename) and in increasing name order: the offset is the last file name
    read, so a file appearing with a smaller name is never read.

    Args:
        directory: The directory to watch (local or shared filesystem).
        fmt: ``json``, ``csv``, ``parquet`` or ``text``.
        schema: The rows' schema; required except for ``text`` (``value string``).
        max_files_per_epoch: Files per epoch at most.
        options: Spark reader options, e.g. ``{"header": "true"}`` for csv.
        bounded: End the job once every file in the directory has been read, instead of
            waiting for more.
    """

    def __init__(
        self,
        directory: str | os.PathLike[str],
        fmt: str,
        schema: StructType | str | None = None,
        *,
        max_files_per_epoch: int = 100,
        options: Mapping[str, str] | None = None,
        bounded: bool = False,
    ) -> None:
        if fmt not in FILE_FORMATS:
            raise ValueError(f"File format {fmt!r} is not one of {FILE_FORMATS}")
        if schema is None and fmt != "text":
            raise ValueError(f"A {fmt} file source needs a schema, so every epoch reads the same")
        self.directory = Path(directory)
        self.fmt = fmt
        self._schema = schema
        self.max_files_per_epoch = max_files_per_epoch
        self.options = dict(options or {})
        self.bounded = bounded

    def schema(self, spark: SparkSession) -> StructType:
        """The given schema (``value string`` for text)."""
        if self._schema is None:
            return StructType([StructField("value", StringType())])
        if isinstance(self._schema, str):
            parsed: StructType = spark.createDataFrame([], self._schema).schema
            return parsed
        return self._schema

    def initial_offset(self) -> Offset:
        """No file read yet."""
        return {"last": None}

    def _names_after(self, last: str | None) -> list[str]:
        if not self.directory.is_dir():
            return []
        names = sorted(
            entry.name
            for entry in os.scandir(self.directory)
            if entry.is_file() and not entry.name.startswith((".", "_"))
        )
        return [name for name in names if last is None or name > last]

    def next_offset(self, offset: Offset) -> Offset | None:
        """The name of the last of the next ``max_files_per_epoch`` files."""
        names = self._names_after(offset["last"])[: self.max_files_per_epoch]
        return {"last": names[-1]} if names else None

    def is_exhausted(self, offset: Offset) -> bool:
        """A bounded source ends when no unread file is left; otherwise never."""
        return self.bounded and not self._names_after(offset["last"])

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> DataFrame:
        """The files named after ``start.last`` up to ``end.last``."""
        names = [n for n in self._names_after(start["last"]) if n <= end["last"]]
        paths = [str(self.directory / name) for name in names]
        reader = spark.read.format(self.fmt).options(**self.options).schema(self.schema(spark))
        return reader.load(paths)
