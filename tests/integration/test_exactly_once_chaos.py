"""Exactly-once under chaos: a real driver killed again and again must still sum exactly.

The pipeline is examples.sequence_sum (sequence -> key = n % 10 -> running sum and count ->
PostgreSQL with two-phase commit), whose correct output is known in closed form. The driver
runs as a separate process against the session's real Hazelcast members and PostgreSQL and is
SIGKILLed at random moments, then once at every failpoint of the snapshot taking and restore
procedures, then runs while one Hazelcast member is SIGKILLed and another SIGSTOPped; each time
it is started again and must restore. At the end the table must hold exactly the expected sums
(a lost epoch makes a sum too small, a replayed one too large) and no prepared transaction may
be left. The same harness with AT_LEAST_ONCE and an appending sink must show duplicates, which
proves the kills really hit between snapshots.

Run time: each restart costs a Spark JVM start and a restore (10-20 s on a 2-core machine); the
default run does the issue's 20 random kills plus the 30 failpoints: 14 minutes measured alone
on a 2-core machine (17 while other tests ran), the AT_LEAST_ONCE test 1.5 more. ``SJ_CHAOS_KILLS``
changes the number of random kills, ``SJ_CHAOS_SEED`` their timing.
"""

from __future__ import annotations

import os
import random
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from examples.sequence_sum import expected_sums
from snapshot_protocol import FAILPOINTS, FailpointAction
from snapshotjob_contract.exits import DriverExit
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]

KEYS = 10
ROWS_PER_EPOCH = 1000
# The last execution reads the rest in big epochs: epoch boundaries do not change the sums.
FINAL_ROWS_PER_EPOCH = 200_000
RANDOM_KILLS = int(os.environ.get("SJ_CHAOS_KILLS", "20"))
# More rows than the chaos phases get through (about 1000 rows per second of running driver).
END = 2_000_000


def _harness(
    tmp_path: Path,
    cluster: HazelcastCluster,
    dsn: str,
    guarantee: str,
    sink_mode: str,
    end: int,
    snapshot_interval_ms: int = 1000,
) -> DriverHarness:
    return DriverHarness(
        workdir=tmp_path,
        members=[node.address for node in cluster.nodes],
        cluster_name=cluster.cluster_name,
        job_uid=f"chaos-{uuid.uuid4().hex[:8]}",
        pipeline="examples.sequence_sum",
        args={
            "dsn": dsn,
            "keys": KEYS,
            "end": end,
            "rows_per_epoch": ROWS_PER_EPOCH,
            "sink_mode": sink_mode,
        },
        guarantee=guarantee,
        snapshot_interval_ms=snapshot_interval_ms,
        extra_args=["--conf", "spark.driver.memory=768m"],
    )


def _prepared(dsn: str) -> list[str]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"
        ).fetchall()
    return [row[0] for row in rows]


def _run_to_completion(harness: DriverHarness, attempts: int = 5) -> int:
    """Restarts the driver until it completes; returns how many executions that took."""
    for attempt in range(1, attempts + 1):
        harness.start()
        code = harness.wait(timeout=900)
        if code == DriverExit.COMPLETED:
            return attempt
        # A restart after an indeterminate write or a failed final snapshot is legitimate.
        assert code in (DriverExit.RESTART_FORCEFUL, DriverExit.FAILED), harness.log_tail()
    raise AssertionError(f"driver did not complete in {attempts} executions")


def test_exactly_once_survives_driver_kills_failpoints_and_member_faults(
    healthy_hazelcast: HazelcastCluster,
    postgres_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    cluster = healthy_hazelcast
    harness = _harness(tmp_path, cluster, postgres_dsn, "EXACTLY_ONCE", "upsert", END)
    rng = random.Random(int(os.environ.get("SJ_CHAOS_SEED", "20261121")))
    kills = restores = 0
    started = time.monotonic()

    # 1. SIGKILL at random moments: during JVM start, restore, epochs, snapshots.
    for _ in range(RANDOM_KILLS):
        harness.start()
        time.sleep(rng.uniform(4.0, 30.0))
        # A driver may end by itself first (a restart after an indeterminate write).
        kills += harness.kill()
        restores += harness.log_text().count("Restored source")

    # 2. A crash at every failpoint of both procedures (os._exit in the driver).
    crash_points = [fp.name for fp in FAILPOINTS if FailpointAction.CRASH in fp.actions]
    for name in crash_points:
        harness.start(failpoints=f"{name}=crash")
        code = harness.wait(timeout=300)
        assert code == DriverExit.FAILPOINT_CRASH, f"{name}: exit {code}\n{harness.log_tail()}"
        assert f"failpoint={name}" in harness.log_text()
        kills += 1
        restores += harness.log_text().count("Restored source")

    # 3. Snapshot store faults while snapshots are taken: one member crashes, one hangs.
    harness.start()
    assert harness.wait_for_log("Snapshot done", count=2), harness.log_tail()
    cluster.kill(2)
    assert harness.wait_for_log("Snapshot ", count=4), harness.log_tail()
    cluster.restart(2)
    cluster.wait_cluster_safe(expected_size=3)
    assert harness.wait_for_log("Snapshot ", count=6), harness.log_tail()
    cluster.pause(1)
    time.sleep(6)  # longer than the members' 3 s backup timeout: puts become indeterminate
    cluster.resume(1)
    cluster.wait_cluster_safe(expected_size=3)
    assert harness.wait_for_log("Snapshot ", count=10), harness.log_tail()
    if harness.running():
        harness.kill()
        kills += 1
    restores += harness.log_text().count("Restored source")

    # 4. Let the job finish; the last snapshot's 2nd phase publishes the last output.
    harness.args["rows_per_epoch"] = FINAL_ROWS_PER_EPOCH
    executions = _run_to_completion(harness)
    restores += executions

    expected = expected_sums(END, KEYS)
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT key, total, count FROM sums ORDER BY key").fetchall()
    actual = {key: (total, count) for key, total, count in rows}
    leftover = _prepared(postgres_dsn)
    # The figures belong in the run's output (CI's log), not in pytest's captured stdout.
    with capsys.disabled():
        print(
            f"\nexactly-once chaos: kills={kills} (random={RANDOM_KILLS}, "
            f"failpoints={len(crash_points)}) restores={restores} executions={harness.starts} "
            f"rows_checked={len(rows)} values_summed={END} exit_codes={harness.exit_codes} "
            f"seconds={time.monotonic() - started:.0f}"
        )
    assert actual == expected
    assert leftover == []


def test_at_least_once_with_appending_sink_duplicates_output(
    healthy_hazelcast: HazelcastCluster,
    postgres_dsn: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    end = 60_000
    # Snapshots 5 s apart leave room for epochs between them, which a kill then makes replay.
    harness = _harness(
        tmp_path, healthy_hazelcast, postgres_dsn, "AT_LEAST_ONCE", "append", end, 5000
    )
    kills = 0
    for _ in range(3):
        harness.start()
        assert harness.wait_for_log("Snapshot done"), harness.log_tail()
        epochs = harness.log_text().count("Epoch done")
        assert harness.wait_for_log("Epoch done", count=epochs + 2), harness.log_tail()
        assert harness.kill(), harness.log_tail()
        kills += 1
    harness.args["rows_per_epoch"] = FINAL_ROWS_PER_EPOCH
    _run_to_completion(harness)

    with psycopg.connect(postgres_dsn) as conn:
        repeated = conn.execute(
            "SELECT count(*) FROM (SELECT key, count FROM sums GROUP BY key, count "
            "HAVING count(*) > 1) AS repeated"
        ).fetchone()
        final = conn.execute(
            "SELECT key, max(total), max(count) FROM sums GROUP BY key ORDER BY key"
        ).fetchall()
    duplicates = repeated[0] if repeated is not None else 0
    with capsys.disabled():
        print(f"\nat-least-once chaos: kills={kills} duplicated_rows={duplicates}")
    assert duplicates > 0
    # Replays repeat output but lose nothing: the last totals are still right.
    assert {k: (t, c) for k, t, c in final} == expected_sums(end, KEYS)
