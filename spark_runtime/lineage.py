"""Truncating and freeing RDD lineage: the Spark helpers the state operators and sinks share.

Every epoch derives new state from the previous one. Left lazy, the plan of epoch N would
replay all N epochs; so each new state (and each buffered sink output) is materialised with
``localCheckpoint``, which stores it in the executors' block managers and cuts the lineage.
PySpark's ``unpersist`` does not free a local checkpoint, so the RDDs it created are tracked
here and released explicitly once the data is superseded; otherwise a long-running job would
keep every epoch's state in memory.

A local checkpoint has no lineage to recompute it from, so an executor lost with its blocks
would fail the epoch and restart the whole job from its last snapshot. With
:data:`STATE_REPLICAS_CONF` at 2 (the operator sets it for two executors or more) every
block is also kept on a second executor, and Spark re-runs a lost executor's tasks from the
replica instead.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from snapshotjob_contract.spark import (
    DRIVER_SNAPSHOT_MAX_BYTES_CONF,
    DRIVER_SNAPSHOT_MAX_BYTES_DEFAULT,
    STATE_REPLICAS_CONF,
)


@dataclass
class Checkpointed:
    """A materialised DataFrame and the persisted RDDs that hold its data.

    Attributes:
        frame: The DataFrame, with lineage cut.
        rdd_ids: Ids of the persisted RDDs created for it, freed by :meth:`release`.
        partitioning: How Spark knows the stored rows to be partitioned, as its plan prints
            it (``hashpartitioning(key#12L, 4)``); empty if not known. Frames derived by
            filters and projections keep it (see :func:`hash_partitioned`).
    """

    frame: DataFrame
    rdd_ids: set[int] = field(default_factory=set)
    partitioning: str = ""

    held_bytes: int = 0
    """For a frame that holds another's stored data (:func:`hold`): how many bytes it keeps."""

    def release(self, blocking: bool = False) -> None:
        """Frees the stored data, unless another holder still needs it (:func:`hold`); the
        frame must not be used afterwards.

        Args:
            blocking: Return only once Spark has dropped the blocks (a benchmark that must
                not time their removal); by default they are dropped in the background.
        """
        if not self.rdd_ids:
            return
        context = self.frame.sparkSession.sparkContext
        stored = _stored(context)
        unheld = set()
        for rdd_id in self.rdd_ids:
            others = stored.holders.get(rdd_id, 0)
            if others:
                stored.holders[rdd_id] = others - 1
            else:
                stored.holders.pop(rdd_id, None)
                unheld.add(rdd_id)
        if unheld:
            persistent = context._jsc.getPersistentRDDs()
            for rdd_id in unheld:
                stored.live.discard(rdd_id)
                rdd = persistent.get(rdd_id)
                if rdd is not None:
                    rdd.unpersist(blocking)
        self.rdd_ids = set()


@dataclass
class _Stored:
    """The RDDs one SparkContext stored for :func:`checkpoint` (RDD ids are per context).

    Attributes:
        live: Ids of the RDDs stored and not released by all their holders yet.
        holders: Per stored RDD, how many holders it has besides the one that stored it
            (:func:`hold`); the last one to release it frees it.
    """

    live: set[int] = field(default_factory=set)
    holders: dict[int, int] = field(default_factory=dict)


_STORED: WeakKeyDictionary[SparkContext, _Stored] = WeakKeyDictionary()


def _stored(context: SparkContext) -> _Stored:
    stored = _STORED.get(context)
    if stored is None:
        stored = _STORED[context] = _Stored()
    return stored


def checkpoint(frame: DataFrame) -> Checkpointed:
    """Materialises ``frame`` now and returns it with the RDD ids that hold its data.

    The persisted RDD is the one the new frame's plan (a ``LogicalRDD``) scans, so reading its
    id takes a few py4j calls; diffing ``getPersistentRDDs`` before and after would cost a
    round trip per persisted RDD, which grows with the buffered epochs.

    Raises:
        RuntimeError: If this Spark does not plan a local checkpoint as a ``LogicalRDD``.
    """
    level = storage_level(frame.sparkSession)
    if level is None:
        materialised = frame.localCheckpoint(eager=True)
    else:
        materialised = frame.localCheckpoint(eager=True, storageLevel=level)
    return adopt(materialised)


def storage_level(spark: SparkSession) -> StorageLevel | None:
    """How :func:`checkpoint` stores a frame: None for a local checkpoint's own level (memory
    and disk, one copy), else that level kept on :func:`state_replicas` executors."""
    replicas = state_replicas(spark)
    if replicas > 1:
        return StorageLevel(True, True, False, False, replicas)
    return None


def adopt(materialised: DataFrame) -> Checkpointed:
    """Returns a frame that a local checkpoint made, with the RDD id that holds its data, to be
    released as :func:`checkpoint`'s are.

    For frames checkpointed elsewhere, as in the JVM: :func:`checkpoint` itself returns
    through this. The frame's plan must scan the stored RDD (a ``LogicalRDD``), which
    :func:`hold` then finds as stored too.

    Raises:
        RuntimeError: If the frame's plan is not a ``LogicalRDD``.
    """
    plan = materialised._jdf.queryExecution().analyzed()
    kind = plan.getClass().getSimpleName()
    if kind != "LogicalRDD":
        raise RuntimeError(f"A local checkpoint was planned as {kind}, not LogicalRDD")
    rdd_id = int(plan.rdd().id())
    _stored(materialised.sparkSession.sparkContext).live.add(rdd_id)
    return Checkpointed(materialised, {rdd_id}, str(plan.outputPartitioning().toString()))


def hold(frame: DataFrame, max_bytes: int) -> Checkpointed | None:
    """Keeps ``frame`` computable later by holding the stored data it reads, without a job.

    A frame computed from stored frames alone by a deterministic plan (an operator's output:
    a filter and projection of its new state) gives the same rows whenever it is computed,
    as long as that data is stored. So instead of materialising it (a Spark job), the data
    it reads is held: released by the frame's other holders, it stays stored until the
    returned frame is released too.

    Args:
        frame: The frame to keep.
        max_bytes: Hold at most this many stored bytes (one replica), else return None.

    Returns:
        The frame with the ids it holds and their size, or None if it reads anything else
        (a source's data, a frame not stored by :func:`checkpoint`), is not deterministic,
        or reads more than ``max_bytes``: the caller then materialises it.
    """
    stored = _stored(frame.sparkSession.sparkContext)
    plan = frame._jdf.queryExecution().analyzed()
    if not plan.deterministic():
        return None
    leaves = plan.collectLeaves()
    rdd_ids = set()
    for index in range(int(leaves.size())):
        leaf = leaves.apply(index)
        if leaf.getClass().getSimpleName() != "LogicalRDD":
            return None
        rdd_id = int(leaf.rdd().id())
        if rdd_id not in stored.live:
            return None
        rdd_ids.add(rdd_id)
    if not rdd_ids:
        return None
    held = Checkpointed(frame, rdd_ids)
    size = stored_bytes(held)
    if size is None or size > max_bytes:
        return None
    for rdd_id in rdd_ids:
        stored.holders[rdd_id] = stored.holders.get(rdd_id, 0) + 1
    held.held_bytes = size
    return held


_HASH_PARTITIONING = re.compile(r"hashpartitioning\((?P<columns>.*), (?P<partitions>\d+)\)")
_ATTRIBUTE_ID = re.compile(r"#\d+L?$")


def hash_partitioned(checkpointed: Checkpointed, keys: Sequence[str], partitions: int) -> bool:
    """Whether Spark knows ``checkpointed`` to be hash-partitioned by ``keys`` into
    ``partitions``, as a repartition by those keys into that many partitions places rows.

    A query over such a frame that needs its rows clustered by the keys (an aggregation by
    them, a union with another frame partitioned the same way) then runs without shuffling
    them. Spark keeps the partitioning of a local checkpoint planned without adaptive query
    execution; planned adaptively, or read from a snapshot, the partitioning is unknown and
    this is False. A column name Spark prints unusually also gives False: the caller then
    shuffles, which is never wrong.
    """
    match = _HASH_PARTITIONING.fullmatch(checkpointed.partitioning)
    if match is None or int(match["partitions"]) != partitions:
        return False
    columns = [_ATTRIBUTE_ID.sub("", column) for column in match["columns"].split(", ")]
    return columns == list(keys)


# Per SparkContext: its conf cannot change once it runs, and ``getConf()`` copies the whole
# conf through py4j, which every checkpoint of every epoch would otherwise pay.
_SETTINGS: WeakKeyDictionary[SparkContext, dict[str, int]] = WeakKeyDictionary()


def _context_setting(spark: SparkSession, key: str, default: int) -> int:
    """Returns the integer Spark setting ``key`` of the session's context, read once per context."""
    context = spark.sparkContext
    settings = _SETTINGS.get(context)
    if settings is None:
        settings = _SETTINGS[context] = {}
    value = settings.get(key)
    if value is None:
        text = context.getConf().get(key, str(default)) or str(default)
        value = settings[key] = int(text)
    return value


def state_replicas(spark: SparkSession) -> int:
    """Returns how many executors keep each checkpointed block (:data:`STATE_REPLICAS_CONF`).

    Read once per SparkContext, whose conf does not change while it lives.
    """
    return max(1, _context_setting(spark, STATE_REPLICAS_CONF, 1))


def driver_snapshot_max_bytes(spark: SparkSession) -> int:
    """Returns :data:`DRIVER_SNAPSHOT_MAX_BYTES_CONF`: up to how many stored bytes the driver
    writes a state's snapshot itself (0: never). Read once per SparkContext."""
    return max(
        0,
        _context_setting(spark, DRIVER_SNAPSHOT_MAX_BYTES_CONF, DRIVER_SNAPSHOT_MAX_BYTES_DEFAULT),
    )


def stored_bytes(checkpointed: Checkpointed) -> int | None:
    """Returns the bytes the executors hold for ``checkpointed`` (memory and disk, one replica).

    Read from the block manager's storage report, without running a job. None if a block of
    it is not reported (e.g. not stored yet), so a caller cannot take a state it cannot see
    for a small one; 0 for a frame that holds no stored data.
    """
    if not checkpointed.rdd_ids:
        return 0
    spark = checkpointed.frame.sparkSession
    found: set[int] = set()
    total = 0
    for info in spark.sparkContext._jsc.sc().getRDDStorageInfo():
        rdd_id = int(info.id())
        if rdd_id in checkpointed.rdd_ids:
            found.add(rdd_id)
            total += int(info.memSize()) + int(info.diskSize())
    if found != checkpointed.rdd_ids:
        return None
    return total // state_replicas(spark)


def empty_frame(spark: SparkSession, schema: StructType) -> Checkpointed:
    """Returns an empty DataFrame of ``schema``; it holds no data, so nothing to release."""
    return Checkpointed(spark.createDataFrame([], schema))
