"""Incremental snapshots: what a snapshot costs when 1 % of the keys changed, against a full one.

Why: issue 18, item 2. Every snapshot used to write the whole state; with
``spec.incrementalSnapshots`` a snapshot writes, per state partition, the newest rows of the
keys updated since the last one (a delta) and lists the chunks it inherits, and a partition
is rewritten in full at its turn, once every ``1 + maxDeltas`` snapshots (docs/concepts/protocol.md,
"Incremental snapshots"). This benchmark measures, in one run against one set of servers
(three Hazelcast members with one backup, :mod:`bench.servers`, one ``local[2]``
SparkSession, the executors' JVMs writing the chunks):

- a keyed state of ``--mib`` MiB (a running sum, keys 128 bytes wide, as ``bench.scale_curve``'s
  size points) in ``--partitions`` state partitions, snapshotted in full once;
- ``--intervals`` intervals, each an epoch that updates ``--changed`` of the keys (a new
  contiguous range each time, spread over the partitions by hash) and an incremental
  snapshot built on the previous one, the older snapshots' entries discarded as the
  coordinator's step 8 does (the chains kept);
- the baseline, in the same run: a full snapshot of the same state (into a map of its own)
  after the first interval, in the middle and after the last one, after one not counted
  (the members' first map beside the chain map is slower to write);
- a restore of the last chain (every delta applied by key in the executors' JVMs), checked
  key by key against the state's sum, and a restore of the last full snapshot, timed.

``incremental_cost_ratio`` is the mean incremental snapshot time over the mean full snapshot
time (``incremental_cost_ratio_median_full`` over their median, since the first of the three
is still the slowest): with ``--intervals`` at ``1 + --max-deltas`` (the default; 17 with
the default 16 deltas) every partition has had its turn once, so the mean includes the full
rewrites a long-running job pays. Also printed: the same ratio in bytes, the largest single
snapshot's ratio (one with a partition's turn), and the chain restore against the full one.
``--max-deltas`` is ``spec.snapshotChains.maxDeltas``: longer chains, fewer rewrites, longer
restores.

Run: ``.venv/bin/python -m bench.incremental_snapshot`` (about 10 minutes on 2 cores at
1 GiB; twice that with ``--max-deltas 32``), or ``--mib 64 --intervals 5`` for a quick pass.
The last line is JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.keyed_state import state_batch
from bench.scale_grid import TAG_BYTES, WIDE_KEY_BYTES
from snapshotjob_contract.spec import DEFAULT_MAX_DELTAS

MIB = 2**20


def _written(descriptors: Any, snapshot_id: int) -> tuple[int, int, int]:
    """Bytes this snapshot wrote, and its partitions written in full and as deltas."""
    own = [d for d in descriptors if d.key.snapshot_id == snapshot_id]
    full = {d.key.partition for d in own if not d.delta}
    delta = {d.key.partition for d in own if d.delta}
    return sum(d.num_bytes for d in own), len(full) - 1, len(delta)  # less the driver's chunk


def main() -> int:
    """Builds the state, takes the snapshots, restores, reports."""
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("--mib", type=float, default=1024.0, help="the state's size")
    options.add_argument("--changed", type=float, default=0.01, help="keys changed per interval")
    options.add_argument(
        "--intervals", type=int, help="incremental snapshots (default: 1 + --max-deltas)"
    )
    options.add_argument(
        "--max-deltas",
        type=int,
        default=DEFAULT_MAX_DELTAS,
        help="spec.snapshotChains.maxDeltas: a partition's turn comes every 1 + this snapshots",
    )
    options.add_argument("--partitions", type=int, default=8, help="state partitions")
    options.add_argument("--driver-memory", default="6g", help="the driver JVM's heap")
    options.add_argument("--member-heap", default="2500m", help="each member's heap")
    ns = options.parse_args()
    if ns.intervals is None:
        ns.intervals = 1 + ns.max_deltas

    from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

    from bench.servers import snapshot_store
    from snapshot_protocol import ChunkWriter, SnapshotRef, ValidationRecord
    from snapshot_protocol.incremental import ChainPolicy
    from snapshotjob_contract.spark import JVM_CHUNKS_CONF
    from spark_runtime.jvm_chunks import state_chunks
    from spark_runtime.lineage import empty_frame
    from spark_runtime.state import RunningAggregate, StateContext
    from testbed.spark import local_session

    keys = max(1000, int(ns.mib * MIB) // WIDE_KEY_BYTES)
    changed = max(1, int(keys * ns.changed))
    print(
        f"state ~{ns.mib:g} MiB: {keys} keys {WIDE_KEY_BYTES} bytes wide in {ns.partitions} "
        f"partitions; {changed} keys ({ns.changed:.1%}) change per interval, "
        f"{ns.intervals} intervals, chains of at most {ns.max_deltas} deltas; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    workdir = Path(tempfile.mkdtemp(prefix="sj-incremental-"))
    summary: dict[str, Any] = {}
    try:
        with snapshot_store(workdir, heap=ns.member_heap) as (address, store):
            spark = local_session(
                "snapshotjob-incremental",
                driver_memory=ns.driver_memory,
                shuffle_partitions=ns.partitions,
                config={JVM_CHUNKS_CONF: "true"},
            )
            if state_chunks(spark) is None:
                raise SystemExit("the session has no jvm/ classes; run make install")
            policy = ChainPolicy(max_deltas=ns.max_deltas)
            context = StateContext(
                spark, ns.partitions, address, incremental=True, chain_policy=policy
            )
            batch = state_batch(spark, keys, TAG_BYTES)
            aggs: dict[str, tuple[str, str | None]] = {"total": ("sum", "value")}
            operator = RunningAggregate("state", context, ["key", "tag"], aggs, batch.schema)
            chain_map = f"__sj.bench.{uuid.uuid4().hex[:8]}"

            started = time.monotonic()
            operator.update(batch)
            print(f"built in {time.monotonic() - started:.1f} s", flush=True)

            def snapshot(snapshot_id: int, previous: SnapshotRef | None) -> tuple[Any, float]:
                writer = ChunkWriter(store, chain_map, snapshot_id, "state", previous)
                began = time.monotonic()
                descriptors = tuple(operator.save_and_prepare(snapshot_id, writer, False))
                seconds = time.monotonic() - began
                operator.commit_finish(snapshot_id, True)
                record = ValidationRecord(snapshot_id, descriptors, 0, 0, 0, "bench")
                # Step 8a: older entries go, the new restore point's chains stay.
                store.discard(chain_map, snapshot_id - 1, [record])
                return SnapshotRef(chain_map, snapshot_id, descriptors, ns.partitions), seconds

            def full_snapshot(snapshot_id: int) -> tuple[float, int, SnapshotRef]:
                full_map = f"__sj.bench.{uuid.uuid4().hex[:8]}"
                writer = ChunkWriter(store, full_map, snapshot_id, "state")
                began = time.monotonic()
                # Export-only: the change log is left as it is.
                descriptors = tuple(operator.save_and_prepare(snapshot_id, writer, True))
                seconds = time.monotonic() - began
                written = sum(d.num_bytes for d in descriptors)
                return (
                    seconds,
                    written,
                    SnapshotRef(full_map, snapshot_id, descriptors, ns.partitions),
                )

            ref, first_s = snapshot(0, None)
            print(f"snapshot 0 (full, the chain's base) {first_s:.2f} s", flush=True)
            # The members' first map beside the chain map grows their heaps, and made the
            # first baseline up to twice the others (6.9 s against 3.2 to 4.0 s): warmed
            # up here, not counted, so the baseline is not flattered.
            warm_s, _, warm = full_snapshot(9_999)
            store.destroy(warm.map_name)
            print(f"warm-up full snapshot {warm_s:.2f} s (not counted)", flush=True)
            fulls: list[tuple[float, int]] = []
            increments: list[tuple[float, int, int, int]] = []
            baseline_at = {1, max(1, ns.intervals // 2), ns.intervals}
            last_full: SnapshotRef | None = None
            for interval in range(1, ns.intervals + 1):
                start = (interval - 1) * changed % keys
                updates = state_batch(spark, keys, TAG_BYTES).filter(
                    (F.col("key") >= start) & (F.col("key") < start + changed)
                )
                began = time.monotonic()
                operator.update(updates)
                update_s = time.monotonic() - began
                ref, seconds = snapshot(interval, ref)
                written, full_parts, delta_parts = _written(ref.chunks, interval)
                increments.append((seconds, written, full_parts, delta_parts))
                print(
                    f"interval {interval:2d}: update {update_s:5.1f} s, incremental snapshot "
                    f"{seconds:5.2f} s, {written / MIB:7.1f} MiB written, partitions "
                    f"full {full_parts} delta {delta_parts}",
                    flush=True,
                )
                if interval in baseline_at:
                    if last_full is not None:
                        store.destroy(last_full.map_name)
                    full_s, full_bytes, last_full = full_snapshot(10_000 + interval)
                    fulls.append((full_s, full_bytes))
                    print(
                        f"  baseline full snapshot {full_s:5.2f} s, {full_bytes / MIB:.1f} MiB",
                        flush=True,
                    )

            expected = tuple(operator.state.agg(F.count("*"), F.sum("total")).first() or ())
            operator._replace_state(empty_frame(spark, operator.state_schema))
            assert last_full is not None
            restores: dict[str, float] = {}
            for name, source in (("chain", ref), ("full", last_full)):
                restored = RunningAggregate("state", context, ["key", "tag"], aggs, batch.schema)
                began = time.monotonic()
                restored.restore(source, store)
                restores[name] = time.monotonic() - began
                got = tuple(restored.state.agg(F.count("*"), F.sum("total")).first() or ())
                if got != expected:
                    raise SystemExit(
                        f"the {name} snapshot restored {got}, the state was {expected}"
                    )
                restored._replace_state(empty_frame(spark, restored.state_schema))
                print(
                    f"{name} restore {restores[name]:.2f} s (checked: {got[0]} keys, sum {got[1]})",
                    flush=True,
                )
            store.destroy(chain_map)
            store.destroy(last_full.map_name)
            spark.stop()

            mean_incr = statistics.mean(s for s, _, _, _ in increments)
            mean_full = statistics.mean(s for s, _ in fulls)
            mean_incr_bytes = statistics.mean(b for _, b, _, _ in increments)
            mean_full_bytes = statistics.mean(b for _, b in fulls)
            largest = max(s for s, _, _, _ in increments)
            summary = {
                "incremental_cost_ratio": round(mean_incr / mean_full, 3),
                # Against the baselines' median: the first is still the slowest (warming up).
                "incremental_cost_ratio_median_full": round(
                    mean_incr / statistics.median(s for s, _ in fulls), 3
                ),
                "incremental_bytes_ratio": round(mean_incr_bytes / mean_full_bytes, 3),
                "largest_snapshot_ratio": round(largest / mean_full, 3),
                "incremental_snapshot_s_mean": round(mean_incr, 3),
                "incremental_snapshot_s_median": round(
                    statistics.median(s for s, _, _, _ in increments), 3
                ),
                "full_snapshot_s_mean": round(mean_full, 3),
                "full_snapshot_s": [round(s, 2) for s, _ in fulls],
                "full_snapshot_mib": round(mean_full_bytes / MIB, 1),
                "chain_restore_s": round(restores["chain"], 2),
                "full_restore_s": round(restores["full"], 2),
                "keys": keys,
                "changed_per_interval": changed,
                "intervals": ns.intervals,
                "max_deltas": ns.max_deltas,
                "partitions": ns.partitions,
            }
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(
        f"incremental snapshot mean {summary['incremental_snapshot_s_mean']} s vs full "
        f"{summary['full_snapshot_s_mean']} s: ratio {summary['incremental_cost_ratio']} "
        f"(bytes {summary['incremental_bytes_ratio']}, largest single "
        f"{summary['largest_snapshot_ratio']})"
    )
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
