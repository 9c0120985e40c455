"""What snapshots cost: throughput with and without them, against Structured Streaming, and
snapshot/restore time for 10 and 100 MiB of keyed state.

Starts its own three Hazelcast members and PostgreSQL (the test bed's launchers) and runs
everything in one local[2] SparkSession, so no JVM start is measured:

1. ``overhead_ratio``: throughput of the sequence -> keyed sum -> sink pipeline over the same
   rows, EXACTLY_ONCE with a snapshot every second, divided by the same run with NONE. Both
   runs use the same counting sink, which materialises every output row once, so the ratio
   is the cost of exactly-once alone: under NONE the sink counts each epoch's output; under
   EXACTLY_ONCE each epoch's output is buffered (materialised in the executors) and counted
   at the next snapshot's phase 1, plus the snapshot itself (state to Hazelcast, offsets,
   records). A PostgreSQL sink would flatter EXACTLY_ONCE: NONE commits four transactions
   every epoch while EXACTLY_ONCE prepares and commits four per snapshot, so that pair
   (``postgres``) is reported apart, as end-to-end context.
2. ``vs_structured_streaming``: throughput of the EXACTLY_ONCE run divided by Spark Structured
   Streaming's doing the same keyed sum over the same micro-batches with the RocksDB state
   store (checkpointing state and offsets every batch, as it always does) into a
   ``foreachBatch`` sink that counts each batch's output, as the counting sink does.
3. ``snapshot_s`` / ``restore_s``: one snapshot and one restore of a running-sum state of
   about 10 and 100 MiB (Arrow size), written from and read into the executors.

The last line printed is JSON with those figures. Run: ``.venv/bin/python -m bench.overhead``
(``--rows``, ``--rows-per-epoch`` and ``--state-mib`` change the sizes).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from bench.keyed_state import STATE_PARTITIONS, keys_for, snapshot_and_restore_state
from bench.servers import snapshot_store
from snapshot_protocol import JobIdentity
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sinks import PostgresSink, Sink, TransactionalSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline
from testbed.postgres import PostgresServer
from testbed.spark import local_session

KEYS = 1000


def _session() -> SparkSession:
    return local_session(
        "snapshotjob-bench",
        driver_memory="2g",
        shuffle_partitions=STATE_PARTITIONS,
        config={"spark.ui.showConsoleProgress": "false"},
    )


class CountingSink(TransactionalSink):
    """Materialises and counts its rows: the same sink work as Structured Streaming's
    ``foreachBatch(frame.count())``, every epoch under NONE, per snapshot under EXACTLY_ONCE.

    It takes part in two-phase commit without transactions of its own, so EXACTLY_ONCE
    buffers its output exactly as it does a PostgreSQL sink's.
    """

    def __init__(self) -> None:
        self.rows = 0
        self.writes = 0

    def _count(self, frame: DataFrame) -> None:
        self.rows += frame.count()
        self.writes += 1

    def write(self, frame: DataFrame) -> None:
        """Counts one epoch's output."""
        self._count(frame)

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Counts the output buffered since the last snapshot."""
        self._count(frame)
        return []

    def commit(self, transaction_ids: Sequence[str]) -> None:
        """Nothing to commit."""

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """Nothing to roll back."""

    def abort(self, snapshot_id: int) -> None:
        """Nothing to abort."""

    def roll_back_older(self, snapshot_id: int) -> list[str]:
        """Nothing to roll back."""
        return []

    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        """Nothing to recover."""
        return [], []


def run_pipeline(
    spark: SparkSession,
    address: StoreAddress,
    store: HazelcastSnapshotStore,
    workdir: Path,
    dsn: str | None,
    guarantee: ProcessingGuarantee,
    rows: int,
    rows_per_epoch: int,
) -> float:
    """Runs sequence -> keyed sum -> sink to the end; returns the seconds it took.

    The sink is PostgreSQL (upserts by key) given ``dsn``, else a :class:`CountingSink`.
    """
    table = f"sums_{guarantee.value.lower()}_{uuid.uuid4().hex[:6]}"
    sink: Sink = PostgresSink(dsn, table, ["key"]) if dsn is not None else CountingSink()

    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=rows_per_epoch, end=rows))
        keyed = numbers.select((F.col("value") % KEYS).alias("key"), "value")
        sums = keyed.groupBy("key").agg(F.sum("value").alias("total"))
        sums.writeStream(sink)

    job = f"bench-{uuid.uuid4().hex[:8]}"
    settings = DriverSettings(
        job=JobIdentity(job, "bench", 1),
        guarantee=guarantee,
        snapshot_interval_ms=1000,
        state_partitions=STATE_PARTITIONS,
        store=address,
        idle_sleep_s=0.01,
    )
    records = FileRecordStore.claim(workdir / f"{job}.json", uuid.uuid4().hex)
    driver = Driver(spark, build, {}, settings, records, store)
    started = time.monotonic()
    code = driver.run()
    elapsed = time.monotonic() - started
    if code is not DriverExit.COMPLETED:
        raise RuntimeError(f"bench pipeline ended with {code.name}")
    if isinstance(sink, CountingSink):
        does = f"sink=count writes={sink.writes} rowsCounted={sink.rows}"
    elif guarantee is ProcessingGuarantee.NONE:
        does = "sink=postgres commits every epoch"
    else:
        does = "sink=postgres prepares+commits once per snapshot"
    print(
        f"pipeline guarantee={guarantee.value} rows={rows} epochs={driver.epochs} "
        f"snapshots={driver.snapshots_taken} {does} seconds={elapsed:.1f}",
        flush=True,
    )
    return elapsed


def structured_streaming_sums(spark: SparkSession, rows_per_epoch: int) -> DataFrame:
    """The benchmark's keyed sum as a Structured Streaming query over RocksDB state."""
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    stream = (
        spark.readStream.format("rate-micro-batch")
        .option("rowsPerBatch", rows_per_epoch)
        .option("numPartitions", 2)
        .load()
    )
    return (
        stream.select((F.col("value") % KEYS).alias("key"), "value")
        .groupBy("key")
        .agg(F.sum("value").alias("total"))
    )


def run_structured_streaming(
    spark: SparkSession, workdir: Path, rows: int, rows_per_epoch: int
) -> float:
    """The same keyed sum in Structured Streaming with RocksDB state; returns seconds."""
    sums = structured_streaming_sums(spark, rows_per_epoch)
    batches = rows // rows_per_epoch
    seen: list[int] = []

    def sink(frame: DataFrame, batch_id: int) -> None:
        frame.count()  # materialise the update, as the runtime's sink does
        seen.append(batch_id)

    started = time.monotonic()
    query = (
        sums.writeStream.outputMode("update")
        .option("checkpointLocation", str(workdir / f"ss-checkpoint-{uuid.uuid4().hex[:8]}"))
        .foreachBatch(sink)
        .trigger(processingTime="0 seconds")
        .start()
    )
    while len(seen) < batches:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    query.stop()
    print(
        f"structured-streaming batches={batches} state=RocksDB checkpoint=every batch "
        f"sink=foreachBatch count seconds={elapsed:.1f}",
        flush=True,
    )
    return elapsed


def snapshot_and_restore(
    spark: SparkSession, address: StoreAddress, store: HazelcastSnapshotStore, mib: int
) -> tuple[float, float]:
    """Times one snapshot and one restore of a keyed state of about ``mib`` MiB.

    The state is :mod:`bench.keyed_state`'s running sum (16 bytes of Arrow data per key),
    which ``bench.scale_curve`` measures from kilobytes to gigabytes.
    """
    times = snapshot_and_restore_state(spark, address, store, keys_for(mib))
    print(
        f"state mib={times.mib:.1f} chunks={times.chunks} snapshot_s={times.snapshot_s:.2f} "
        f"restore_s={times.restore_s:.2f}",
        flush=True,
    )
    return times.snapshot_s, times.restore_s


@dataclass(frozen=True)
class BenchServers:
    """The servers a benchmark run measures against, started once for the run."""

    workdir: Path
    dsn: str
    address: StoreAddress
    store: HazelcastSnapshotStore


@contextmanager
def bench_servers(prefix: str) -> Iterator[BenchServers]:
    """Starts 3 Hazelcast members and PostgreSQL; stops them and removes their files after."""
    workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}-"))
    postgres = PostgresServer(Path(tempfile.mkdtemp(prefix=f"{prefix}-postgres-")))
    try:
        with snapshot_store(workdir) as (address, store):
            postgres.start()
            yield BenchServers(workdir, postgres.create_database("bench"), address, store)
    finally:
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(postgres.workdir, ignore_errors=True)


def main() -> int:
    """Starts the servers, runs the measurements and prints the JSON line."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--rows", type=int, default=200_000)
    options.add_argument("--rows-per-epoch", type=int, default=10_000)
    options.add_argument("--state-mib", type=int, nargs="+", default=[10, 100])
    ns = options.parse_args()
    with bench_servers("sj-bench") as servers:
        workdir, dsn, address, store = (
            servers.workdir,
            servers.dsn,
            servers.address,
            servers.store,
        )
        spark = _session()
        # Warm-up: JIT, Python workers and connections, so the first measured run is not slower.
        run_pipeline(spark, address, store, workdir, dsn, ProcessingGuarantee.NONE, 20_000, 10_000)
        run_pipeline(spark, address, store, workdir, None, ProcessingGuarantee.NONE, 20_000, 10_000)
        seconds: dict[tuple[str, ProcessingGuarantee], float] = {}
        for sink_dsn, sink_name in ((None, "count"), (dsn, "postgres")):
            for guarantee in (ProcessingGuarantee.NONE, ProcessingGuarantee.EXACTLY_ONCE):
                seconds[sink_name, guarantee] = run_pipeline(
                    spark,
                    address,
                    store,
                    workdir,
                    sink_dsn,
                    guarantee,
                    ns.rows,
                    ns.rows_per_epoch,
                )
        none_s = seconds["count", ProcessingGuarantee.NONE]
        exactly_once_s = seconds["count", ProcessingGuarantee.EXACTLY_ONCE]
        streaming_s = run_structured_streaming(spark, workdir, ns.rows, ns.rows_per_epoch)
        snapshot_s: dict[str, float] = {}
        restore_s: dict[str, float] = {}
        for mib in ns.state_mib:
            taken, restored = snapshot_and_restore(spark, address, store, mib)
            snapshot_s[f"{mib}MiB"], restore_s[f"{mib}MiB"] = round(taken, 2), round(restored, 2)
        spark.stop()
        print(
            json.dumps(
                {
                    # Throughput ratios: the same rows in less time is a higher ratio.
                    "overhead_ratio": round(none_s / exactly_once_s, 3),
                    "vs_structured_streaming": round(streaming_s / exactly_once_s, 3),
                    "seconds": {
                        "none_count": round(none_s, 2),
                        "exactly_once_count": round(exactly_once_s, 2),
                        "structured_streaming_count": round(streaming_s, 2),
                    },
                    "postgres": {
                        "none_s": round(seconds["postgres", ProcessingGuarantee.NONE], 2),
                        "exactly_once_s": round(
                            seconds["postgres", ProcessingGuarantee.EXACTLY_ONCE], 2
                        ),
                        "ratio": round(
                            seconds["postgres", ProcessingGuarantee.NONE]
                            / seconds["postgres", ProcessingGuarantee.EXACTLY_ONCE],
                            3,
                        ),
                        "note": "NONE commits every epoch, EXACTLY_ONCE once per snapshot",
                    },
                    "snapshot_s": snapshot_s,
                    "restore_s": restore_s,
                    "rows": ns.rows,
                    "rows_per_epoch": ns.rows_per_epoch,
                }
            )
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
