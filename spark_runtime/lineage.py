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

from dataclasses import dataclass, field
from weakref import WeakKeyDictionary

from pyspark import SparkContext, StorageLevel
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from snapshotjob_contract.spark import STATE_REPLICAS_CONF


@dataclass
class Checkpointed:
    """A materialised DataFrame and the persisted RDDs that hold its data.

    Attributes:
        frame: The DataFrame, with lineage cut.
        rdd_ids: Ids of the persisted RDDs created for it, freed by :meth:`release`.
    """

    frame: DataFrame
    rdd_ids: set[int] = field(default_factory=set)

    def release(self) -> None:
        """Frees the stored data; the frame must not be used afterwards."""
        if not self.rdd_ids:
            return
        persistent = self.frame.sparkSession.sparkContext._jsc.getPersistentRDDs()
        for rdd_id in self.rdd_ids:
            rdd = persistent.get(rdd_id)
            if rdd is not None:
                rdd.unpersist(False)
        self.rdd_ids = set()


def checkpoint(frame: DataFrame) -> Checkpointed:
    """Materialises ``frame`` now and returns it with the RDD ids that hold its data.

    The persisted RDD is the one the new frame's plan (a ``LogicalRDD``) scans, so reading its
    id takes a few py4j calls; diffing ``getPersistentRDDs`` before and after would cost a
    round trip per persisted RDD, which grows with the buffered epochs.

    Raises:
        RuntimeError: If this Spark does not plan a local checkpoint as a ``LogicalRDD``.
    """
    replicas = state_replicas(frame.sparkSession)
    if replicas > 1:
        level = StorageLevel(True, True, False, False, replicas)
        materialised = frame.localCheckpoint(eager=True, storageLevel=level)
    else:
        materialised = frame.localCheckpoint(eager=True)
    plan = materialised._jdf.queryExecution().analyzed()
    kind = plan.getClass().getSimpleName()
    if kind != "LogicalRDD":
        raise RuntimeError(f"A local checkpoint was planned as {kind}, not LogicalRDD")
    return Checkpointed(materialised, {int(plan.rdd().id())})


# Per SparkContext: its conf cannot change once it runs, and ``getConf()`` copies the whole
# conf through py4j, which every checkpoint of every epoch would otherwise pay.
_REPLICAS: WeakKeyDictionary[SparkContext, int] = WeakKeyDictionary()


def state_replicas(spark: SparkSession) -> int:
    """Returns how many executors keep each checkpointed block (:data:`STATE_REPLICAS_CONF`).

    Read once per SparkContext, whose conf does not change while it lives.
    """
    context = spark.sparkContext
    replicas = _REPLICAS.get(context)
    if replicas is None:
        value = context.getConf().get(STATE_REPLICAS_CONF, "1") or "1"
        replicas = _REPLICAS[context] = max(1, int(value))
    return replicas


def empty_frame(spark: SparkSession, schema: StructType) -> Checkpointed:
    """Returns an empty DataFrame of ``schema``; it holds no data, so nothing to release."""
    return Checkpointed(spark.createDataFrame([], schema))
