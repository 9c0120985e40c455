"""A reused export name resolves to the export last completed under it, never an older one.

An export map is named by the export, so an older export's data can outlive it: its
SnapshotJobExport deleted without disposal, or its job deleted and created again, whose ids
start over. The older export then has the *higher* snapshot id, and taking the highest id
would restore its state silently. Taking an export disposes of every other job's snapshot under
the name, and a restore given the export's identity takes exactly that snapshot
(``snapshot_protocol/export_names.py``), in the store and in durable storage.

The maps are the in-memory fakes of ``fakes.py``; the same with real Hazelcast members and a
real S3 server is ``tests/integration/test_export_name_reuse.py``.
"""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    CoordinatorState,
    ExportIdentity,
    JobIdentity,
    SnapshotNotFound,
    export_map_name,
)
from snapshot_protocol.chunks import ValidationRecord, snapshot_id_of_key, validation_record_id
from snapshot_protocol.export_names import discard_other_jobs_exports

from .fakes import JOB, Cluster, FakeKeyedState

pytestmark = pytest.mark.unit

S = CoordinatorState
RECREATED = JobIdentity(uid="9a9a-uid", namespace="team-a", backup_count=1)
"""The first job deleted and created again: the same name, a new uid, ids from 0 again."""
READER = JobIdentity(uid="7c1d-uid", namespace="team-a", backup_count=1)
GOLDEN_MAP = export_map_name("team-a", "golden")
OLD_ITEMS = 20
"""The old export holds the state of items 0..19 at snapshot 5."""
NEW_ITEMS = 3
"""The new export holds the state of items 0..2 at snapshot 1."""


def export_after(cluster: Cluster, snapshots: int, items: int) -> int:
    """Runs ``snapshots`` automatic snapshots over ``items`` items, then exports 'golden'."""
    driver = cluster.start_driver()
    driver.coordinator.restore()
    for _ in range(snapshots):
        driver.pipeline.process(items // (snapshots + 1))
        driver.coordinator.take_snapshot()
        driver.coordinator.finish_snapshot()
    driver.pipeline.process(items - driver.pipeline.source.offset)
    outcome = driver.coordinator.take_snapshot("golden")
    driver.coordinator.finish_snapshot()
    assert outcome.successful
    return outcome.snapshot_id


def ids_in(cluster: Cluster, map_name: str) -> list[int]:
    return sorted(
        found
        for key in cluster.snapshots.maps.get(map_name, {})
        if (found := validation_record_id(key)) is not None
    )


def old_then_new() -> tuple[Cluster, Cluster, int, int]:
    """The old job's export at the high id, then the re-created job's under the same name."""
    old = Cluster(JOB)
    old_id = export_after(old, snapshots=5, items=OLD_ITEMS)
    new = Cluster(RECREATED)
    new.snapshots.maps[GOLDEN_MAP] = dict(old.snapshots.maps[GOLDEN_MAP])
    new_id = export_after(new, snapshots=1, items=NEW_ITEMS)
    assert new_id < old_id, "the scenario needs the new export to have the lower id"
    return old, new, old_id, new_id


def reader_of(maps: dict[str, bytes | ValidationRecord]) -> Cluster:
    reader = Cluster(READER)
    reader.snapshots.maps[GOLDEN_MAP] = dict(maps)
    return reader


def test_taking_an_export_disposes_of_another_job_s_export_under_the_name() -> None:
    _, new, _, new_id = old_then_new()
    assert ids_in(new, GOLDEN_MAP) == [new_id]
    # Its chunks went too, not only its validation record.
    assert {snapshot_id_of_key(key) for key in new.snapshots.maps[GOLDEN_MAP]} == {new_id}

    reader = reader_of(new.snapshots.maps[GOLDEN_MAP])
    driver = reader.start_driver(initial_snapshot_name="golden")
    driver.coordinator.restore()
    assert driver.pipeline.source.offset == NEW_ITEMS
    assert driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(NEW_ITEMS))


def test_a_newer_execution_s_export_of_the_same_job_is_not_disposed_of() -> None:
    cluster = Cluster(JOB)
    first = export_after(cluster, snapshots=0, items=2)
    second = export_after(cluster, snapshots=0, items=4)
    # The same job's lower id goes (taking step 3); nothing of another job was there.
    assert ids_in(cluster, GOLDEN_MAP) == [second] and first < second


def stale_and_new() -> tuple[dict[str, bytes | ValidationRecord], int, int]:
    """A name whose disposal did not happen: the old export's entries came back beside the new."""
    old, new, old_id, new_id = old_then_new()
    entries = dict(new.snapshots.maps[GOLDEN_MAP])
    entries.update(old.snapshots.maps[GOLDEN_MAP])
    return entries, old_id, new_id


def test_with_the_export_s_identity_the_restore_takes_it_and_not_the_higher_id() -> None:
    entries, _, new_id = stale_and_new()
    # Without the identity, the highest id would be restored: the old export's state.
    unchecked = reader_of(entries).start_driver(initial_snapshot_name="golden")
    unchecked.coordinator.restore()
    assert unchecked.pipeline.source.offset == OLD_ITEMS

    checked = reader_of(entries).start_driver(
        initial_snapshot_name="golden",
        initial_snapshot_identity=ExportIdentity(RECREATED.uid, new_id),
    )
    checked.coordinator.restore()
    assert checked.coordinator.state is S.RUNNING
    assert checked.pipeline.source.offset == NEW_ITEMS
    assert checked.pipeline.state.counts == FakeKeyedState.expected_counts(range(NEW_ITEMS))


def test_an_identity_the_name_no_longer_holds_is_refused_naming_what_it_holds() -> None:
    old = Cluster(JOB)
    old_id = export_after(old, snapshots=5, items=OLD_ITEMS)
    reader = reader_of(old.snapshots.maps[GOLDEN_MAP])
    driver = reader.start_driver(
        initial_snapshot_name="golden", initial_snapshot_identity=ExportIdentity(RECREATED.uid, 1)
    )
    with pytest.raises(SnapshotNotFound) as raised:
        driver.coordinator.restore()
    message = str(raised.value)
    assert f"snapshot 1 of job uid {RECREATED.uid}" in message
    assert f"snapshot {old_id} of job uid {JOB.uid} instead" in message
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.source.offset == 0


def test_an_identity_whose_id_another_job_wrote_is_not_taken() -> None:
    old = Cluster(JOB)
    old_id = export_after(old, snapshots=5, items=OLD_ITEMS)
    driver = reader_of(old.snapshots.maps[GOLDEN_MAP]).start_driver(
        initial_snapshot_name="golden",
        initial_snapshot_identity=ExportIdentity(RECREATED.uid, old_id),
    )
    with pytest.raises(SnapshotNotFound, match="name was reused"):
        driver.coordinator.restore()
    assert driver.pipeline.source.offset == 0


def test_from_durable_storage_the_identity_picks_the_new_export_too() -> None:
    entries, _, new_id = stale_and_new()
    durable = Cluster(READER)
    durable.snapshots.foreign_maps.add(GOLDEN_MAP)
    durable.snapshots.maps[GOLDEN_MAP] = dict(entries)
    store = Cluster(READER)  # a re-created store: the export is only in the bucket
    store.snapshots.foreign_maps.add(GOLDEN_MAP)

    driver = store.start_driver(
        initial_snapshot_name="golden",
        durable=durable.snapshots,
        initial_snapshot_identity=ExportIdentity(RECREATED.uid, new_id),
    )
    driver.coordinator.restore()
    assert driver.pipeline.source.offset == NEW_ITEMS
    assert ids_in(store, GOLDEN_MAP) == [new_id]


def test_a_copy_into_object_storage_disposes_of_other_jobs_copies() -> None:
    entries, old_id, new_id = stale_and_new()
    bucket = Cluster(READER)
    bucket.snapshots.foreign_maps.add(GOLDEN_MAP)
    bucket.snapshots.maps[GOLDEN_MAP] = dict(entries)
    assert discard_other_jobs_exports(bucket.snapshots, GOLDEN_MAP, RECREATED.uid) == [old_id]
    assert ids_in(bucket, GOLDEN_MAP) == [new_id]
