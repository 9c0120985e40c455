"""Runs an example pipeline end to end on this machine and prints its result.

``python -m examples.demo sequence-sum`` (or ``word-count``) starts what the job needs, the
same way the tests do (three Hazelcast members and a PostgreSQL server from
:mod:`testbed`), runs the driver as ``python -m spark_runtime run`` in local mode,
prints the output table and checks it, then stops everything. With ``--crash-after`` the
driver is killed (SIGKILL) once after that many seconds and started again, to show that the
result is still exact.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

import psycopg

from examples.sequence_sum import expected_sums
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.postgres import PostgresServer

REPO = Path(__file__).resolve().parent.parent

WORDS_TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "the dog sleeps and the fox runs",
    "snapshots make the fox exactly once",
]


def driver_command(
    pipeline: str, args: dict[str, object], workdir: Path, cluster: HazelcastCluster, job: str
) -> list[str]:
    """The local-mode driver command line for ``pipeline`` (the chaos harness's, too)."""
    return DriverHarness(
        workdir=workdir,
        members=[node.address for node in cluster.nodes],
        cluster_name=cluster.cluster_name,
        job_uid=job,
        pipeline=pipeline,
        args=args,
    ).command()


def run_driver(command: list[str], crash_after: float | None) -> int:
    """Runs the driver to its end, SIGKILLing and restarting it once if asked."""
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if crash_after is not None:
        process = subprocess.Popen(command, env=env, cwd=REPO)
        time.sleep(crash_after)
        if process.poll() is None:
            process.send_signal(signal.SIGKILL)
            process.wait()
            print(f"demo: killed the driver after {crash_after:.0f}s; restarting it", flush=True)
    return subprocess.run(command, env=env, cwd=REPO, check=False).returncode


def main() -> int:
    """Starts the servers, runs the example and prints the result."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("example", choices=["sequence-sum", "word-count"])
    options.add_argument("--crash-after", type=float, default=None)
    ns = options.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sj-demo-"))
    (workdir / "hazelcast").mkdir()
    cluster = HazelcastCluster(workdir / "hazelcast", size=3)
    # Its own top-level directory: the server runs as the postgres user, who cannot enter
    # the (private) demo directory when the demo runs as root.
    postgres = PostgresServer(Path(tempfile.mkdtemp(prefix="sj-demo-postgres-")))
    try:
        print("demo: starting 3 Hazelcast members and PostgreSQL ...", flush=True)
        cluster.start()
        postgres.start()
        dsn = postgres.create_database("demo")
        job = f"demo-{uuid.uuid4().hex[:6]}"
        if ns.example == "sequence-sum":
            end, keys = 20_000, 10
            args: dict[str, object] = {"dsn": dsn, "end": end, "keys": keys, "rows_per_epoch": 2000}
            pipeline, table, order = "examples.sequence_sum", "sums", "key"
        else:
            inputs = workdir / "input"
            inputs.mkdir()
            for index, line in enumerate(WORDS_TEXT):
                (inputs / f"part-{index:03d}.txt").write_text(line + "\n")
            args = {"dsn": dsn, "input": str(inputs), "files_per_epoch": 1, "bounded": "true"}
            pipeline, table, order = "examples.word_count", "word_counts", "count DESC, word"
        command = driver_command(pipeline, args, workdir, cluster, job)
        code = run_driver(command, ns.crash_after)
        with psycopg.connect(dsn) as conn:
            rows = conn.execute(f"SELECT * FROM {table} ORDER BY {order}").fetchall()
        print(f"demo: driver exit code {code}; table {table}:")
        for row in rows:
            print("   ", *row)
        if ns.example == "sequence-sum":
            expected = expected_sums(end, keys)
            actual = {key: (total, count) for key, total, count in rows}
            verdict = "exact" if actual == expected else f"WRONG, expected {expected}"
            print(f"demo: sums are {verdict}")
            return 0 if actual == expected else 1
        return 0 if code == 0 else 1
    finally:
        cluster.stop()
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(postgres.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
