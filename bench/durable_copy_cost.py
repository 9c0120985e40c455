"""What periodic durable copies cost a running pipeline: throughput with and without them.

Runs the same pipeline (sequence -> keyed running sum -> a counting sink) to its end in three
ways, EXACTLY_ONCE with a snapshot every second, in one local[2] SparkSession against three
Hazelcast members and s3proxy (the test bed's launchers):

1. without durable storage (the baseline);
2. with a durable copy of every snapshot (the copy interval below the snapshot interval);
3. with a copy at most every 10 s (``snapshotCopyIntervalSeconds``' minimum).

The state has ``--keys`` keys (a running sum each), so every snapshot and every copy writes
all of them: with the default million keys, about 30 MiB of state. The copy runs at the epoch
boundary after the snapshot, so its time is taken from the pipeline; ``every_ratio`` and
``periodic_ratio`` are the baseline's time over each run's (1.0 = free). The three runs take
turns for ``--repeat`` rounds and each one's best time counts.

Run: ``.venv/bin/python -m bench.durable_copy_cost`` (``--rows``, ``--keys``); the last line is
JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from bench.keyed_state import STATE_PARTITIONS
from bench.overhead import CountingSink, _session
from bench.servers import snapshot_store, start_s3
from snapshot_protocol import JobIdentity
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.durable import DurableCopies, DurableStorage
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline
from testbed.s3 import S3Server


def run(
    spark: SparkSession,
    address: StoreAddress,
    store: HazelcastSnapshotStore,
    durable: DurableCopies | None,
    workdir: Path,
    rows: int,
    rows_per_epoch: int,
    keys: int,
) -> float:
    """Runs the pipeline to its end; returns the seconds it took."""
    sink = CountingSink()

    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=rows_per_epoch, end=rows))
        keyed = numbers.select((F.col("value") % keys).alias("key"), "value")
        keyed.groupBy("key").agg(F.sum("value").alias("total"), name="sums").writeStream(sink)

    job = f"bench-{uuid.uuid4().hex[:8]}"
    settings = DriverSettings(
        job=JobIdentity(job, "bench", 1),
        guarantee=ProcessingGuarantee.EXACTLY_ONCE,
        snapshot_interval_ms=1000,
        state_partitions=STATE_PARTITIONS,
        store=address,
        idle_sleep_s=0.01,
    )
    records = FileRecordStore.claim(workdir / f"{job}.json", uuid.uuid4().hex)
    driver = Driver(spark, build, {}, settings, records, store, durable=durable)
    started = time.monotonic()
    code = driver.run()
    elapsed = time.monotonic() - started
    if code is not DriverExit.COMPLETED:
        raise RuntimeError(f"bench pipeline ended with {code.name}")
    interval = durable.storage.snapshot_copy_interval_s if durable is not None else None
    print(
        f"pipeline copyInterval={interval} rows={rows} epochs={driver.epochs} "
        f"snapshots={driver.snapshots_taken} seconds={elapsed:.1f}",
        flush=True,
    )
    return elapsed


def main() -> int:
    """Starts the servers and times the three runs."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--rows", type=int, default=6_000_000)
    options.add_argument("--rows-per-epoch", type=int, default=200_000)
    options.add_argument("--keys", type=int, default=1_000_000)
    options.add_argument("--repeat", type=int, default=2, help="rounds; each run's best counts")
    ns = options.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sj-bench-copy-"))
    server = S3Server(workdir / "s3")
    try:
        client, bucket = start_s3(server)
        bucket_store = S3SnapshotStore(client, bucket, "bench")
        spark = _session()
        with snapshot_store(workdir) as (address, store):
            args = (workdir, ns.rows, ns.rows_per_epoch, ns.keys)
            # A first run warms Spark and the members up; it is not counted.
            run(spark, address, store, None, workdir, ns.rows // 10, ns.rows_per_epoch, ns.keys)
            copies = {
                "baseline": None,
                "every": DurableCopies(
                    DurableStorage(bucket, "bench", snapshot_copy_interval_s=0.5), bucket_store
                ),
                "periodic": DurableCopies(
                    DurableStorage(bucket, "bench", snapshot_copy_interval_s=10), bucket_store
                ),
            }
            best: dict[str, float] = {}
            # The runs take turns, round after round, so a slow spell of the machine is shared.
            for _ in range(ns.repeat):
                for name, durable in copies.items():
                    if durable is not None:
                        durable.reset_schedule()
                    seconds = run(spark, address, store, durable, *args)
                    best[name] = min(best.get(name, seconds), seconds)
            baseline, every, periodic = best["baseline"], best["every"], best["periodic"]
        every_ratio, periodic_ratio = baseline / every, baseline / periodic
        print(f"       baseline: {baseline:6.1f} s ({ns.rows / baseline:,.0f} rows/s)")
        print(f"  every snapshot: {every:6.1f} s ratio {every_ratio:.2f}")
        print(f"  every 10 s:     {periodic:6.1f} s ratio {periodic_ratio:.2f}")
        print(
            json.dumps(
                {
                    "benchmark": "durable_copy_cost",
                    "rows": ns.rows,
                    "keys": ns.keys,
                    "baseline_s": round(baseline, 2),
                    "every_snapshot_s": round(every, 2),
                    "every_10s_s": round(periodic, 2),
                    "every_ratio": round(every_ratio, 3),
                    "periodic_ratio": round(periodic_ratio, 3),
                }
            )
        )
        return 0
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
