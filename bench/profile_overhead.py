"""Where an epoch's time goes: the runtime's pipeline against a Structured Streaming micro-batch.

``bench.overhead`` gives one number per run; this script explains it. It runs the same keyed-sum
pipeline as the benchmark (sequence -> running sum -> PostgreSQL) under NONE and EXACTLY_ONCE
and Spark Structured Streaming over the same micro-batches, in one ``local[2]`` session with the
Spark UI on, and prints:

1. per run: wall seconds, epochs, snapshots, and the Spark jobs and stages it started, grouped
   by the call site Spark records for each job (e.g. ``localCheckpoint at state.py:…``), with
   their count and summed duration (Spark's status REST API);
2. per run: the driver-side Python profile (cProfile), as cumulative seconds of the runtime's
   own functions and of PySpark's py4j round trips;
3. for Structured Streaming: the average per-batch ``durationMs`` breakdown Spark reports in
   ``StreamingQueryProgress`` (addBatch, queryPlanning, walCommit, commitOffsets, ...).

The last line printed is JSON with the per-epoch figures. Run:
``.venv/bin/python -m bench.profile_overhead`` (``--rows`` and ``--rows-per-epoch`` as in
``bench.overhead``).
"""

from __future__ import annotations

import argparse
import cProfile
import json
import pstats
import re
import sys
import time
import urllib.request
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from bench.keyed_state import STATE_PARTITIONS
from bench.overhead import bench_servers, run_pipeline, structured_streaming_sums
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.session import spark_session

_OWN_CODE = re.compile(r"spark_runtime/(?!protocol/)")


def _session() -> SparkSession:
    # The UI runs for its REST API, which lists every job and stage the profile timed.
    return spark_session(
        "snapshotjob-profile",
        shuffle_partitions=STATE_PARTITIONS,
        driver_memory="2g",
        ui=True,
        conf={
            "spark.ui.port": "0",
            "spark.ui.retainedJobs": "100000",
            "spark.ui.retainedStages": "100000",
        },
    )


class SparkJobs:
    """Reads finished jobs and stages from the driver's status REST API."""

    def __init__(self, spark: SparkSession) -> None:
        url = spark.sparkContext.uiWebUrl
        assert url is not None, "the profile needs the Spark UI"
        self._base = f"{url}/api/v1/applications/{spark.sparkContext.applicationId}"

    def _get(self, path: str) -> list[dict[str, Any]]:
        with urllib.request.urlopen(f"{self._base}/{path}", timeout=30) as response:
            result: list[dict[str, Any]] = json.load(response)
            return result

    def job_ids(self) -> set[int]:
        """Ids of every job so far."""
        return {job["jobId"] for job in self._get("jobs")}

    def summary(self, since: set[int]) -> dict[str, Any]:
        """Jobs and stages started after ``since``, grouped by call site."""
        # The listener bus is asynchronous: let it catch up with the last jobs.
        time.sleep(2)
        jobs = [j for j in self._get("jobs") if j["jobId"] not in since]
        stage_ids = {s for j in jobs for s in j["stageIds"]}
        stages = {s["stageId"]: s for s in self._get("stages") if s["stageId"] in stage_ids}
        groups: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
        for job in jobs:
            site = _site(job["name"])
            group = groups[site]
            group["jobs"] += 1
            group["seconds"] += _seconds(job)
            ran = [stages[s] for s in job["stageIds"] if s in stages]
            group["stages"] += len([s for s in ran if s.get("status") == "COMPLETE"])
            group["tasks"] += sum(
                s.get("numTasks", 0) for s in ran if s.get("status") == "COMPLETE"
            )
            group["executor_run_s"] += sum(s.get("executorRunTime", 0) for s in ran) / 1000
        return {
            "jobs": len(jobs),
            "job_seconds": round(sum(_seconds(j) for j in jobs), 2),
            "by_call_site": {
                site: {k: round(v, 2) for k, v in values.items()}
                for site, values in sorted(groups.items(), key=lambda kv: -kv[1]["seconds"])
            },
        }


def _site(name: str) -> str:
    """``collect at /work/main/spark_runtime/sinks/file.py:80`` -> ``collect at file.py:80``."""
    return re.sub(r"/\S*/", "", name)


def _seconds(job: dict[str, Any]) -> float:
    if "submissionTime" not in job or "completionTime" not in job:
        return 0.0
    fmt = "%Y-%m-%dT%H:%M:%S.%f%Z"
    start = datetime.strptime(job["submissionTime"], fmt)
    end = datetime.strptime(job["completionTime"], fmt)
    return (end - start).total_seconds()


def _python_profile(profile: cProfile.Profile, top: int) -> dict[str, float]:
    """Cumulative seconds of the runtime's functions and of py4j calls into the JVM."""
    stats = pstats.Stats(profile)
    rows: dict[str, float] = {}
    py4j_s = 0.0
    for (filename, line, function), entry in stats.stats.items():  # type: ignore[attr-defined]
        cumulative = entry[3]
        if _OWN_CODE.search(filename) or "bench/overhead" in filename:
            rows[f"{Path(filename).name}:{line}({function})"] = cumulative
        if filename.endswith("py4j/java_gateway.py") and function == "__call__":
            py4j_s += cumulative
        if filename.endswith("py4j/clientserver.py") and function == "send_command":
            rows["py4j send_command (all JVM round trips)"] = cumulative
    best = dict(sorted(rows.items(), key=lambda kv: -kv[1])[:top])
    best["py4j JavaMember.__call__"] = py4j_s
    return {k: round(v, 3) for k, v in best.items()}


def _profiled(spark: SparkSession, label: str, run: Callable[[], Any], top: int) -> dict[str, Any]:
    jobs = SparkJobs(spark)
    before = jobs.job_ids()
    profile = cProfile.Profile()
    started = time.monotonic()
    profile.enable()
    result = run()
    profile.disable()
    wall = time.monotonic() - started
    summary = jobs.summary(before)
    report = {"run": label, "wall_s": round(wall, 2), "result": result, **summary}
    report["python_cumulative_s"] = _python_profile(profile, top)
    print(json.dumps(report, indent=2), flush=True)
    return report


def structured_streaming(
    spark: SparkSession, workdir: Path, rows: int, rows_per_epoch: int
) -> dict[str, Any]:
    """The benchmark's Structured Streaming query; returns its averaged progress breakdown."""
    sums = structured_streaming_sums(spark, rows_per_epoch)
    batches = rows // rows_per_epoch
    seen: list[int] = []

    def sink(frame: DataFrame, batch_id: int) -> None:
        frame.count()
        seen.append(batch_id)

    query = (
        sums.writeStream.outputMode("update")
        .option("checkpointLocation", str(workdir / f"ss-{time.monotonic_ns()}"))
        .foreachBatch(sink)
        .trigger(processingTime="0 seconds")
        .start()
    )
    started = time.monotonic()
    while len(seen) < batches:
        time.sleep(0.05)
    elapsed = time.monotonic() - started
    progress = [p for p in query.recentProgress if p.get("numInputRows", 0) > 0]
    query.stop()
    totals: dict[str, float] = defaultdict(float)
    for entry in progress:
        for phase, ms in entry["durationMs"].items():
            totals[phase] += ms
    return {
        "batches": batches,
        "seconds": round(elapsed, 2),
        "avg_duration_ms": {k: round(v / max(1, len(progress)), 1) for k, v in totals.items()},
        "stateful_ops": progress[-1]["stateOperators"][0]["numRowsTotal"] if progress else None,
    }


def main() -> int:
    """Starts the servers, profiles each run and prints the JSON summary line."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--rows", type=int, default=100_000)
    options.add_argument("--rows-per-epoch", type=int, default=10_000)
    options.add_argument("--top", type=int, default=25)
    options.add_argument(
        "--sink",
        choices=("postgres", "count"),
        default="postgres",
        help="the pipeline's sink: PostgreSQL, or bench.epoch_floor's counting sink",
    )
    ns = options.parse_args()
    with bench_servers("sj-profile") as servers:
        workdir, address, store = servers.workdir, servers.address, servers.store
        dsn = servers.dsn if ns.sink == "postgres" else None
        spark = _session()
        run_pipeline(spark, address, store, workdir, dsn, ProcessingGuarantee.NONE, 20_000, 10_000)
        epochs = ns.rows // ns.rows_per_epoch
        summary: dict[str, Any] = {"epochs": epochs}
        for guarantee in (ProcessingGuarantee.NONE, ProcessingGuarantee.EXACTLY_ONCE):
            report = _profiled(
                spark,
                guarantee.value,
                lambda g=guarantee: run_pipeline(  # type: ignore[misc]
                    spark, address, store, workdir, dsn, g, ns.rows, ns.rows_per_epoch
                ),
                ns.top,
            )
            summary[guarantee.value] = {
                "s_per_epoch": round(report["wall_s"] / epochs, 3),
                "jobs_per_epoch": round(report["jobs"] / epochs, 2),
            }
        streaming = _profiled(
            spark,
            "structured-streaming",
            lambda: structured_streaming(spark, workdir, ns.rows, ns.rows_per_epoch),
            ns.top,
        )
        summary["structured_streaming"] = {
            "s_per_epoch": round(streaming["result"]["seconds"] / epochs, 3),
            "jobs_per_epoch": round(streaming["jobs"] / epochs, 2),
        }
        spark.stop()
        print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
