"""``spec.hazelcast.backupCount`` does what it says: a job's snapshot survives that many members
failing at once, on real members, and not one more.

A map's backups come from the member config pattern its name matches (the names carry the
count, see :mod:`snapshotjob_contract.record`), so these tests check the members, not the
names: four members of the test bed, configured as the chart configures them, lose two at once
(SIGKILL, no migration in between). With two backups every snapshot chunk is still there and
the real driver restores and finishes with the exact closed-form sums of
``examples.sequence_sum``; with one backup the same kill loses entries (the first test: a map
of each kind, side by side). A driver that then finds chunks of its restore point missing
refuses it (``SnapshotCorrupted``, naming the snapshot): that is
``tests/integration/test_protocol_hazelcast.py::test_losing_two_members_is_detected_at_restore``,
and a real driver's refusal of a damaged snapshot is ``test_restore_integrity.py``'s. Run
time: about 3 minutes on a 2-core machine (two four-member clusters, two Spark driver
starts).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest

from examples.sequence_sum import expected_sums
from snapshotjob_contract import export_map_name, snapshot_map_name
from snapshotjob_contract.exits import DriverExit
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.postgres import prepared_transactions

pytestmark = pytest.mark.timeout(900)

MEMBERS = 4
KILLED = (2, 3)
BACKUPS = len(KILLED)
"""The job's ``backupCount``: as many backups as members killed at once."""
KEYS = 1000
STATE_PARTITIONS = 64
END = 40_000


@pytest.fixture
def four_members(tmp_path: Path) -> Iterator[HazelcastCluster]:
    """Four fresh members (the session's cluster has three), stopped after the test."""
    (tmp_path / "hazelcast").mkdir()
    cluster = HazelcastCluster(tmp_path / "hazelcast", size=MEMBERS, heap="384m")
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _kill_two_at_once(cluster: HazelcastCluster) -> None:
    """SIGKILLs two members before the others can notice either (detection takes seconds)."""
    for index in KILLED:
        cluster.kill(index)
    cluster.wait_cluster_safe(expected_size=MEMBERS - len(KILLED))


def test_members_keep_as_many_backups_as_the_map_name_says(
    four_members: HazelcastCluster,
) -> None:
    cluster = four_members
    client = cluster.client()
    entries = 2000
    uid = uuid.uuid4().hex[:8]
    names = {
        "one backup": snapshot_map_name(uid, 0, 1),
        "two backups": snapshot_map_name(uid, 0, 2),
        "export": export_map_name("ns", f"export-{uid}"),
    }
    for name in names.values():
        target = client.get_map(name).blocking()
        for key in range(entries):
            target.set(key, b"x")
    cluster.wait_cluster_safe(expected_size=MEMBERS)

    _kill_two_at_once(cluster)

    left = {what: client.get_map(name).blocking().size() for what, name in names.items()}
    assert left["two backups"] == entries, left
    assert left["export"] == entries, left
    # The contrast shows the count is the members' doing: one backup loses the partitions
    # whose owner and backup were both killed.
    assert left["one backup"] < entries, left


def _sums(dsn: str) -> dict[int, tuple[int, int]]:
    with psycopg.connect(dsn) as conn:
        rows = conn.execute("SELECT key, total, count FROM sums").fetchall()
    return {key: (total, count) for key, total, count in rows}


def test_a_snapshot_survives_backup_count_members_killed_at_once(
    four_members: HazelcastCluster, postgres_dsn: str, tmp_path: Path
) -> None:
    cluster = four_members
    harness = DriverHarness(
        workdir=tmp_path,
        members=[node.address for node in cluster.nodes],
        cluster_name=cluster.cluster_name,
        job_uid=f"backups-{uuid.uuid4().hex[:8]}",
        pipeline="examples.sequence_sum",
        args={"dsn": postgres_dsn, "keys": KEYS, "end": END, "rows_per_epoch": 2000},
        snapshot_interval_ms=1000,
        state_partitions=STATE_PARTITIONS,
        backup_count=BACKUPS,
        extra_args=["--conf", "spark.driver.memory=768m"],
    )
    maps = f"map={snapshot_map_name(harness.job_uid, 0, BACKUPS)[:-1]}"
    harness.start()
    assert harness.wait_for_log("Snapshot done", count=2, timeout=300), harness.log_tail()
    assert maps in harness.log_text(), harness.log_tail()
    # The driver dies with the members, so the restore point is the last snapshot taken while
    # all four members (and so every backup) were there.
    assert harness.kill(), harness.log_tail()
    _kill_two_at_once(cluster)

    harness.args["rows_per_epoch"] = 20_000
    harness.start()
    code = harness.wait(timeout=600)
    log = harness.log_text()
    assert code == DriverExit.COMPLETED, harness.log_tail()
    assert "Restored state operator=sums" in log, harness.log_tail()
    assert "Restore failed" not in log
    assert _sums(postgres_dsn) == expected_sums(END, KEYS)
    assert prepared_transactions(postgres_dsn) == []
