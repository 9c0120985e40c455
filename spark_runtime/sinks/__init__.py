"""Sinks, one module per backend, and their part in the snapshot protocol.

- :mod:`~spark_runtime.sinks.base`: ``Sink``, ``TransactionalSink``, ``StagedSink``,
  ``EPOCH_COLUMN``
- :mod:`~spark_runtime.sinks.participant`: ``SinkParticipant``, which buffers output and
  takes part in phase 1, phase 2 and restore for a sink
- :mod:`~spark_runtime.sinks.staged`: ``StagedSinkParticipant``, the same for a staged sink
  (output staged in the snapshot, published in phase 2)
- :mod:`~spark_runtime.sinks.foreach_batch`: ``ForeachBatchSink`` and its
  ``ForeachBatchParticipant``: a function of each batch's DataFrame and its snapshot id
  (``stream.foreachBatch``)
- :mod:`~spark_runtime.sinks.delta`: ``DeltaSink``, a Delta Lake table, exactly once by
  Delta's idempotent writes (needs Delta Lake's jars in the session)
- :mod:`~spark_runtime.sinks.kafka`: ``KafkaSink`` (needs confluent-kafka)
- :mod:`~spark_runtime.sinks.file`: ``FileSink``
- :mod:`~spark_runtime.sinks.postgres`: ``PostgresSink``, ``MaxPreparedTransactionsDisabled``
  (needs psycopg)
- :mod:`~spark_runtime.sinks.hazelcast_map`: ``HazelcastMapSink`` (needs the Hazelcast client)
- :mod:`~spark_runtime.sinks.console`: ``ConsoleSink``

Every public name is importable from here, as user pipelines do, and imported on first use
(:mod:`spark_runtime.lazy_exports`): ``from spark_runtime.sinks import FileSink`` imports
neither psycopg nor the Hazelcast client.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_runtime.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from spark_runtime.sinks.base import EPOCH_COLUMN, Sink, StagedSink, TransactionalSink
    from spark_runtime.sinks.console import ConsoleSink
    from spark_runtime.sinks.delta import DeltaSink
    from spark_runtime.sinks.file import FileSink
    from spark_runtime.sinks.foreach_batch import (
        BatchFunction,
        ForeachBatchParticipant,
        ForeachBatchSink,
    )
    from spark_runtime.sinks.hazelcast_map import HazelcastMapSink
    from spark_runtime.sinks.kafka import KafkaSink
    from spark_runtime.sinks.participant import SinkParticipant
    from spark_runtime.sinks.postgres import MaxPreparedTransactionsDisabled, PostgresSink
    from spark_runtime.sinks.staged import StagedSinkParticipant

__all__ = [
    "EPOCH_COLUMN",
    "BatchFunction",
    "ConsoleSink",
    "DeltaSink",
    "FileSink",
    "ForeachBatchParticipant",
    "ForeachBatchSink",
    "HazelcastMapSink",
    "KafkaSink",
    "MaxPreparedTransactionsDisabled",
    "PostgresSink",
    "Sink",
    "SinkParticipant",
    "StagedSink",
    "StagedSinkParticipant",
    "TransactionalSink",
]

if not TYPE_CHECKING:
    # Hidden from mypy, which reads the imports above instead: so it still rejects a
    # misspelt name, where a module-level __getattr__ would let any name pass as Any.
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "EPOCH_COLUMN": "base",
            "BatchFunction": "foreach_batch",
            "ConsoleSink": "console",
            "DeltaSink": "delta",
            "FileSink": "file",
            "ForeachBatchParticipant": "foreach_batch",
            "ForeachBatchSink": "foreach_batch",
            "HazelcastMapSink": "hazelcast_map",
            "KafkaSink": "kafka",
            "MaxPreparedTransactionsDisabled": "postgres",
            "PostgresSink": "postgres",
            "Sink": "base",
            "SinkParticipant": "participant",
            "StagedSink": "base",
            "StagedSinkParticipant": "staged",
            "TransactionalSink": "base",
        },
    )
