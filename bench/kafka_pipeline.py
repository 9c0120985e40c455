"""Kafka -> keyed sum -> Kafka: the runtime's throughput against Structured Streaming's.

Both read the same input topic with Spark's own Kafka connector, in micro-batches of the same
size, keep a running sum per key, and write every updated sum to an output topic of their
own as a Kafka record (key, JSON value). They differ in what a crash would cost:

- **runtime, EXACTLY_ONCE**: ``KafkaSource`` -> ``groupBy().agg(F.sum)`` -> ``KafkaSink``, a
  snapshot every second into three Hazelcast members; the sink stages each snapshot's output
  in the snapshot and publishes it in one Kafka transaction per sink partition (exactly once
  for ``read_committed`` consumers).
- **runtime, AT_LEAST_ONCE**: the same pipeline, every epoch written at once with Spark's
  Kafka writer; snapshots as above.
- **Structured Streaming**: ``readStream.format("kafka")`` -> ``groupBy().agg(sum)`` with the
  RocksDB state store, ``writeStream.format("kafka")`` in update mode, checkpointing every
  batch. Its Kafka sink is at least once.

The input (``--rows`` event ids, 4 partitions) is written once, before the runs. Each run is
timed from start until its last input row is processed, and each output is checked: the last
sum of every key must be the exact one. Warm-up runs go first, so no run pays for the JIT or
for starting Python workers. Everything runs in one local[2] SparkSession.

The last line printed is JSON: ``vs_structured_streaming`` (Structured Streaming's seconds
divided by the runtime's EXACTLY_ONCE seconds: above 1 the runtime is faster),
``at_least_once_vs_structured_streaming``, and the seconds and rows per second of each run.
Run: ``.venv/bin/python -m bench.kafka_pipeline`` (``--rows``, ``--rows-per-epoch``).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from confluent_kafka import Producer
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from bench.servers import snapshot_store
from snapshot_protocol import JobIdentity
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sinks import KafkaSink
from spark_runtime.sources import KafkaSource
from spark_runtime.streaming import Pipeline
from testbed.kafka import KafkaBroker
from testbed.spark import local_session

KEYS = 100
PARTITIONS = 4
STATE_PARTITIONS = 4


@dataclass(frozen=True)
class Servers:
    """What the runs share."""

    workdir: Path
    broker: KafkaBroker
    address: StoreAddress
    store: HazelcastSnapshotStore


@contextmanager
def servers() -> Iterator[Servers]:
    """Three Hazelcast members and one Kafka broker; stopped and removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="sj-bench-kafka-"))
    broker = KafkaBroker(workdir / "kafka", heap="1g")
    try:
        with snapshot_store(workdir) as (address, store):
            broker.start()
            yield Servers(workdir, broker, address, store)
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def produce(broker: KafkaBroker, topic: str, rows: int) -> None:
    """Writes event ids 0 .. rows-1 round-robin over the partitions (idempotent producer)."""
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "enable.idempotence": True, "linger.ms": 20}
    )
    for n in range(rows):
        while True:
            try:
                producer.produce(topic, value=str(n).encode(), partition=n % PARTITIONS)
                break
            except BufferError:
                producer.poll(0.1)
    producer.flush(60)


def keyed_values(records: DataFrame) -> DataFrame:
    """Event id records -> (key, id), keys ``id % KEYS``; shared with ``bench.record_latency``."""
    numbers = records.select(F.col("value").cast("string").cast("long").alias("value"))
    return numbers.select((F.col("value") % KEYS).alias("key"), F.col("value"))


def _as_records(sums: DataFrame) -> DataFrame:
    return sums.select(
        F.col("key").cast("string").alias("key"),
        F.to_json(F.struct("key", "total")).alias("value"),
    )


def run_runtime(
    spark: SparkSession,
    servers: Servers,
    topic: str,
    guarantee: ProcessingGuarantee,
    rows_per_epoch: int,
) -> tuple[float, str, Driver]:
    """Runs the runtime's pipeline until the input is read; returns seconds, output topic."""
    out = servers.broker.create_topic("bench-out", partitions=PARTITIONS)
    bootstrap = servers.broker.bootstrap

    def build(p: Pipeline) -> None:
        records = p.readStream(
            KafkaSource(bootstrap, [topic], max_rows_per_epoch=rows_per_epoch, bounded=True),
            name="in",
        )
        # The same DataFrame functions as the Structured Streaming query below.
        sums = (
            records.transformEpoch(keyed_values).groupBy("key").agg(F.sum("value").alias("total"))
        )
        sums.transformEpoch(_as_records).writeStream(
            KafkaSink(bootstrap, out, partitions=PARTITIONS), name="out"
        )

    job = f"bench-{uuid.uuid4().hex[:8]}"
    settings = DriverSettings(
        job=JobIdentity(job, "bench", 1),
        guarantee=guarantee,
        snapshot_interval_ms=1000,
        state_partitions=STATE_PARTITIONS,
        store=servers.address,
        idle_sleep_s=0.01,
    )
    records = FileRecordStore.claim(servers.workdir / f"{job}.json", uuid.uuid4().hex)
    driver = Driver(spark, build, {}, settings, records, servers.store)
    started = time.monotonic()
    code = driver.run()
    elapsed = time.monotonic() - started
    if code is not DriverExit.COMPLETED:
        raise RuntimeError(f"bench pipeline ended with {code.name}")
    return elapsed, out, driver


def run_structured_streaming(
    spark: SparkSession, servers: Servers, topic: str, rows: int, rows_per_epoch: int
) -> tuple[float, str, int]:
    """Runs the Structured Streaming query until it has read ``rows``; returns seconds,
    output topic and batches."""
    out = servers.broker.create_topic("bench-ss-out", partitions=PARTITIONS)
    bootstrap = servers.broker.bootstrap
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    stream = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", topic)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", rows_per_epoch)
        .option("kafka.isolation.level", "read_committed")
        .load()
    )
    sums = keyed_values(stream).groupBy("key").agg(F.sum("value").alias("total"))
    checkpoint = servers.workdir / f"ss-{uuid.uuid4().hex[:6]}"
    started = time.monotonic()
    query = (
        _as_records(sums)
        .writeStream.format("kafka")
        .outputMode("update")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", out)
        .option("checkpointLocation", str(checkpoint))
        .trigger(processingTime="0 seconds")
        .start()
    )
    read = 0
    batches = 0
    try:
        while read < rows:
            progress = query.recentProgress
            read = sum(int(p["numInputRows"]) for p in progress)
            batches = len(progress)
            if query.exception() is not None:
                raise RuntimeError(f"Structured Streaming failed: {query.exception()}")
            time.sleep(0.05)
        elapsed = time.monotonic() - started
    finally:
        query.stop()
    return elapsed, out, batches


def check_sums(broker: KafkaBroker, topic: str, rows: int) -> None:
    """The last sum of each key in ``topic`` must be the exact sum of its ids."""
    latest: dict[int, int] = {}
    for _, value in broker.read_committed(topic):
        row = json.loads(value)
        latest[int(row["key"])] = int(row["total"])
    expected = {key: sum(range(key, rows, KEYS)) for key in range(KEYS)}
    if latest != expected:
        wrong = sorted(k for k in expected if latest.get(k) != expected[k])[:10]
        raise AssertionError(f"Output topic {topic} has wrong sums for keys {wrong}")


def main() -> int:
    """Starts the servers, runs the three pipelines and prints the JSON line."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--rows", type=int, default=400_000)
    options.add_argument("--rows-per-epoch", type=int, default=20_000)
    ns = options.parse_args()
    rows, per_epoch = ns.rows, ns.rows_per_epoch
    with servers() as bed:
        spark = local_session(
            "snapshotjob-bench-kafka",
            driver_memory="2g",
            shuffle_partitions=STATE_PARTITIONS,
            config={"spark.ui.showConsoleProgress": "false"},
        )
        warm = bed.broker.create_topic("bench-warm", partitions=PARTITIONS)
        produce(bed.broker, warm, 40_000)
        run_runtime(spark, bed, warm, ProcessingGuarantee.EXACTLY_ONCE, 20_000)
        run_structured_streaming(spark, bed, warm, 40_000, 20_000)

        topic = bed.broker.create_topic("bench-in", partitions=PARTITIONS)
        produce(bed.broker, topic, rows)
        seconds: dict[str, float] = {}
        for guarantee in (ProcessingGuarantee.EXACTLY_ONCE, ProcessingGuarantee.AT_LEAST_ONCE):
            elapsed, out, driver = run_runtime(spark, bed, topic, guarantee, per_epoch)
            check_sums(bed.broker, out, rows)
            seconds[guarantee.value.lower()] = elapsed
            print(
                f"runtime guarantee={guarantee.value} rows={rows} epochs={driver.epochs} "
                f"snapshots={driver.snapshots_taken} sink=KafkaSink seconds={elapsed:.1f} "
                f"rowsPerSecond={rows / elapsed:.0f} sums=exact",
                flush=True,
            )
        elapsed, out, batches = run_structured_streaming(spark, bed, topic, rows, per_epoch)
        check_sums(bed.broker, out, rows)
        seconds["structured_streaming"] = elapsed
        print(
            f"structured-streaming rows={rows} batches={batches} state=RocksDB "
            f"checkpoint=every batch sink=kafka (at least once) seconds={elapsed:.1f} "
            f"rowsPerSecond={rows / elapsed:.0f} sums=exact",
            flush=True,
        )
        spark.stop()
    print(
        json.dumps(
            {
                "vs_structured_streaming": round(
                    seconds["structured_streaming"] / seconds["exactly_once"], 3
                ),
                "at_least_once_vs_structured_streaming": round(
                    seconds["structured_streaming"] / seconds["at_least_once"], 3
                ),
                "seconds": {name: round(value, 2) for name, value in seconds.items()},
                "rows_per_second": {name: round(rows / value) for name, value in seconds.items()},
                "rows": rows,
                "rows_per_epoch": per_epoch,
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
