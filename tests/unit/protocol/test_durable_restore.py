"""Restoring after the store lost the restore point, from a durable copy (restore step 4).

The job's periodic copy of its automatic snapshot is in durable storage. A copy of the
record's own snapshot is restored as if the store had never lost it; an older copy only with
the user's consent to exactly that pair of ids, since the output committed since the copy is
written again; without a copy the loss stays a corruption. A partial loss (the validation
record kept, chunks lost) is rescued by a copy of that very snapshot only.

Both stores are the in-memory fakes of ``fakes.py``; a driver process restoring from a copy in
a real S3 server after the Hazelcast maps are gone is tested in
``tests/integration/test_durable_restore.py``.
"""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    CoordinatorState,
    RestoreNeedsConsent,
    SnapshotCorrupted,
    TerminationMode,
)
from snapshot_protocol.transfer import transfer_snapshot
from snapshotjob_contract.record import durable_copy_map_name

from .fakes import JOB, Cluster, FakeKeyedState

pytestmark = pytest.mark.unit

S = CoordinatorState
COPY_MAP = durable_copy_map_name(JOB.uid)


def job_with_two_snapshots(copied: int) -> tuple[Cluster, Cluster, list[tuple[int, str]]]:
    """Items 0..3 in snapshot 0, 4..9 in snapshot 1, then 10..11 processed after it.

    Returns the job, durable storage holding the periodic copy of snapshot ``copied`` (made
    right after it, as the driver does; -1 for none), and the snapshots' ids and maps.
    """
    cluster, durable = Cluster(), Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    taken = []
    for index, count in enumerate((4, 6)):
        driver.pipeline.process(count)
        outcome = driver.coordinator.take_snapshot()
        driver.coordinator.finish_snapshot()
        assert outcome.successful
        taken.append((outcome.snapshot_id, outcome.map_name))
        if index == copied:
            durable.records.record = cluster.records.record  # the copy keeps the job's ids
            transfer_snapshot(
                cluster.snapshots, outcome.map_name, durable.snapshots, COPY_MAP, index
            )
    driver.pipeline.process(2)
    return cluster, durable, taken


def lose_the_store(cluster: Cluster) -> None:
    """Every member restarted: the maps are empty, the record (in etcd) and the sink remain."""
    cluster.snapshots.maps.clear()


def test_a_copy_of_the_restore_point_itself_is_restored_as_if_nothing_was_lost() -> None:
    cluster, durable, taken = job_with_two_snapshots(copied=1)
    lose_the_store(cluster)

    driver = cluster.start_driver(durable=durable.snapshots)
    driver.coordinator.restore()

    assert driver.coordinator.state is S.RUNNING
    assert driver.pipeline.source.offset == 10
    assert driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(10))
    assert cluster.snapshots.latest_snapshot_id(taken[1][1]) == 1  # copied back, validated
    driver.pipeline.process(3)
    driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    # Exactly once across the loss: every item committed once, in order.
    assert cluster.database.committed_items() == list(range(13))
    assert not cluster.violations


def test_an_older_copy_stops_the_job_naming_both_ids_and_what_would_repeat() -> None:
    cluster, durable, _ = job_with_two_snapshots(copied=0)
    lose_the_store(cluster)

    driver = cluster.start_driver(durable=durable.snapshots)
    with pytest.raises(RestoreNeedsConsent) as raised:
        driver.coordinator.restore()

    message = str(raised.value)
    assert "The store lost the restore point, snapshot 1" in message
    assert f"the newest durable copy ({COPY_MAP}) is of the older snapshot 0" in message
    assert "writes again the output committed by snapshots 1 to 1" in message
    assert "acceptSnapshotId: 0, insteadOfSnapshotId: 1" in message
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.source.offset == 0  # nothing restored
    assert cluster.database.committed_items() == list(range(10))  # nothing repeated


def test_consent_to_another_pair_of_ids_is_no_consent() -> None:
    cluster, durable, _ = job_with_two_snapshots(copied=0)
    lose_the_store(cluster)

    for accepted in ((0, 2), (1, 1), (3, 1)):
        driver = cluster.start_driver(durable=durable.snapshots, accepted_older_copy=accepted)
        with pytest.raises(RestoreNeedsConsent):
            driver.coordinator.restore()


def test_with_consent_the_older_copy_is_restored_and_its_later_output_written_again() -> None:
    cluster, durable, _ = job_with_two_snapshots(copied=0)
    lose_the_store(cluster)

    driver = cluster.start_driver(durable=durable.snapshots, accepted_older_copy=(0, 1))
    driver.coordinator.restore()

    assert driver.coordinator.state is S.RUNNING
    assert driver.pipeline.source.offset == 4
    assert driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(4))
    driver.pipeline.process(8)
    outcome = driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    assert outcome.successful and outcome.snapshot_id > 1
    # What the condition announced: the output of snapshot 1 (items 4..9) is written again.
    assert cluster.database.committed_items() == [*range(10), *range(4, 12)]


def test_without_a_copy_the_lost_restore_point_is_a_corruption() -> None:
    cluster, _, _ = job_with_two_snapshots(copied=-1)
    lose_the_store(cluster)

    driver = cluster.start_driver(durable=Cluster().snapshots)
    with pytest.raises(SnapshotCorrupted, match="validation record is missing"):
        driver.coordinator.restore()
    assert driver.coordinator.state is S.FAILED


def lose_some_chunks(cluster: Cluster, map_name: str) -> None:
    """Two members too many failed: the record survived, some of the snapshot's chunks did not."""
    entries = cluster.snapshots.maps[map_name]
    chunks = [key for key in sorted(entries) if not key.endswith("validation-record")]
    assert len(chunks) >= 2, chunks
    for key in chunks[:2]:
        del entries[key]


def test_chunks_lost_from_the_restore_point_are_replaced_by_its_copy_exactly_once() -> None:
    cluster, durable, taken = job_with_two_snapshots(copied=1)
    lose_some_chunks(cluster, taken[1][1])

    driver = cluster.start_driver(durable=durable.snapshots)
    driver.coordinator.restore()

    assert driver.coordinator.state is S.RUNNING
    assert driver.pipeline.source.offset == 10
    assert driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(10))
    driver.pipeline.process(3)
    driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    assert cluster.database.committed_items() == list(range(13))
    assert not cluster.violations


@pytest.mark.parametrize("copied", [-1, 0], ids=["no-copy", "older-copy"])
def test_chunks_lost_without_a_copy_of_that_snapshot_stay_a_corruption(copied: int) -> None:
    cluster, durable, taken = job_with_two_snapshots(copied=copied)
    lose_some_chunks(cluster, taken[1][1])

    driver = cluster.start_driver(durable=durable.snapshots)
    with pytest.raises(SnapshotCorrupted, match="chunks are missing"):
        driver.coordinator.restore()
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.source.offset == 0


def test_a_corrupted_copy_of_the_restore_point_is_never_restored() -> None:
    cluster, durable, _ = job_with_two_snapshots(copied=1)
    entries = durable.snapshots.maps[COPY_MAP]
    chunk = next(key for key in sorted(entries) if not key.endswith("validation-record"))
    entries[chunk] = b"changed"
    lose_the_store(cluster)

    driver = cluster.start_driver(durable=durable.snapshots)
    with pytest.raises(SnapshotCorrupted, match="does not match its checksum"):
        driver.coordinator.restore()
    assert driver.pipeline.source.offset == 0


def test_a_lost_terminal_export_is_restored_from_its_durable_copy() -> None:
    cluster = Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    driver.pipeline.process(5)
    driver.coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL, "before-upgrade")
    outcome = driver.coordinator.last_outcome
    assert outcome is not None and outcome.successful
    durable = Cluster()
    durable.records.record = cluster.records.record
    # The driver's durable export: the same map name in the bucket.
    transfer_snapshot(
        cluster.snapshots,
        outcome.map_name,
        durable.snapshots,
        outcome.map_name,
        outcome.snapshot_id,
    )
    lose_the_store(cluster)

    resumed = cluster.start_driver(durable=durable.snapshots)
    resumed.coordinator.restore()

    assert resumed.coordinator.state is S.RUNNING
    assert resumed.pipeline.source.offset == 5
    assert cluster.database.committed_items() == list(range(5))
