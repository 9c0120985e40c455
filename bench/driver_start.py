"""How long a driver's Spark start takes, with the class data sharing archive and without.

Every restart of a job starts a new Spark JVM before the driver can restore, so this is part
of the time a failed job produces nothing. Each trial is a fresh process that starts the
session the driver starts (:func:`spark_runtime.session.spark_session`) and runs one keyed
aggregation on it (the first query compiles and loads most of what an epoch needs); trials
with the archive (:mod:`spark_runtime.cds`) and without it (``SJ_CDS=off``) alternate, so
both see the same machine.

Prints each trial, the medians, the ratio ``with / without`` (below 1 is faster), and ends
with one JSON line. Run: ``.venv/bin/python bench/driver_start.py [--trials N]``; it builds
the archive first if this machine has none (about 40 s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from spark_runtime import cds  # noqa: E402 - after the path set-up above

TRIAL = """
import json, time
started = time.monotonic()
from spark_runtime.session import spark_session
spark = spark_session("bench-driver-start", shuffle_partitions=4)
session = time.monotonic()
spark.range(10000).selectExpr("id % 10 AS key", "id AS value").groupBy("key").sum().collect()
query = time.monotonic()
shared = spark.sparkContext._jvm.java.lang.management.ManagementFactory.getPlatformMXBean(
    spark.sparkContext._jvm.java.lang.Class.forName("com.sun.management.HotSpotDiagnosticMXBean")
).getVMOption("SharedArchiveFile").getValue()
print(json.dumps({"session_s": session - started, "query_s": query - session, "archive": shared}))
spark.stop()
"""


def trial(with_archive: bool) -> dict[str, float | str]:
    """One fresh process: its session start, first query and the archive its JVM used."""
    env = dict(os.environ, SJ_CDS="on" if with_archive else "off")
    started = time.monotonic()
    out = subprocess.run(
        [sys.executable, "-c", TRIAL],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    result["process_s"] = time.monotonic() - started
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=5, help="trials of each kind")
    args = parser.parse_args()
    archive = cds.build()
    if archive is None:
        print("No java found: nothing to measure", file=sys.stderr)
        return 1
    print(f"archive={archive} bytes={archive.stat().st_size}")
    trial(True)  # warms the page cache for both kinds alike: the archive and the jars
    runs: dict[bool, list[dict[str, float | str]]] = {True: [], False: []}
    for number in range(args.trials):
        for kind in (False, True):
            result = trial(kind)
            runs[kind].append(result)
            print(
                f"trial={number} archive={'yes' if kind else 'no'} "
                f"session_s={result['session_s']:.2f} query_s={result['query_s']:.2f} "
                f"process_s={result['process_s']:.2f} jvm_archive={result['archive'] or '-'}"
            )
    assert all(r["archive"] == str(archive) for r in runs[True]), "a JVM did not use it"
    assert all(not r["archive"] for r in runs[False]), "a baseline JVM used an archive"

    def median(kind: bool, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[kind])

    figures = {
        "trials": args.trials,
        "start_s_without": round(median(False, "session_s") + median(False, "query_s"), 2),
        "start_s_with": round(median(True, "session_s") + median(True, "query_s"), 2),
        "session_s_without": round(median(False, "session_s"), 2),
        "session_s_with": round(median(True, "session_s"), 2),
        "query_s_without": round(median(False, "query_s"), 2),
        "query_s_with": round(median(True, "query_s"), 2),
    }
    figures["driver_start_ratio"] = round(figures["start_s_with"] / figures["start_s_without"], 3)
    print(
        f"Session and first query, median of {args.trials}: "
        f"without archive {figures['start_s_without']:.2f} s, "
        f"with {figures['start_s_with']:.2f} s, ratio {figures['driver_start_ratio']:.2f}"
    )
    print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    sys.exit(main())
