"""A zombie driver must not damage the restore point of the execution that replaced it.

Real components: the session's three Hazelcast members, the session's PostgreSQL server (a
database of its own), and real PySpark drivers as separate processes in local mode
(``python -m spark_runtime run``, started by :mod:`testbed.driver_process`), with the
execution record in a record file that each execution claims (``FileRecordStore.claim``):
claiming it is what fences the older execution. The pipeline is ``examples.sequence_sum``
with its events table, so its correct output is known in closed form: exact sums per key and
every event id exactly once.

Before snapshot data was fenced by snapshot id (docs/concepts/protocol.md, mechanism M8), the
validation record had one key per map, so a zombie that went on from inside a snapshot
overwrote the validation record of its replacement's restore point, and a clear that freed a
map (taking steps 3 and 8) wiped it; this test failed with C exiting 65. The scenario
(:mod:`testbed.zombies`):

1. A first execution takes two snapshots and is SIGKILLed: the job has state and a restore
   point R.
2. Driver A restores R and stops itself (``pause`` failpoint, SIGSTOP) in its first
   snapshot, after phase 1 and before it writes the validation record
   (``take.before_step_5``). Its snapshot goes into the automatic map that is not R's.
   It is also armed with ``take.after_step_5=indeterminate``: once it goes on, it writes
   its validation record, its snapshot fails, and step 8b clears that map.
3. Driver B claims the record (A is now fenced), restores R and takes one snapshot, then
   stops itself (``take.after_step_10=pause``). The two automatic maps alternate and a new
   execution writes into the map that does not hold its restore point, so B's snapshot, its
   restore point, is in the map A writes to (asserted from the record file). One snapshot,
   not two: B's second would go back to R's map.
4. A gets SIGCONT and carries on at step 5; its next record write is fenced: exit 77.
5. B is SIGKILLed; driver C restores B's snapshot and runs the bounded sequence to its end.

C must complete (exit 0, not 65 for a corrupted snapshot), the sums must be exact, every
event id present exactly once, and no prepared transaction left. 2 to 4 minutes: four
driver processes, each a Spark start-up.

A second test stalls a zombie in restore step 5, before its sinks settle their transactions.
Its replacement prepares a snapshot's transactions; the zombie goes on, and its sink recovery
must settle only transactions of ids up to its own record's ``ongoingSnapshotId``. Unfenced,
it rolled back the replacement's too; the replacement's phase 2 then committed nothing and an
epoch of output was gone while the record said committed. The running sums are upserted, so
later snapshots repair them: only the events table shows the loss.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from examples.sequence_sum import check_event_ids, expected_sums
from snapshotjob_contract.exits import DriverExit
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.postgres import prepared_transactions
from testbed.zombies import zombie_episode

pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

KEYS = 10
END = 40_000


@pytest.fixture
def harness(
    healthy_hazelcast: HazelcastCluster, postgres_dsn: str, tmp_path: Path
) -> Iterator[DriverHarness]:
    """A local-mode sequence-sum job with an events table; its drivers die with the test."""
    job = DriverHarness(
        workdir=tmp_path,
        members=[node.address for node in healthy_hazelcast.nodes],
        cluster_name=healthy_hazelcast.cluster_name,
        job_uid=f"zombie-{uuid.uuid4().hex[:8]}",
        pipeline="examples.sequence_sum",
        args={
            "dsn": postgres_dsn,
            "keys": KEYS,
            "end": END,
            "rows_per_epoch": 500,
            "events_table": "events",
        },
        extra_args=["--conf", "spark.driver.memory=768m"],
    )
    yield job
    if job.running():
        job.kill()


def test_zombie_resumed_in_phase_1_leaves_the_replacements_restore_point_intact(
    harness: DriverHarness, postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # 1. State and a restore point to start from.
    harness.start()
    assert harness.wait_for_log("Snapshot done", count=2), harness.log_tail()
    harness.kill()

    # 2-4. A stops in phase 1, B replaces it and snapshots into A's map, A goes on.
    episode = zombie_episode(
        harness,
        pause_at="take.before_step_5",
        replacement_ends_at="take.after_step_10=pause",
        zombie_failpoints="take.after_step_5=indeterminate",
    )
    zombie_log = episode.zombie.log_text()
    resumed = zombie_log.partition(f"Failpoint resumed failpoint={episode.pause_at} ")[2]
    with capsys.disabled():
        print(
            f"\nzombie episode: zombie_exit={episode.zombie_exit} "
            f"touched_map={episode.touched_map} replacement_map={episode.replacement_map} "
            f"replacement_snapshot={episode.replacement_snapshot_id} "
            f"replacement_stored_at={episode.replacement_done_at.isoformat()} "
            f"zombie_resumed_at={episode.zombie_resumed_at} "
            f"zombie_snapshot_failed={'Snapshot failed' in resumed}"
        )
    # A really went on from step 5 after B's snapshot was stored, and was fenced.
    assert episode.zombie_resumed_at is not None, zombie_log[-3000:]
    assert episode.zombie_resumed_at > episode.replacement_done_at
    assert episode.zombie_exit == DriverExit.FENCED, zombie_log[-3000:]
    assert "Fenced" in resumed, zombie_log[-3000:]

    # 5. C restores B's snapshot and finishes the bounded sequence in big epochs.
    harness.args["rows_per_epoch"] = 10_000
    harness.start()
    code = harness.wait(timeout=600)
    assert code == DriverExit.COMPLETED, f"C exited {code}:\n{harness.log_tail()}"
    assert "Restored source" in harness.log_text()

    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT key, total, count FROM sums ORDER BY key").fetchall()
    assert {key: (total, count) for key, total, count in rows} == expected_sums(END, KEYS)
    events = check_event_ids(postgres_dsn, "events", END)
    assert events.exact, events
    assert prepared_transactions(postgres_dsn) == []


def test_zombie_resumed_in_restore_step_5_does_not_roll_back_the_replacements_output(
    harness: DriverHarness, postgres_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    harness.start()
    assert harness.wait_for_log("Snapshot done", count=2), harness.log_tail()
    harness.kill()

    # The zombie has made the record safe (restore step 2) and stops before its sinks recover.
    harness.start(failpoints="restore.before_step_5=pause")
    harness.wait_paused("restore.before_step_5")
    zombie = harness.detach()
    try:
        # The replacement prepares its first snapshot's transactions and stops before step 7.
        harness.start(failpoints="take.before_step_7=pause")
        harness.wait_paused("take.before_step_7")
        zombie.resume()
        assert zombie.wait(timeout=300) == DriverExit.FENCED, zombie.log_text()[-3000:]
    finally:
        zombie.kill()
    harness.resume()
    assert harness.wait_for_log("Snapshot done", count=2), harness.log_tail()
    harness.kill()

    harness.args["rows_per_epoch"] = 10_000
    harness.start()
    code = harness.wait(timeout=600)
    assert code == DriverExit.COMPLETED, f"C exited {code}:\n{harness.log_tail()}"
    events = check_event_ids(postgres_dsn, "events", END)
    recovered = [line for line in zombie.log_text().splitlines() if "Recovered sink" in line]
    with capsys.disabled():
        print(f"\nzombie in restore step 5: events={events} zombie_recovery={recovered}")
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT key, total, count FROM sums ORDER BY key").fetchall()
    assert {key: (total, count) for key, total, count in rows} == expected_sums(END, KEYS)
    assert events.exact, events
    assert prepared_transactions(postgres_dsn) == []
