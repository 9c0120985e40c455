"""The scale curve: snapshot and restore cost from kilobytes to gigabytes of keyed state.

Why: ``bench.overhead`` times snapshots of 10 and 100 MiB, which says nothing about how the
cost grows, where it stops fitting a machine, or how far the runtime is from the store's raw
bandwidth at a size that matters (issue 18, items 1 and 5). This benchmark measures, at each
point of a grid and against one set of servers started for the run (three Hazelcast members
with one backup, :mod:`bench.servers`, and one ``local[2]`` SparkSession):

- a snapshot and a restore of a keyed state through the runtime (:mod:`bench.keyed_state`,
  the state ``bench.overhead`` measures: a running sum filled by one epoch, written by
  ``mapInArrow`` tasks and read back by executor tasks, then hash-partitioned and
  materialised);
- the store's raw bandwidth for the same bytes: the same number of chunks of the snapshot's
  mean chunk size put and got by a plain Hazelcast client (the faster of ``set`` and
  ``put_all``, of ``get`` and ``get_all``: ``bench.snapshot_store``'s methods), in the same
  run, right after the runtime's; the ratios are runtime bandwidth over raw bandwidth;
- peak memory during the point: the driver JVM's resident set (in ``local`` mode the
  executors run inside the driver JVM, so this is the driver's and the executors' JVM
  memory), the Python workers' (the executors' Python side: ``pyspark.daemon`` and its
  forks, their proportional set sizes summed, so pages they share count once), the
  driver's Python process and the largest member's, sampled from ``/proc`` every half
  second and from each process's ``VmHWM`` (reset at the point's start).

Two series of points cover both axes: ``size`` points (10 MiB to 4 GiB) hold keys 128 bytes
wide (the running sum's 16 bytes plus a string tag, so 4 GiB is 34 million keys), and
``keys`` points (10^3 to 5*10^7 keys) hold the running sum alone, 16 bytes a key, so their
size follows from the key count. A point that the machine cannot hold (three members holding
the state and its backup, the driver JVM, the Python workers, within ``MemAvailable``) is
reported as not fitting, with the reason, and not run; the members' heap is chosen for the
largest point that fits. Each point is cancelled after ``--point-timeout`` seconds.

Run: ``.venv/bin/python -m bench.scale_curve`` (about 19 minutes on 2 busy cores), or
``--max-mib 100`` / ``--points 10MiB 1e5keys`` for a quick pass; ``--points 1GiB --repeat 3``
for item 1's ratios with both sides warm (each keeps its best of three rounds). Prints a
line per point, a table, the fitted growth and where the plot went (``--plot``, a PNG); the
last line is JSON with every point and ``runtime_snapshot_ratio`` / ``runtime_restore_ratio``
at 1 GiB (or the largest point that ran, named in ``ratio_at``).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.keyed_state import STATE_PARTITIONS, StateTimes, snapshot_and_restore_state
from bench.memory_watch import MemoryWatch, Peaks, mem_available, member_pids
from bench.scale_grid import (
    GIB,
    MIB,
    Point,
    default_points,
    fit_points,
    keys_point,
    parse_bytes,
    parse_point,
    plan,
)
from bench.scale_report import TABLE_HEADER, growth, plot, ratio_point, table_row

RAW_BATCH_BYTES = 16 * MIB
"""Bytes per ``put_all``/``get_all`` call of the raw baseline (``bench.snapshot_store``'s 16
chunks of 1 MiB), so bigger chunks do not put more bytes in flight."""

RAW_POOL = 16
"""Distinct random chunks the raw baseline cycles through (the members copy each put)."""


# --- the raw baseline -------------------------------------------------------------------


def raw_baseline(plain_client: Any, chunks: int, chunk_bytes: int, repeat: int) -> dict[str, float]:
    """Seconds of each plain-client method for ``chunks`` chunks of ``chunk_bytes`` bytes.

    The methods are ``bench.snapshot_store``'s: ``set``/``put_all`` into an empty map, then
    ``get``/``get_all`` of everything, a window of operations in flight, the best of
    ``repeat`` rounds. The map is named ``__sj.bench.*``, so it has one backup, as the
    snapshot map had; it is destroyed afterwards.
    """
    from bench.snapshot_store import best_times, get_batched, get_each, put_batched, put_each

    pool = [bytearray(os.urandom(chunk_bytes)) for _ in range(min(chunks, RAW_POOL))]
    items = {f"raw/{index}": pool[index % len(pool)] for index in range(chunks)}
    names = list(items)
    batch = max(1, RAW_BATCH_BYTES // chunk_bytes)
    plain_map = plain_client.get_map(f"__sj.bench.raw-{uuid.uuid4().hex[:8]}")
    expected = chunks * chunk_bytes

    def clear() -> None:
        plain_map.clear().result()

    def nothing() -> None:
        return None

    def read(method: Callable[[], int]) -> Callable[[], None]:
        def run() -> None:
            if method() != expected:
                raise RuntimeError("the raw baseline read back fewer bytes than it put")

        return run

    try:
        writes = best_times(
            repeat,
            {
                "set": (clear, lambda: put_each(plain_map, items)),
                "put_all": (clear, lambda: put_batched(plain_map, items, batch)),
            },
        )
        reads = best_times(
            repeat,
            {
                "get": (nothing, read(lambda: get_each(plain_map, names))),
                "get_all": (nothing, read(lambda: get_batched(plain_map, names, batch))),
            },
        )
    finally:
        plain_map.destroy()
    return {**writes, **reads}


# --- one point --------------------------------------------------------------------------


@dataclass
class Result:
    """What one point measured, or why it did not run.

    Attributes:
        point: The point.
        status: ``ok``, ``does not fit``, ``timed out`` or ``failed``.
        reason: Why it is not ``ok``.
        times: The runtime's timings.
        raw_s: Seconds of each raw method for the same bytes.
        peaks: Peak memory.
        wall_s: Seconds the point took, all steps.
    """

    point: Point
    status: str
    reason: str = ""
    times: StateTimes | None = None
    raw_s: dict[str, float] = field(default_factory=dict)
    peaks: Peaks | None = None
    wall_s: float = 0.0

    @property
    def ran(self) -> bool:
        """Whether it has figures."""
        return self.status == "ok" and self.times is not None

    def mbps(self, seconds: float) -> float:
        """The snapshot's bytes over ``seconds``, in MB/s."""
        assert self.times is not None
        return self.times.num_bytes / 1e6 / seconds

    @property
    def raw_put_s(self) -> float:
        """The faster raw write."""
        return min(self.raw_s["set"], self.raw_s["put_all"])

    @property
    def raw_get_s(self) -> float:
        """The faster raw read."""
        return min(self.raw_s["get"], self.raw_s["get_all"])

    @property
    def raw_mib(self) -> float:
        """MiB the raw baseline moved (whole chunks of the snapshot's mean chunk size)."""
        assert self.times is not None
        chunks = max(1, self.times.chunks - 1)
        return chunks * max(1, self.times.num_bytes // chunks) / MIB

    @property
    def snapshot_ratio(self) -> float:
        """Runtime snapshot bandwidth over raw put bandwidth (per byte of each)."""
        assert self.times is not None
        return (self.times.mib / self.times.snapshot_s) / (self.raw_mib / self.raw_put_s)

    @property
    def restore_ratio(self) -> float:
        """Runtime restore bandwidth over raw get bandwidth (per byte of each)."""
        assert self.times is not None
        return (self.times.mib / self.times.restore_s) / (self.raw_mib / self.raw_get_s)

    def as_json(self) -> dict[str, Any]:
        """The point's figures for the JSON line."""
        out: dict[str, Any] = {
            "point": self.point.label,
            "series": self.point.series,
            "keys": self.point.keys,
            "status": self.status,
        }
        if self.reason:
            out["reason"] = self.reason
        if not self.ran or self.times is None:
            out["planned_mib"] = round(self.point.planned_mib, 1)
            return out
        t, peaks = self.times, self.peaks or Peaks()
        out.update(
            {
                "mib": round(t.mib, 2),
                "chunks": t.chunks,
                "build_s": round(t.build_s, 2),
                "snapshot_s": round(t.snapshot_s, 3),
                "restore_s": round(t.restore_s, 3),
                "snapshot_mbps": round(self.mbps(t.snapshot_s), 1),
                "restore_mbps": round(self.mbps(t.restore_s), 1),
                # Bandwidths of bytes each side moved; the raw side's are whole chunks.
                "raw_put_mbps": round(self.raw_mib * MIB / 1e6 / self.raw_put_s, 1),
                "raw_get_mbps": round(self.raw_mib * MIB / 1e6 / self.raw_get_s, 1),
                "raw_s": {k: round(v, 3) for k, v in self.raw_s.items()},
                "snapshot_ratio": round(self.snapshot_ratio, 3),
                "restore_ratio": round(self.restore_ratio, 3),
                "driver_jvm_peak_mib": round(peaks.driver_jvm / MIB),
                "python_workers_peak_mib": round(peaks.workers / MIB),
                "python_workers_peak_during": peaks.workers_phase,
                "python_worker_max_mib": round(peaks.worker_max / MIB),
                "driver_python_peak_mib": round(peaks.driver_python / MIB),
                "member_peak_mib": round(peaks.member_max / MIB),
                "wall_s": round(self.wall_s, 1),
            }
        )
        return out


class Deadline:
    """Cancels the session's Spark jobs once ``seconds`` have passed, so a point ends."""

    def __init__(self, spark: Any, seconds: float) -> None:
        self.fired = False
        self._spark = spark
        self._timer = threading.Timer(seconds, self._fire)
        self._timer.daemon = True

    def _fire(self) -> None:
        self.fired = True
        self._spark.sparkContext.cancelAllJobs()

    def __enter__(self) -> Deadline:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()


def run_point(
    spark: Any,
    address: Any,
    store: Any,
    plain_client: Any,
    watch: MemoryWatch,
    point: Point,
    repeat: int,
    timeout: float,
) -> Result:
    """Measures one point: runtime snapshot and restore, then the raw baseline.

    Both sides get ``repeat`` rounds and keep their best, as the raw baseline always did: a
    single runtime round paid alone for the first use of the writer's code (the JIT) and of
    the members' memory for a map that size, which the raw rounds after it found warm.
    """
    started = time.monotonic()
    with watch.point() as peaks, Deadline(spark, timeout) as deadline:
        try:
            rounds = [
                snapshot_and_restore_state(
                    spark,
                    address,
                    store,
                    point.keys,
                    point.tag_bytes,
                    phase=lambda step: setattr(watch, "phase", step),
                )
                for _ in range(max(1, repeat))
            ]
            times = dataclasses.replace(
                rounds[0],
                snapshot_s=min(r.snapshot_s for r in rounds),
                restore_s=min(r.restore_s for r in rounds),
            )
            if len(rounds) > 1:
                print(
                    f"  {point.label} runtime rounds: snapshot s "
                    f"{', '.join(f'{r.snapshot_s:.2f}' for r in rounds)}; restore s "
                    f"{', '.join(f'{r.restore_s:.2f}' for r in rounds)}",
                    flush=True,
                )
            watch.phase = "raw"
            if deadline.fired:
                raise TimeoutError
            chunks = max(1, times.chunks - 1)
            raw_s = raw_baseline(plain_client, chunks, max(1, times.num_bytes // chunks), repeat)
        except Exception as error:
            wall = time.monotonic() - started
            if deadline.fired:
                reason = f"cancelled after {timeout:.0f} s, during {watch.phase}"
                return Result(point, "timed out", reason, wall_s=wall)
            text = str(error).strip().splitlines()
            reason = f"{type(error).__name__}: {text[0][:300] if text else ''}"
            return Result(point, "failed", f"during {watch.phase}: {reason}", wall_s=wall)
    return Result(point, "ok", "", times, raw_s, peaks, time.monotonic() - started)


# --- main -------------------------------------------------------------------------------


def main() -> int:
    """Plans the points, starts the servers and the session, measures, reports."""
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument(
        "--points", nargs="+", default=None, help="e.g. 10MiB 1GiB 1e5keys (default: the grid)"
    )
    options.add_argument("--max-mib", type=float, default=None, help="skip larger points")
    options.add_argument("--driver-memory", default="6g", help="the driver JVM's heap")
    options.add_argument("--member-heap", default=None, help="each member's heap (default: fit)")
    options.add_argument(
        "--reserve-gib", type=float, default=2.0, help="memory left to the rest of the machine"
    )
    options.add_argument(
        "--repeat", type=int, default=1, help="rounds of the runtime and of the raw baseline"
    )
    options.add_argument("--point-timeout", type=float, default=900.0, help="seconds per point")
    options.add_argument(
        "--chunks",
        choices=["jvm", "python"],
        default="jvm",
        help="who writes and reads the state's chunks in the executors: their JVM (the "
        "default) or Python workers (spark.snapshotjob.jvmChunks=false)",
    )
    options.add_argument(
        "--plot", type=Path, default=Path(tempfile.gettempdir()) / "scale-curve.png"
    )
    ns = options.parse_args()
    run_started = time.monotonic()

    points = plan(
        [parse_point(s) for s in ns.points] if ns.points else default_points(), ns.max_mib
    )
    available = mem_available()
    budget = int(available - ns.reserve_gib * GIB)
    driver_bytes = parse_bytes(ns.driver_memory)
    fixed_heap = parse_bytes(ns.member_heap) if ns.member_heap else None
    heap, fits = fit_points(points, budget, driver_bytes, fixed_heap)
    heap_text = f"{heap // MIB}m"
    print(
        f"MemAvailable {available / GIB:.1f} GiB, reserve {ns.reserve_gib:g} GiB; driver JVM "
        f"{ns.driver_memory}, 3 Hazelcast members x {heap_text} heap (backup-count 1); "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    print(
        "local[2]: the executors run inside the driver JVM, so 'JVM' is the driver's and the "
        "executors' JVM memory; 'wrk' is their Python workers'",
        flush=True,
    )
    for point in points:
        fit = fits[point]
        verdict = "fits" if fit.reason is None else f"does not fit: {fit.reason}"
        print(f"plan {point.label:>11} ~{point.planned_mib:8.1f} MiB  {verdict}", flush=True)

    from bench.servers import snapshot_store
    from snapshot_store.hazelcast import connect
    from snapshotjob_contract.spark import JVM_CHUNKS_CONF
    from spark_runtime.jvm_chunks import state_chunks
    from testbed.spark import local_session

    results: list[Result] = []
    workdir = Path(tempfile.mkdtemp(prefix="sj-scale-"))
    try:
        with snapshot_store(workdir, heap=heap_text) as (address, store):
            plain = connect(
                address.members, address.cluster_name, fail_on_indeterminate_operation_state=False
            )
            spark = local_session(
                "snapshotjob-scale-curve",
                driver_memory=ns.driver_memory,
                shuffle_partitions=STATE_PARTITIONS,
                config={JVM_CHUNKS_CONF: str(ns.chunks == "jvm").lower()},
            )
            if ns.chunks == "jvm" and state_chunks(spark) is None:
                raise SystemExit("--chunks jvm: the session has no jvm/ classes; run make install")
            jvm: Any = spark.sparkContext._jvm
            jvm_pid = int(jvm.java.lang.ProcessHandle.current().pid())
            watch = MemoryWatch(jvm_pid, member_pids(workdir / "hazelcast"))
            print(
                f"driver JVM pid {jvm_pid}, members {watch.member_pids}, workdir {workdir}",
                flush=True,
            )
            # Warm-up: Python workers, their clients, JIT; not reported.
            run_point(spark, address, store, plain, watch, keys_point(10**5), 1, ns.point_timeout)
            for point in points:
                if fits[point].reason is not None:
                    result = Result(point, "does not fit", fits[point].reason or "")
                else:
                    result = run_point(
                        spark, address, store, plain, watch, point, ns.repeat, ns.point_timeout
                    )
                results.append(result)
                print(
                    f"point {json.dumps(result.as_json())} load={os.getloadavg()[0]:.2f}",
                    flush=True,
                )
            plain.shutdown()
            spark.stop()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    print()
    print(TABLE_HEADER)
    for result in results:
        print(table_row(result))
    grown = growth(results)
    print(f"growth {json.dumps(grown)}")
    headline = ratio_point(results)
    plot(
        results,
        ns.plot,
        "Snapshot and restore through the runtime vs. the raw Hazelcast client (3 members, "
        f"1 backup, local[2], {os.cpu_count()} cores)",
    )
    print(f"plot written to {ns.plot}")
    wall = time.monotonic() - run_started
    print(f"wall {wall:.0f} s")
    summary: dict[str, Any] = {
        "runtime_snapshot_ratio": (None if headline is None else round(headline.snapshot_ratio, 3)),
        "runtime_restore_ratio": None if headline is None else round(headline.restore_ratio, 3),
        "ratio_at": None if headline is None else headline.point.label,
        "growth": grown,
        "points": [r.as_json() for r in results],
        "member_heap": heap_text,
        "driver_memory": ns.driver_memory,
        "chunks": ns.chunks,
        "mem_available_gib": round(available / GIB, 1),
        "plot": str(ns.plot),
        "wall_s": round(wall),
    }
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
