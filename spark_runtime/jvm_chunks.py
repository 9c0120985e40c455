"""Keyed state's chunks written and read in the executors' JVMs, without Python workers.

A snapshot of a large state spent most of its time taking the rows out of the JVM: Spark
turned the cached rows into Arrow and sent them to a Python worker, which encoded the chunks
and put them through the Python client; a restore paid the same way back
(docs/development/performance.md). The classes in ``jvm/`` (built by ``hack/install.sh``) do it
where the rows are: Spark's own Arrow writer makes the same Arrow IPC chunks a ``mapInArrow`` task
would, with the same schema, keys and xxh3 checksums, and the Hazelcast Java client puts them with
the settings of the Python adapter (a write whose backups are in doubt fails). Either side
reads what the other wrote, so a snapshot restores whichever wrote it.

This module only crosses py4j: what to write and read is decided in
:mod:`spark_runtime.state.keyed`, which falls back to the Python workers when the classes are
not on the session's classpath or :data:`JVM_CHUNKS_CONF` is ``false``.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Sequence
from typing import Any

from py4j.java_gateway import JavaClass  # type: ignore[import-untyped]
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from snapshot_protocol.chunks import DELTA_MARK, ChunkDescriptor, ChunkKey
from snapshot_store.hazelcast import DEFAULT_WINDOW
from snapshotjob_contract.spark import JVM_CHUNKS_CONF
from spark_runtime.chunk_io import CHUNK_TARGET_BYTES, READ_WINDOW_CHUNKS, StoreAddress
from spark_runtime.lineage import storage_level

_log = logging.getLogger(__name__)

STATE_CHUNKS_CLASS = "io.snapshotjob.chunks.StateChunks"
"""The JVM side's entry point (``jvm/src/main/java``)."""

_missing_logged: set[int] = set()


def state_chunks(spark: SparkSession) -> Any | None:
    """Returns the JVM's ``StateChunks`` class if this session should use it, else None.

    None when :data:`JVM_CHUNKS_CONF` is ``false``, or when the class is not on the classpath
    (said once per session, with what to do).
    """
    if str(spark.conf.get(JVM_CHUNKS_CONF, "true")).strip().lower() == "false":
        return None
    found: Any = spark.sparkContext._jvm
    for name in STATE_CHUNKS_CLASS.split("."):
        found = getattr(found, name)
    if isinstance(found, JavaClass):
        return found
    if id(spark) not in _missing_logged:
        _missing_logged.add(id(spark))
        _log.warning(
            "State chunks go through Python workers: class=%s is not on the classpath; run "
            "'make install' (it builds jvm/) or set %s=false to say so",
            STATE_CHUNKS_CLASS,
            JVM_CHUNKS_CONF,
        )
    return None


def write_state(
    chunks: Any,
    spark: SparkSession,
    state: DataFrame,
    address: StoreAddress,
    map_name: str,
    snapshot_id: int,
    operator: str,
    only: Collection[int] = (),
    delta: bool = False,
) -> list[tuple[ChunkDescriptor, str]]:
    """Writes partition ``p`` of ``state`` from Spark task ``p``, in the executors' JVMs.

    Args:
        chunks: The class :func:`state_chunks` returned.
        spark: The session.
        state: The state, partitioned as its snapshot's partitions.
        address: Where the executors find the store.
        map_name: The snapshot map.
        snapshot_id: The snapshot.
        operator: The operator's name in the chunk keys.
        only: The partitions to write; empty for all.
        delta: Whether the rows are a delta (the chunks are described so).

    Returns:
        Each chunk written, with the executor (Pod, or host) that wrote it.

    Raises:
        Py4JJavaError: If a task failed, e.g. a put in doubt or refused.
    """
    conf = spark.conf
    lines = chunks.write(
        state._jdf,
        ",".join(address.members),
        address.cluster_name,
        map_name,
        snapshot_id,
        operator,
        conf.get("spark.sql.session.timeZone"),
        str(conf.get("spark.sql.execution.arrow.useLargeVarTypes", "false")).lower() == "true",
        int(str(conf.get("spark.sql.execution.arrow.maxRecordsPerBatch", "10000"))),
        CHUNK_TARGET_BYTES,
        DEFAULT_WINDOW,
        ",".join(str(partition) for partition in sorted(only)),
    )
    written = []
    for line in lines:
        key, num_bytes, num_keys, checksum, writer = str(line).split("\t")
        chunk = ChunkDescriptor(ChunkKey.parse(key), int(num_bytes), int(num_keys), checksum, delta)
        written.append((chunk, writer))
    return written


def chunk_line(chunk: ChunkDescriptor) -> str:
    """One chunk as :func:`read_state` hands it to the JVM: ``key, numBytes, numKeys,
    checksum`` tab-separated, then ``delta`` for a delta's chunk (``ChunkDescriptor.parse`` in
    ``jvm/``; ``jvm/src/test/resources/io/snapshotjob/chunks/`` holds one such line)."""
    return f"{chunk.key}\t{chunk.num_bytes}\t{chunk.num_keys}\t{chunk.checksum}" + (
        f"\t{DELTA_MARK}" if chunk.delta else ""
    )


def read_state(
    chunks: Any,
    spark: SparkSession,
    address: StoreAddress,
    map_name: str,
    snapshot_id: int,
    partitions: Sequence[Sequence[ChunkDescriptor]],
    schema: StructType,
    key_columns: int,
    checkpointed: bool = False,
) -> DataFrame:
    """A frame whose partition ``p`` reads the chunks ``partitions[p]`` in the executors' JVMs.

    Every chunk is checked against its size and checksum before it is decoded; a mismatch fails
    the task with the words of :class:`~snapshot_protocol.SnapshotCorrupted`, which the
    coordinator finds in the error. A partition with deltas is a chain: its full version's
    rows less the keys its deltas have, then each key's newest delta row.

    Args:
        chunks: The class :func:`state_chunks` returned.
        spark: The session.
        address: Where the executors find the store.
        map_name: The snapshot map.
        snapshot_id: The snapshot.
        partitions: Per state partition, its chunks, a chain's in chain order.
        schema: The state's schema.
        key_columns: How many of the schema's first columns are the key.
        checkpointed: Read the rows now and return a local checkpoint of them, stored as
            :func:`~spark_runtime.lineage.checkpoint` stores a frame (for
            :func:`~spark_runtime.lineage.adopt`): the JVM stores each row as it decodes it,
            where a checkpoint of the lazy frame would copy every row twice more.
    """
    listed = ["\n".join(chunk_line(c) for c in partition) for partition in partitions]
    level = storage_level(spark) if checkpointed else None
    frame = chunks.read(
        spark._jsparkSession,
        listed,
        ",".join(address.members),
        address.cluster_name,
        map_name,
        snapshot_id,
        schema.json(),
        READ_WINDOW_CHUNKS,
        key_columns,
        checkpointed,
        None if level is None else spark.sparkContext._getJavaStorageLevel(level),
    )
    return DataFrame(frame, spark)
