"""One mode of ``bench.record_latency``, run in a process of its own.

A mode gets a process (and so a Spark session) of its own because real-time mode needs a task
slot for every task of every stage at once, which the others' ``local[2]`` does not have. The
child prints a ready line once its query or driver is running, and stops when the parent
closes its standard input: the runtime's driver through a forceful cancel at the next epoch
boundary (as a user's ``CANCEL_FORCEFUL``), a Structured Streaming query through ``stop()``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import threading
import time
import uuid
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from bench.kafka_pipeline import PARTITIONS, STATE_PARTITIONS, keyed_values
from snapshot_protocol import JobIdentity, TerminationRequest
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshotjob_contract.modes import TerminationMode
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sinks import KafkaSink
from spark_runtime.sources import KafkaSource
from spark_runtime.streaming import Pipeline
from testbed.spark import local_session

_ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
_MAX_ROWS_PER_EPOCH = 10_000


def as_records(sums: DataFrame) -> DataFrame:
    """A Kafka record per updated key: the key, and its sum and newest id as JSON."""
    return sums.select(
        F.col("key").cast("string").alias("key"),
        F.to_json(F.struct("key", "total", "last")).alias("value"),
    )


def _stdin_closed() -> threading.Event:
    closed = threading.Event()

    def wait() -> None:
        sys.stdin.read()
        closed.set()

    threading.Thread(target=wait, name="stdin-watch", daemon=True).start()
    return closed


def _run_runtime(spark: SparkSession, ns: argparse.Namespace, ready: str) -> int:
    guarantee = ProcessingGuarantee[ns.child.upper()]
    stop = _stdin_closed()

    def build(p: Pipeline) -> None:
        records = p.readStream(
            KafkaSource(
                ns.bootstrap,
                [ns.input],
                max_rows_per_epoch=_MAX_ROWS_PER_EPOCH,
                driver_read_max_records=ns.driver_read_max_records,
            ),
            name="in",
        )
        sums = (
            records.transformEpoch(keyed_values)
            .groupBy("key")
            .agg(F.sum("value").alias("total"), F.max("value").alias("last"))
        )
        sums.transformEpoch(as_records).writeStream(
            KafkaSink(ns.bootstrap, ns.output, partitions=PARTITIONS), name="out"
        )

    address = StoreAddress(tuple(ns.members.split(",")), ns.cluster_name)
    client = connect(list(address.members), address.cluster_name)
    job = f"latency-{uuid.uuid4().hex[:8]}"
    settings = DriverSettings(
        job=JobIdentity(job, "bench", 1),
        guarantee=guarantee,
        snapshot_interval_ms=ns.snapshot_interval_ms,
        state_partitions=STATE_PARTITIONS,
        store=address,
        idle_sleep_s=0.005,
    )
    records = FileRecordStore.claim(Path(ns.workdir) / f"{job}.json", uuid.uuid4().hex)

    def poll() -> TerminationRequest | None:
        return TerminationRequest(TerminationMode.CANCEL_FORCEFUL) if stop.is_set() else None

    driver = Driver(
        spark, build, {}, settings, records, HazelcastSnapshotStore(client), poll_termination=poll
    )

    def announce() -> None:
        while driver.coordinator is None or driver.coordinator.record is None:
            time.sleep(0.05)
        print(ready, flush=True)

    threading.Thread(target=announce, name="announce", daemon=True).start()
    try:
        code = driver.run()
    finally:
        client.shutdown()
    print(f"runtime ended code={code.name} epochs={driver.epochs}", file=sys.stderr)
    return 0


def _run_structured_streaming(spark: SparkSession, ns: argparse.Namespace, ready: str) -> int:
    stop = _stdin_closed()
    spark.conf.set("spark.sql.streaming.stateStore.providerClass", _ROCKSDB)
    spark.conf.set("spark.sql.streaming.stateStore.checkpointFormatVersion", "2")
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", ns.bootstrap)
        .option("subscribe", ns.input)
        .option("startingOffsets", "earliest")
        .load()
    )
    sums = (
        keyed_values(stream)
        .groupBy("key")
        .agg(F.sum("value").alias("total"), F.max("value").alias("last"))
    )
    writer = (
        as_records(sums)
        .writeStream.format("kafka")
        .outputMode("update")
        .option("kafka.bootstrap.servers", ns.bootstrap)
        .option("topic", ns.output)
        .option("checkpointLocation", str(Path(ns.workdir) / f"ss-{uuid.uuid4().hex[:8]}"))
    )
    if ns.child == "real_time_mode":
        writer = writer.trigger(realTime=ns.real_time_batch)
    else:
        writer = writer.trigger(processingTime="0 seconds")
    query = writer.start()
    while not query.status["isTriggerActive"] and query.lastProgress is None:
        time.sleep(0.05)
    print(ready, flush=True)
    stop.wait()
    failure = query.exception()
    query.stop()
    if failure is not None:
        print(f"query failed: {failure}", file=sys.stderr)
        return 1
    return 0


def run_child(ns: argparse.Namespace, ready: str) -> int:
    """Runs mode ``ns.child`` until standard input closes.

    Args:
        ns: The parent's options and the servers' addresses.
        ready: The line to print once the query or driver runs.

    Returns:
        The exit status.
    """
    logging.basicConfig(level=ns.log_level, format="%(asctime)s %(name)s %(message)s")
    # Real-time mode runs every stage's tasks at once: 4 source and 4 shuffle partitions.
    master = "local[8]" if ns.child == "real_time_mode" else "local[2]"
    spark = local_session(
        f"snapshotjob-bench-latency-{ns.child}",
        driver_memory="2g",
        shuffle_partitions=STATE_PARTITIONS,
        config={"spark.ui.showConsoleProgress": "false", "spark.master": master},
    )
    try:
        if ns.child in ("exactly_once", "at_least_once"):
            return _run_runtime(spark, ns, ready)
        return _run_structured_streaming(spark, ns, ready)
    finally:
        spark.stop()
