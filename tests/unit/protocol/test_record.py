"""The execution record's pure operations and its CRD status form."""

from __future__ import annotations

import fnmatch

import pytest

from snapshot_protocol import (
    NO_SNAPSHOT,
    ExecutionRecord,
    JobIdentity,
    SnapshotKind,
    SnapshotStats,
    export_map_name,
    snapshot_map_name,
)
from snapshotjob_contract import (
    CHAIN_MAP_INDEX,
    EXPORT_BACKUP_COUNT,
    MAX_BACKUP_COUNT,
    all_snapshot_map_names,
    member_map_backup_counts,
)

pytestmark = pytest.mark.unit

JOB = JobIdentity(uid="uid-1", namespace="ns", backup_count=1)


def done(
    record: ExecutionRecord,
    kind: SnapshotKind,
    failure: str | None = None,
    incremental: bool = False,
) -> ExecutionRecord:
    export_name = "exp" if kind.is_exported else None
    return record.snapshot_done(
        kind,
        export_name=export_name,
        num_bytes=10,
        num_keys=2,
        num_chunks=1,
        failure=failure,
        now=500,
        backup_count=JOB.backup_count,
        incremental=incremental,
    )


def test_new_record_has_no_snapshot() -> None:
    record = ExecutionRecord()
    assert (record.snapshot_id, record.data_map_index, record.ongoing_snapshot_id) == (-1, -1, -1)
    assert record.ongoing_data_map_index(incremental=False) == 0
    assert record.successful_snapshot_map_name(JOB) is None


def test_start_new_snapshot_always_increments_the_ongoing_id() -> None:
    record = ExecutionRecord().start_new_snapshot(100)
    assert (record.ongoing_snapshot_id, record.ongoing_snapshot_start_time) == (0, 100)
    # A failed or export-only snapshot does not give its id back.
    record = done(record, SnapshotKind.EXPORT_ONLY).start_new_snapshot(200)
    record = done(record, SnapshotKind.AUTOMATIC, failure="boom").start_new_snapshot(300)
    assert record.ongoing_snapshot_id == 2
    assert record.snapshot_id == NO_SNAPSHOT


@pytest.mark.parametrize("kind", [SnapshotKind.AUTOMATIC, SnapshotKind.TERMINAL])
def test_successful_automatic_or_terminal_snapshot_switches_the_data_map(
    kind: SnapshotKind,
) -> None:
    record = done(ExecutionRecord().start_new_snapshot(100), kind)
    assert (record.snapshot_id, record.data_map_index) == (0, 0)
    assert record.ongoing_data_map_index(incremental=False) == 1
    assert record.successful_snapshot_map_name(JOB) == "__sj.b1.snapshot.uid-1.0"
    assert record.snapshot_stats == SnapshotStats(0, 100, 500, 10, 2, 1)
    assert record.last_snapshot_failure is None
    record = done(record.start_new_snapshot(600), kind)
    assert (record.snapshot_id, record.data_map_index) == (1, 1)
    assert record.successful_snapshot_map_name(JOB) == "__sj.b1.snapshot.uid-1.1"


def test_export_only_snapshot_never_becomes_the_restore_point() -> None:
    automatic = done(ExecutionRecord().start_new_snapshot(100), SnapshotKind.AUTOMATIC)
    record = done(automatic.start_new_snapshot(200), SnapshotKind.EXPORT_ONLY)
    assert (record.snapshot_id, record.data_map_index) == (0, 0)
    assert record.exported_snapshot_name is None
    assert record.successful_snapshot_map_name(JOB) == "__sj.b1.snapshot.uid-1.0"
    assert record.snapshot_stats is not None and record.snapshot_stats.snapshot_id == 1


def test_terminal_exported_snapshot_becomes_the_restore_point_in_its_export_map() -> None:
    automatic = done(ExecutionRecord().start_new_snapshot(100), SnapshotKind.AUTOMATIC)
    record = done(automatic.start_new_snapshot(200), SnapshotKind.TERMINAL_EXPORTED)
    assert (record.snapshot_id, record.data_map_index) == (1, 0)
    assert record.successful_snapshot_map_name(JOB) == "__sj.export.ns.exp"
    # The next automatic snapshot goes to the map not holding the last automatic one and
    # points the record back at the automatic maps.
    assert record.ongoing_snapshot_map_name(JOB, None) == "__sj.b1.snapshot.uid-1.1"
    record = done(record.start_new_snapshot(300), SnapshotKind.AUTOMATIC)
    assert record.exported_snapshot_name is None
    assert record.successful_snapshot_map_name(JOB) == "__sj.b1.snapshot.uid-1.1"


def test_failed_snapshot_only_records_the_failure() -> None:
    start = ExecutionRecord().start_new_snapshot(100)
    record = done(start, SnapshotKind.TERMINAL_EXPORTED, failure="phase 1 failed")
    assert (record.snapshot_id, record.data_map_index) == (NO_SNAPSHOT, -1)
    assert record.exported_snapshot_name is None
    assert record.last_snapshot_failure == "phase 1 failed"


def test_snapshot_done_needs_an_export_name_exactly_for_exported_kinds() -> None:
    start = ExecutionRecord().start_new_snapshot(100)
    with pytest.raises(ValueError, match="export name"):
        start.snapshot_done(
            SnapshotKind.AUTOMATIC,
            export_name="x",
            num_bytes=0,
            num_keys=0,
            num_chunks=0,
            failure=None,
            now=1,
            backup_count=1,
        )


def test_ongoing_map_of_an_export_is_its_export_map() -> None:
    assert ExecutionRecord().ongoing_snapshot_map_name(JOB, "nightly") == "__sj.export.ns.nightly"


def test_quorum_size_is_only_raised() -> None:
    record = ExecutionRecord().with_quorum_size(3)
    assert record.with_quorum_size(2).quorum_size == 3
    assert record.with_quorum_size(4).quorum_size == 4


def test_suspension_and_resumption() -> None:
    record = ExecutionRecord().suspended_because("user asked")
    assert (record.suspended, record.suspension_cause) == (True, "user asked")
    assert record.resumed() == ExecutionRecord()


def test_stamped_sets_the_timestamp() -> None:
    assert ExecutionRecord().stamped(42).timestamp == 42


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"data_map_index": 3}, "dataMapIndex"),
        ({"snapshot_id": 3, "ongoing_snapshot_id": 2}, "snapshotId"),
        ({"snapshot_id": -2}, "snapshotId"),
    ],
)
def test_inconsistent_record_is_rejected(fields: dict[str, int], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ExecutionRecord(**fields)  # type: ignore[arg-type]


def test_to_dict_uses_the_crd_status_keys() -> None:
    record = done(ExecutionRecord().start_new_snapshot(100), SnapshotKind.TERMINAL_EXPORTED)
    record = record.with_quorum_size(2).suspended_because("asked").stamped(700)
    assert record.to_dict() == {
        "snapshotId": 0,
        "dataMapIndex": -1,
        "dataMapBackupCount": None,
        "ongoingSnapshotId": 0,
        "ongoingSnapshotStartTime": 100,
        "exportedSnapshotName": "exp",
        "lastSnapshotFailure": None,
        "snapshotStats": {
            "snapshotId": 0,
            "startTime": 100,
            "endTime": 500,
            "numBytes": 10,
            "numKeys": 2,
            "numChunks": 1,
        },
        "quorumSize": 2,
        "suspended": True,
        "suspensionCause": "asked",
        "timestamp": 700,
    }
    assert ExecutionRecord.from_dict(record.to_dict()) == record


def test_from_dict_of_a_new_job() -> None:
    assert ExecutionRecord.from_dict(None) == ExecutionRecord()
    assert ExecutionRecord.from_dict({}) == ExecutionRecord()
    assert ExecutionRecord.from_dict(ExecutionRecord().to_dict()) == ExecutionRecord()


def test_map_names() -> None:
    assert snapshot_map_name("u", 1, 3) == "__sj.b3.snapshot.u.1"
    assert snapshot_map_name("u", 0, None) == "__sj.snapshot.u.0"
    assert export_map_name("ns", "n") == "__sj.export.ns.n"
    assert snapshot_map_name("u", CHAIN_MAP_INDEX, 2) == "__sj.b2.chain.u"
    with pytest.raises(ValueError, match="0, 1 or 2"):
        snapshot_map_name("u", -1, 1)
    with pytest.raises(ValueError, match="carries its backup count"):
        snapshot_map_name("u", CHAIN_MAP_INDEX, None)
    with pytest.raises(ValueError, match="1 to 6"):
        snapshot_map_name("u", 0, 7)
    with pytest.raises(ValueError, match="1 to 6"):
        JobIdentity("u", "ns", 0)
    names = all_snapshot_map_names("u")
    assert len(names) == len(set(names)) == 20
    assert {
        "__sj.snapshot.u.0",
        "__sj.b1.snapshot.u.1",
        "__sj.b6.snapshot.u.0",
        "__sj.b1.chain.u",
        "__sj.b6.chain.u",
    } <= set(names)


def test_every_map_name_matches_the_member_pattern_with_its_backup_count() -> None:
    patterns = member_map_backup_counts()

    def backups(name: str) -> int | None:
        # Hazelcast's rule: the longest matching pattern wins.
        matching = [p for p in patterns if fnmatch.fnmatchcase(name, p)]
        return patterns[max(matching, key=len)] if matching else None

    for count in range(1, MAX_BACKUP_COUNT + 1):
        job = JobIdentity("u", "ns", count)
        assert backups(ExecutionRecord().ongoing_snapshot_map_name(job, None)) == count
        chained = JobIdentity("u", "ns", count, incremental=True)
        assert backups(ExecutionRecord().ongoing_snapshot_map_name(chained, None)) == count
        assert backups(ExecutionRecord().ongoing_snapshot_map_name(job, "exp")) == 6
    assert EXPORT_BACKUP_COUNT == MAX_BACKUP_COUNT == 6
    # Maps of older snapshots fall back to the members' __sj.* default.
    assert backups(snapshot_map_name("u", 0, None)) is None


def test_the_record_finds_its_snapshot_after_the_backup_count_changed() -> None:
    more = JobIdentity(JOB.uid, JOB.namespace, 3)
    record = done(ExecutionRecord().start_new_snapshot(100), SnapshotKind.AUTOMATIC)
    assert record.data_map_backup_count == JOB.backup_count == 1
    # Restore reads the map the snapshot was written to; the next one goes to the new name.
    assert record.successful_snapshot_map_name(more) == "__sj.b1.snapshot.uid-1.0"
    assert record.ongoing_snapshot_map_name(more, None) == "__sj.b3.snapshot.uid-1.1"
    record = record.start_new_snapshot(200).snapshot_done(
        SnapshotKind.AUTOMATIC,
        export_name=None,
        num_bytes=1,
        num_keys=1,
        num_chunks=1,
        failure=None,
        now=300,
        backup_count=more.backup_count,
    )
    assert record.successful_snapshot_map_name(more) == "__sj.b3.snapshot.uid-1.1"
    assert ExecutionRecord.from_dict(record.to_dict()) == record
    # A record written before names carried the count names the map as it was then.
    legacy = {"snapshotId": 4, "dataMapIndex": 1, "ongoingSnapshotId": 4}
    assert (
        ExecutionRecord.from_dict(legacy).successful_snapshot_map_name(more)
        == "__sj.snapshot.uid-1.1"
    )


def test_an_incremental_job_keeps_its_snapshots_in_the_chain_map() -> None:
    chained = JobIdentity(JOB.uid, JOB.namespace, JOB.backup_count, incremental=True)

    def automatic(record: ExecutionRecord, incremental: bool) -> ExecutionRecord:
        return done(record.start_new_snapshot(100), SnapshotKind.AUTOMATIC, None, incremental)

    record = automatic(ExecutionRecord(), incremental=True)
    assert record.data_map_index == CHAIN_MAP_INDEX
    # The next snapshot writes where the restore point is: it may inherit its chunks.
    assert record.ongoing_snapshot_map_name(chained, None) == "__sj.b1.chain.uid-1"
    assert record.successful_snapshot_map_name(chained) == "__sj.b1.chain.uid-1"
    assert automatic(record, incremental=True).data_map_index == CHAIN_MAP_INDEX
    assert ExecutionRecord.from_dict(record.to_dict()) == record
    # Turned off, the job goes back to the pair; the chain map keeps the restore point.
    assert record.ongoing_snapshot_map_name(JOB, None) == "__sj.b1.snapshot.uid-1.0"
    assert automatic(record, incremental=False).data_map_index == 0
    # Turned on from the pair, the first chain-map snapshot leaves the pair's restore point.
    paired = automatic(ExecutionRecord(), incremental=False)
    assert paired.ongoing_snapshot_map_name(chained, None) == "__sj.b1.chain.uid-1"
