"""The keyed state the benchmarks snapshot and restore, built and timed in one place.

``bench.overhead`` times a snapshot and a restore of 10 and 100 MiB of state and
``bench.scale_curve`` the same from kilobytes to gigabytes; both must measure the same
state, built the same way and saved and read by the runtime's own code, or their figures
would not line up. The state is a :class:`~spark_runtime.state.RunningAggregate` (a running
sum per key, 16 bytes of Arrow data per key) filled by one epoch of ``keys`` distinct keys in
:data:`STATE_PARTITIONS` partitions; ``tag_bytes`` widens every key by a string of that many
bytes, so a state of gigabytes does not need hundreds of millions of keys.

Not run on its own: ``bench.overhead`` and ``bench.scale_curve`` import it.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshot_protocol import ChunkWriter, SnapshotRef
from snapshot_store.hazelcast import HazelcastSnapshotStore
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.lineage import empty_frame
from spark_runtime.state import RunningAggregate, StateContext

STATE_PARTITIONS = 4
"""The state partitions of every benchmark's keyed state (and its sessions' shuffle)."""

SUM_KEY_BYTES = 16
"""Arrow bytes per key of the running sum: a long key and a long total."""

TAG_OVERHEAD_BYTES = 4
"""Arrow bytes per key a string column adds beyond its characters (its 32-bit offset)."""


def keys_for(mib: float, tag_bytes: int = 0) -> int:
    """The number of keys that makes a state of about ``mib`` MiB of Arrow data.

    Args:
        mib: The state's size.
        tag_bytes: The width of each key's tag (0: the plain running sum).

    Returns:
        At least one key.
    """
    per_key = SUM_KEY_BYTES + (tag_bytes + TAG_OVERHEAD_BYTES if tag_bytes else 0)
    return max(1, int(mib * 2**20) // per_key)


@dataclass(frozen=True)
class StateTimes:
    """One snapshot and one restore of a keyed state, through the runtime.

    Attributes:
        keys: Keys in the state.
        num_bytes: Bytes the snapshot wrote (every chunk, the driver's small one included).
        chunks: Chunks the snapshot wrote.
        build_s: Seconds to fill the state (one epoch's update, materialised).
        snapshot_s: Seconds of the snapshot (``save_and_prepare``: the executors write).
        restore_s: Seconds of the restore (``restore``: the executors read, then the state is
            hash-partitioned and materialised).
    """

    keys: int
    num_bytes: int
    chunks: int
    build_s: float
    snapshot_s: float
    restore_s: float

    @property
    def mib(self) -> float:
        """The snapshot's size in MiB."""
        return self.num_bytes / 2**20

    @property
    def data_chunk_bytes(self) -> int:
        """The mean size of the chunks that hold state partitions (not the driver's one)."""
        return self.num_bytes // max(1, self.chunks - 1)


def state_batch(spark: SparkSession, keys: int, tag_bytes: int = 0) -> DataFrame:
    """One epoch's rows: ``keys`` distinct keys, each with its own number as the value.

    Args:
        spark: The session.
        keys: How many keys (rows).
        tag_bytes: 0 for rows ``(key, value)``; else each row also carries ``tag``, a string
            of ``tag_bytes`` characters that differs per key, and ``(key, tag)`` is the key.

    Returns:
        The rows, in :data:`STATE_PARTITIONS` partitions.
    """
    rows = spark.range(keys, numPartitions=STATE_PARTITIONS)
    columns = [F.col("id").alias("key")]
    if tag_bytes:
        columns.append(F.lpad(F.col("id").cast("string"), tag_bytes, "k").alias("tag"))
    return rows.select(*columns, F.col("id").alias("value"))


def _free(state: RunningAggregate) -> None:
    """Releases ``state``'s stored data and waits until Spark has dropped its blocks."""
    stored = state._state
    state._state = empty_frame(state.state.sparkSession, state.state_schema)
    stored.release(blocking=True)


def snapshot_and_restore_state(
    spark: SparkSession,
    address: StoreAddress,
    store: HazelcastSnapshotStore,
    keys: int,
    tag_bytes: int = 0,
    phase: Callable[[str], None] | None = None,
) -> StateTimes:
    """Fills a running-sum state of ``keys`` keys, snapshots it, restores it and times both.

    The snapshot goes into a fresh map of the store (named ``__sj.bench.*``, so the members
    keep one backup of it); the state is released and the driver's heap collected before the
    restore, as a restore in a new driver has no copy of it; the restored state is counted
    before the map is destroyed and its cached data released, so the next call starts from an
    empty cache.

    Args:
        spark: The session.
        address: Where the executors find the store.
        store: The driver's store.
        keys: How many keys the state holds.
        tag_bytes: The width of each key's tag string (see :func:`state_batch`).
        phase: Called with ``"build"``, ``"snapshot"``, ``"restore"``, ``"check"`` as each
            step starts (a memory sampler attributes its peaks with it).

    Returns:
        The state's size and the timings.

    Raises:
        RuntimeError: If the restored state does not hold every key.
    """
    mark = phase or (lambda _step: None)
    context = StateContext(spark, STATE_PARTITIONS, address)
    batch = state_batch(spark, keys, tag_bytes)
    key_columns = ["key", "tag"] if tag_bytes else ["key"]
    aggs: dict[str, tuple[str, str | None]] = {"total": ("sum", "value")}
    name = f"state{keys}"
    operator = RunningAggregate(name, context, key_columns, aggs, batch.schema)
    restored = RunningAggregate(name, context, key_columns, aggs, batch.schema)
    map_name = f"__sj.bench.{uuid.uuid4().hex[:8]}"
    try:
        mark("build")
        started = time.monotonic()
        operator.update(batch)
        build_s = time.monotonic() - started
        mark("snapshot")
        started = time.monotonic()
        descriptors = operator.save_and_prepare(
            1, ChunkWriter(store, map_name, 1, operator.name), False
        )
        snapshot_s = time.monotonic() - started
        # A restore runs where no other copy of the state is held (a new driver, executors
        # that lost theirs); with the state it was taken from still stored, the restore paid
        # for two states in one heap and storage memory: evictions to disk and full GCs.
        _free(operator)
        # Nor does a new driver's heap hold the dropped state's rows: without a collection
        # here the restore's allocations pay for G1 marking and reclaiming a 1 GiB state.
        spark.sparkContext._jvm.System.gc()  # type: ignore[union-attr]
        mark("restore")
        started = time.monotonic()
        restored.restore(SnapshotRef(map_name, 1, tuple(descriptors), STATE_PARTITIONS), store)
        restore_s = time.monotonic() - started
        mark("check")
        if restored.state.count() != keys:
            raise RuntimeError("restored state lost keys")
    finally:
        # The cached states are released here, so a failed or timed-out call frees them too.
        for state in (operator, restored):
            state._replace_state(empty_frame(spark, state.state_schema))
        store.destroy(map_name)
    return StateTimes(
        keys,
        sum(d.num_bytes for d in descriptors),
        len(descriptors),
        build_s,
        snapshot_s,
        restore_s,
    )
