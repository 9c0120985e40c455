"""Starting a job from ``initialSnapshotName``: Jet's ``JobConfig.initialSnapshotName``.

A job whose record has no snapshot of its own restores from the named exported snapshot,
validated as strictly as any restore point; once the job has taken a snapshot of its own, the
initial snapshot is never looked at again. An export the store lost (it was re-created) is
copied back from durable storage, verified, before the restore reads it.

The snapshot maps and the record are the in-memory fakes of ``fakes.py``; the driver starting
from a real export on a real Hazelcast is tested in
``tests/integration/test_driver_kubernetes.py``.
"""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    CoordinatorState,
    JobIdentity,
    SnapshotCorrupted,
    SnapshotNotFound,
    TerminationMode,
    export_map_name,
)
from snapshot_protocol.chunks import validation_record_id
from snapshot_protocol.transfer import transfer_snapshot

from .fakes import Cluster, FakeKeyedState

pytestmark = pytest.mark.unit

S = CoordinatorState
OTHER_JOB = JobIdentity(uid="7c1d-uid", namespace="team-a", backup_count=1)
GOLDEN_MAP = export_map_name("team-a", "golden")


def exported_job(terminal: bool = False) -> Cluster:
    """A job that processed 0..9, exported 'golden' and then processed 10..14."""
    cluster = Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    driver.pipeline.process(4)
    driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    driver.pipeline.process(6)
    if terminal:
        driver.coordinator.request_termination(TerminationMode.CANCEL_GRACEFUL, "golden")
        assert driver.coordinator.state is S.CANCELLED
    else:
        outcome = driver.coordinator.take_snapshot("golden")
        driver.coordinator.finish_snapshot()
        assert outcome.successful
        driver.pipeline.process(5)
    return cluster


def new_job_with(exported: Cluster) -> Cluster:
    """A second job in the same namespace that can see the first one's export map."""
    cluster = Cluster(OTHER_JOB)
    cluster.snapshots.maps[GOLDEN_MAP] = dict(exported.snapshots.maps[GOLDEN_MAP])
    return cluster


@pytest.mark.parametrize("terminal", [False, True], ids=["export-only", "terminal-export"])
def test_new_job_restores_from_the_initial_snapshot(terminal: bool) -> None:
    cluster = new_job_with(exported_job(terminal))
    driver = cluster.start_driver(initial_snapshot_name="golden")
    driver.coordinator.restore()
    assert driver.coordinator.state is S.RUNNING
    assert driver.pipeline.source.offset == 10
    assert driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(10))
    # The record still has no snapshot of its own; the first one gets the job's first id.
    assert cluster.records.record.snapshot_id == -1
    driver.pipeline.process(3)
    outcome = driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    assert (outcome.snapshot_id, outcome.map_name) == (0, "__sj.b1.snapshot.7c1d-uid.0")
    assert cluster.database.committed_items() == [10, 11, 12]


def test_once_the_job_has_its_own_snapshot_the_initial_one_is_ignored() -> None:
    cluster = new_job_with(exported_job())
    driver = cluster.start_driver(initial_snapshot_name="golden")
    driver.coordinator.restore()
    driver.pipeline.process(2)  # items 10, 11
    driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    cluster.snapshots.maps[GOLDEN_MAP].clear()  # would fail validation if it were read
    again = cluster.start_driver(initial_snapshot_name="golden")
    again.coordinator.restore()
    assert again.coordinator.state is S.RUNNING
    assert again.pipeline.source.offset == 12
    assert again.pipeline.state.counts == FakeKeyedState.expected_counts(range(12))


def test_missing_initial_snapshot_fails_permanently_naming_it() -> None:
    cluster = Cluster(OTHER_JOB)
    driver = cluster.start_driver(initial_snapshot_name="golden")
    with pytest.raises(SnapshotNotFound, match="initial snapshot 'golden' does not exist"):
        driver.coordinator.restore()
    assert driver.coordinator.state is S.FAILED
    termination = driver.coordinator.execution_end
    assert termination is not None and GOLDEN_MAP in termination.reason


def durable_copy_of(exported: Cluster) -> Cluster:
    """Object storage holding a verified copy of the first job's export 'golden'."""
    durable = Cluster(OTHER_JOB)
    durable.snapshots.foreign_maps.add(GOLDEN_MAP)
    snapshot_id = exported.snapshots.latest_snapshot_id(GOLDEN_MAP)
    assert snapshot_id is not None
    transfer_snapshot(exported.snapshots, GOLDEN_MAP, durable.snapshots, GOLDEN_MAP, snapshot_id)
    return durable


@pytest.mark.parametrize("terminal", [False, True], ids=["export-only", "terminal-export"])
def test_an_initial_snapshot_the_store_lost_is_copied_back_from_durable_storage(
    terminal: bool,
) -> None:
    exported = exported_job(terminal)
    durable = durable_copy_of(exported)
    cluster = Cluster(OTHER_JOB)  # a re-created store: no export map at all
    cluster.snapshots.foreign_maps.add(GOLDEN_MAP)

    driver = cluster.start_driver(initial_snapshot_name="golden", durable=durable.snapshots)
    driver.coordinator.restore()

    assert driver.coordinator.state is S.RUNNING
    assert driver.pipeline.source.offset == 10
    assert driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(10))
    # The copy is back in the store, whole: the next restore needs no durable storage.
    assert cluster.snapshots.maps[GOLDEN_MAP] == exported.snapshots.maps[GOLDEN_MAP]
    # (The terminal export's sink transaction is the first job's, in another fake database.)
    assert not [v for v in cluster.violations if v.startswith("invariant")]


def test_the_store_s_own_export_wins_over_its_durable_copy() -> None:
    exported = exported_job()
    durable = durable_copy_of(exported)
    durable.snapshots.maps[GOLDEN_MAP].clear()  # would fail validation if it were read
    cluster = new_job_with(exported)

    driver = cluster.start_driver(initial_snapshot_name="golden", durable=durable.snapshots)
    driver.coordinator.restore()

    assert driver.coordinator.state is S.RUNNING
    assert driver.pipeline.source.offset == 10


def test_an_initial_snapshot_in_neither_store_is_not_found_saying_where_it_looked() -> None:
    cluster = Cluster(OTHER_JOB)
    driver = cluster.start_driver(initial_snapshot_name="golden", durable=Cluster().snapshots)
    with pytest.raises(SnapshotNotFound, match="in the store or in durable storage"):
        driver.coordinator.restore()
    assert driver.coordinator.state is S.FAILED


def test_a_corrupted_durable_copy_is_not_restored_nor_copied_back() -> None:
    durable = durable_copy_of(exported_job())
    entries = durable.snapshots.maps[GOLDEN_MAP]
    chunk = next(key for key in sorted(entries) if validation_record_id(key) is None)
    entries[chunk] = b"changed in the bucket"
    cluster = Cluster(OTHER_JOB)
    cluster.snapshots.foreign_maps.add(GOLDEN_MAP)

    driver = cluster.start_driver(initial_snapshot_name="golden", durable=durable.snapshots)
    with pytest.raises(SnapshotCorrupted, match="does not match its checksum") as raised:
        driver.coordinator.restore()

    assert GOLDEN_MAP in str(raised.value)
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.source.offset == 0
    # The copy stopped at the bad chunk, before the record: the store holds no snapshot.
    assert cluster.snapshots.latest_snapshot_id(GOLDEN_MAP) is None


def test_initial_snapshot_with_a_missing_chunk_is_corrupted() -> None:
    cluster = new_job_with(exported_job())
    entries = cluster.snapshots.maps[GOLDEN_MAP]
    chunk = next(key for key in sorted(entries) if validation_record_id(key) is None)
    del entries[chunk]
    driver = cluster.start_driver(initial_snapshot_name="golden")
    with pytest.raises(SnapshotCorrupted, match="1 of its 6 chunks are missing") as raised:
        driver.coordinator.restore()
    assert GOLDEN_MAP in str(raised.value)
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.source.offset == 0  # nothing was restored


def test_outcome_reports_the_bytes_of_the_validation_record() -> None:
    cluster = Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    driver.pipeline.process(5)
    outcome = driver.coordinator.take_snapshot("golden")
    driver.coordinator.finish_snapshot()
    validation = cluster.snapshots.get_validation_record(GOLDEN_MAP, outcome.snapshot_id)
    assert validation is not None and validation.num_bytes > 0
    assert outcome.num_bytes == validation.num_bytes
    assert driver.coordinator.last_outcome == outcome
