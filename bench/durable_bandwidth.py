"""Benchmark: durable copies against the S3 server's own bandwidth for the same bytes.

A snapshot of ``--mib`` MiB in 1 MiB chunks is written into a real three-member Hazelcast
cluster. It is then copied to a real S3-compatible server (s3proxy, the test bed's) with
:func:`~snapshot_protocol.transfer.transfer_snapshot`, exactly as a driver makes a durable
export: the source validated, every chunk verified as read, the record last, the copy
validated. The copy back into Hazelcast is what ``initialSnapshotName`` and the store-loss
restore do. The baselines, measured in the same rounds against the same server, are plain
boto3 PUTs and GETs of the same chunks with the same number of requests in flight (the
store's window), from memory: no Hazelcast, no checksums, no validation.

- ``write_ratio``: the baseline's PUT time over the durable copy's (Hazelcast -> S3). The
  goal is at least 0.8.
- ``read_ratio``: the baseline's GET time over a verified read of the copy: its validation
  (record, every object listed) and every chunk read, in the copy's rounds, and checked
  against its xxh3. The goal is at least 0.8.
- ``copy_back_ratio``: the baseline's GET time over the whole copy back (S3 -> Hazelcast),
  which also writes every chunk into Hazelcast; for information.

Each figure is the best of ``--repeat`` rounds.

Run: ``.venv/bin/python bench/durable_bandwidth.py`` (``--mib 32`` for a quick pass). The
last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.servers import snapshot_store, start_s3
from snapshot_protocol import ChunkWriter, PipelineShape, ValidationRecord
from snapshot_protocol.chunks import validate_snapshot
from snapshot_protocol.transfer import read_verified, transfer_snapshot
from snapshot_store.s3 import DEFAULT_WINDOW, S3SnapshotStore
from testbed.s3 import S3Server

MIB = 1024 * 1024
MAP = "__sj.export.bench.durable"
SHAPE = PipelineShape({"state": "RunningAggregate(sum(v))"}, 8)


def _best(repeat: int, run: Callable[[], None], reset: Callable[[], None]) -> float:
    best = float("inf")
    for _ in range(repeat):
        reset()
        started = time.perf_counter()
        run()
        best = min(best, time.perf_counter() - started)
    return best


def main() -> int:
    """Starts Hazelcast and s3proxy, then times the copies and the raw PUT/GET baselines."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--mib", type=int, default=128)
    options.add_argument("--repeat", type=int, default=3)
    ns = options.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sj-bench-durable-"))
    server = S3Server(workdir / "s3")
    try:
        client, bucket = start_s3(server)
        durable = S3SnapshotStore(client, bucket, "bench")
        with snapshot_store(workdir) as (_, hazelcast):
            chunks = [os.urandom(MIB) for _ in range(ns.mib)]
            writer = ChunkWriter(hazelcast, MAP, 0, "state")
            written = writer.write_many(
                [(index % 8, index // 8, data, 1000) for index, data in enumerate(chunks)]
            )
            record = ValidationRecord(
                0, tuple(written), ns.mib * MIB, 1000 * ns.mib, 1_700_000_000_000, "bench", SHAPE
            )
            hazelcast.put_validation_record(MAP, record)
            back = "__sj.export.bench.back"
            pool = ThreadPoolExecutor(DEFAULT_WINDOW)
            raw_keys = [f"raw/{index}" for index in range(ns.mib)]

            def raw_put() -> None:
                list(
                    pool.map(
                        lambda kv: client.put_object(Bucket=bucket, Key=kv[0], Body=kv[1]),
                        zip(raw_keys, chunks, strict=True),
                    )
                )

            def raw_get() -> None:
                list(
                    pool.map(
                        lambda key: client.get_object(Bucket=bucket, Key=key)["Body"].read(),
                        raw_keys,
                    )
                )

            def copy_out() -> None:
                transfer_snapshot(hazelcast, MAP, durable, MAP, 0)

            def copy_back() -> None:
                transfer_snapshot(durable, MAP, hazelcast, back, 0)

            def read_copy_verified() -> None:
                # The product's verified read (snapshot_protocol.transfer.read_verified): the
                # copy streamed with the store's window kept full, every chunk checked.
                copy = validate_snapshot(durable, MAP, 0)
                for _ in read_verified(durable, MAP, 0, copy.chunks):
                    pass

            def reset_copy() -> None:
                durable.discard(MAP, 0)

            def reset_back() -> None:
                hazelcast.discard(back, 0)

            timings = {
                "raw_put": _best(ns.repeat, raw_put, lambda: None),
                "copy_to_s3": _best(ns.repeat, copy_out, reset_copy),
                "raw_get": _best(ns.repeat, raw_get, lambda: None),
                "read_verified": _best(ns.repeat, read_copy_verified, lambda: None),
                "copy_from_s3": _best(ns.repeat, copy_back, reset_back),
            }
            pool.shutdown()
        mb = ns.mib * MIB / 1e6
        for name, seconds in timings.items():
            print(f"{name:>17}: {seconds:7.2f} s  {mb / seconds:8.1f} MB/s  ({ns.mib} MiB)")
        write_ratio = timings["raw_put"] / timings["copy_to_s3"]
        read_ratio = timings["raw_get"] / timings["read_verified"]
        back_ratio = timings["raw_get"] / timings["copy_from_s3"]
        print(f"      write_ratio: {write_ratio:.2f} (durable copy vs raw PUT, goal >= 0.8)")
        print(f"       read_ratio: {read_ratio:.2f} (verified read vs raw GET, goal >= 0.8)")
        print(f"  copy_back_ratio: {back_ratio:.2f} (copy back into Hazelcast vs raw GET)")
        print(
            json.dumps(
                {
                    "benchmark": "durable_bandwidth",
                    "mib": ns.mib,
                    **{f"{k}_mb_s": round(mb / v, 1) for k, v in timings.items()},
                    "write_ratio": round(write_ratio, 3),
                    "read_ratio": round(read_ratio, 3),
                    "copy_back_ratio": round(back_ratio, 3),
                }
            )
        )
        return 0
    finally:
        server.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
