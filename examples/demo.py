"""Runs an example pipeline end to end on this machine and prints its result.

``python -m examples.demo sequence-sum`` (or ``word-count``) starts what the job needs, the
same way the tests do (three Hazelcast members and a PostgreSQL server from
:mod:`testbed`), runs the driver as ``python -m spark_runtime run`` in local mode,
prints the output table and checks it, then stops everything. With ``--crash-at F`` the
sequence-sum driver is killed (SIGKILL) once a fraction F of its events is committed to
PostgreSQL, and started again: it restores from its last snapshot, and the sums and the
events table (one row per event, no unique constraint) show that nothing was lost or
repeated. The crash follows the job's progress, not a clock, so it always lands mid-job.
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

from examples.sequence_sum import check_event_ids, expected_sums
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.postgres import PostgresServer

REPO = Path(__file__).resolve().parent.parent

WORDS_TEXT = [
    "the quick brown fox jumps over the lazy dog",
    "the dog sleeps and the fox runs",
    "snapshots make the fox exactly once",
]


class CrashDemoError(RuntimeError):
    """The crash the demo was asked for did not happen, or nothing restored after it."""


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


def committed_events(dsn: str) -> int:
    """Events the sink has committed so far: the sum of the per-key counts (0 before any)."""
    with psycopg.connect(dsn) as conn:
        exists = conn.execute("SELECT to_regclass('sums') IS NOT NULL").fetchone()
        if not exists or not exists[0]:
            return 0
        row = conn.execute("SELECT coalesce(sum(count), 0) FROM sums").fetchone()
    return int(row[0]) if row else 0


def crash_when(command: list[str], env: dict[str, str], dsn: str, events: int) -> None:
    """Starts the driver and SIGKILLs it once ``events`` events are committed.

    Raises:
        CrashDemoError: If the driver ended before reaching that point (nothing crashed).
    """
    process = subprocess.Popen(command, env=env, cwd=REPO)
    start = time.monotonic()
    while process.poll() is None and committed_events(dsn) < events:
        time.sleep(0.2)
    if process.poll() is not None:
        raise CrashDemoError(
            f"The driver ended (exit code {process.returncode}) before {events} events were "
            "committed: nothing was crashed"
        )
    process.send_signal(signal.SIGKILL)
    process.wait()
    done = committed_events(dsn)
    print(
        f"demo: killed the driver (SIGKILL) after {time.monotonic() - start:.0f}s with {done} "
        "events committed; restarting it from its last snapshot",
        flush=True,
    )


def run_driver(command: list[str], dsn: str, crash_at_events: int | None) -> int:
    """Runs the driver to its end, SIGKILLing and restarting it once if asked.

    Raises:
        CrashDemoError: If a crash was asked for and the restarted driver did not restore.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    if crash_at_events is None:
        return subprocess.run(command, env=env, cwd=REPO, check=False).returncode
    crash_when(command, env, dsn, crash_at_events)
    restarted = subprocess.Popen(
        command, env=env, cwd=REPO, stderr=subprocess.PIPE, text=True, errors="replace"
    )
    assert restarted.stderr is not None
    restored = []
    for line in restarted.stderr:
        sys.stderr.write(line)
        # The coordinator's line names the snapshot; the source's, the offset it resumed at.
        if "Restored snapshotId=" in line or "Restored source" in line:
            restored.append(line.strip().split(" INFO ", 1)[-1])
    code = restarted.wait()
    if not restored:
        raise CrashDemoError("The restarted driver restored nothing from a snapshot")
    print("demo: the restarted driver restored its last snapshot:", flush=True)
    for line in restored:
        print(f"demo:     {line}", flush=True)
    return code


def main() -> int:
    """Starts the servers, runs the example and prints the result."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("example", choices=["sequence-sum", "word-count"])
    options.add_argument(
        "--crash-at",
        type=float,
        default=None,
        metavar="FRACTION",
        help="sequence-sum: SIGKILL the driver once this fraction of the events is committed",
    )
    ns = options.parse_args()
    if ns.crash_at is not None and not (0 < ns.crash_at < 1 and ns.example == "sequence-sum"):
        options.error("--crash-at takes a fraction between 0 and 1, for sequence-sum only")
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
        crash_at_events = None
        if ns.example == "sequence-sum":
            end, keys = 20_000, 10
            args: dict[str, object] = {
                "dsn": dsn,
                "end": end,
                "keys": keys,
                "rows_per_epoch": 2000,
                "events_table": "events",
            }
            pipeline, table, order = "examples.sequence_sum", "sums", "key"
            if ns.crash_at is not None:
                crash_at_events = int(end * ns.crash_at)
        else:
            inputs = workdir / "input"
            inputs.mkdir()
            for index, line in enumerate(WORDS_TEXT):
                (inputs / f"part-{index:03d}.txt").write_text(line + "\n")
            args = {"dsn": dsn, "input": str(inputs), "files_per_epoch": 1, "bounded": "true"}
            pipeline, table, order = "examples.word_count", "word_counts", "count DESC, word"
        command = driver_command(pipeline, args, workdir, cluster, job)
        try:
            code = run_driver(command, dsn, crash_at_events)
        except CrashDemoError as error:
            print(f"demo: FAILED: {error}", flush=True)
            return 1
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
            events = check_event_ids(dsn, "events", end)
            print(
                f"demo: events table: {events.rows} rows, {events.missing} missing, "
                f"{events.repeated} repeated, {events.strays} strays"
                + ("" if events.exact else f" (repeated ids: {events.examples})")
            )
            return 0 if code == 0 and actual == expected and events.exact else 1
        return 0 if code == 0 else 1
    finally:
        cluster.stop()
        postgres.stop()
        shutil.rmtree(workdir, ignore_errors=True)
        shutil.rmtree(postgres.workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
