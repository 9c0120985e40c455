"""Replayable sources, one module per backend; every public name is importable from here.

- :mod:`~spark_runtime.sources.base`: ``Source``, ``Offset``
- :mod:`~spark_runtime.sources.participant`: ``SourceParticipant``, the offset as snapshot state
- :mod:`~spark_runtime.sources.sequence`: ``SequenceSource``
- :mod:`~spark_runtime.sources.files`: ``FileSource``, ``FILE_FORMATS``
- :mod:`~spark_runtime.sources.postgres`: ``PostgresSource``, ``jdbc_url`` (needs psycopg)
- :mod:`~spark_runtime.sources.kafka`: ``KafkaSource``, ``KAFKA_SCHEMA`` (needs confluent-kafka
  and Spark's Kafka connector)

The names are imported on first use (:mod:`spark_runtime.lazy_exports`), so
``from spark_runtime.sources import FileSource`` does not import psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_runtime.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from spark_runtime.sources.base import Offset, Source
    from spark_runtime.sources.files import FILE_FORMATS, FileSource
    from spark_runtime.sources.kafka import KAFKA_SCHEMA, KafkaSource
    from spark_runtime.sources.participant import SourceParticipant
    from spark_runtime.sources.postgres import PostgresSource, jdbc_url
    from spark_runtime.sources.sequence import SequenceSource

__all__ = [
    "FILE_FORMATS",
    "KAFKA_SCHEMA",
    "FileSource",
    "KafkaSource",
    "Offset",
    "PostgresSource",
    "SequenceSource",
    "Source",
    "SourceParticipant",
    "jdbc_url",
]

if not TYPE_CHECKING:
    # Hidden from mypy, which reads the imports above instead: so it still rejects a
    # misspelt name, where a module-level __getattr__ would let any name pass as Any.
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "FILE_FORMATS": "files",
            "FileSource": "files",
            "KAFKA_SCHEMA": "kafka",
            "KafkaSource": "kafka",
            "Offset": "base",
            "PostgresSource": "postgres",
            "SequenceSource": "sequence",
            "Source": "base",
            "SourceParticipant": "participant",
            "jdbc_url": "postgres",
        },
    )
