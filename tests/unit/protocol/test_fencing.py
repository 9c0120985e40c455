"""Fenced snapshot data and restore failures that end, against the fakes of ``fakes.py``.

A replaced execution (a zombie: its driver was paused, a newer execution took over) may still
do everything it had in flight: write chunks, write a validation record, discard the map of a
failed snapshot. Snapshot data is fenced by snapshot id (docs/concepts/protocol.md, mechanism M8),
so none of it can touch what the newer execution restores. The same scenario runs with real
driver processes, SIGSTOP and real Hazelcast members in
``tests/integration/test_zombie_fencing.py``.

Two gaps the zombie model of ``test_invariants.py`` found are pinned here: a zombie paused in
restore step 5 must leave a newer execution's prepared transactions alone (a sink settles only
ids up to the record's ``ongoingSnapshotId`` after restore step 2), and a transaction a zombie
prepared before it was fenced at step 7a is rolled back by the next successful snapshot's 2nd
phase, since no restore can commit it any more.

The second half checks how restore failures end: permanently (corrupted, incompatible,
missing) before any state is loaded where they can be seen that early, counted as transient
when the store was unavailable, and a forced restart only after an indeterminate record write.
"""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    ChunkReader,
    CoordinatorState,
    PipelineShape,
    SnapshotCorrupted,
    SnapshotIncompatible,
    SnapshotRef,
    TerminationMode,
    ZombieExecution,
)
from snapshot_protocol.chunks import snapshot_id_of_key

from .fakes import Cluster, Driver, FakeKeyedState, Fault, Op, TxnStatus, running, snapshot

pytestmark = pytest.mark.unit

S = CoordinatorState
MAP_0 = "__sj.b1.snapshot.0b5e-uid.0"
MAP_1 = "__sj.b1.snapshot.0b5e-uid.1"


def test_a_zombie_in_phase_1_cannot_spoil_the_newer_executions_restore_point() -> None:
    cluster = Cluster()
    zombie = running(cluster)
    assert snapshot(zombie) == 0
    assert snapshot(zombie) == 1  # restore point in MAP_1; the next snapshot goes to MAP_0
    newer: list[Driver] = []

    def replaced_while_paused() -> None:
        # The zombie's driver is paused here, in phase 1 of snapshot 2 into MAP_0.
        driver = running(cluster)
        assert snapshot(driver) == 3  # into MAP_0 too: now the restore point
        assert cluster.records.record.snapshot_id == 3
        newer.append(driver)
        # When the zombie resumes, its validation record put is indeterminate, so its
        # snapshot fails and step 8b discards in MAP_0.
        cluster.faults.arm([(Op.VALIDATION_PUT, 0, Fault.INDETERMINATE_APPLIED)])

    zombie.pipeline.process(4)
    zombie.pipeline.state.on_save = replaced_while_paused
    outcome = zombie.coordinator.take_snapshot()

    assert (outcome.snapshot_id, outcome.map_name, outcome.successful) == (2, MAP_0, False)
    ids_in_map_0 = {snapshot_id_of_key(key) for key in cluster.snapshots.maps[MAP_0]}
    assert ids_in_map_0 == {3}, "step 8b of the zombie discarded only snapshot 2 and older"
    zombie.coordinator.finish_snapshot()  # rolls back the zombie's own transaction
    assert cluster.database.transactions[2].status is TxnStatus.ROLLED_BACK
    (driver,) = newer
    offset = driver.pipeline.source.offset

    restored = running(cluster)

    assert restored.pipeline.sink.restored_ids == [3]
    assert restored.pipeline.source.offset == offset
    assert restored.pipeline.state.counts == FakeKeyedState.expected_counts(range(offset))
    assert sorted(cluster.database.committed_items()) == list(range(offset))
    assert cluster.violations == []


def test_a_zombie_cannot_overwrite_the_validation_record_it_would_share_a_map_with() -> None:
    cluster = Cluster()
    zombie = running(cluster)
    snapshot(zombie)
    snapshot(zombie)

    def replaced_while_paused() -> None:
        driver = running(cluster)
        snapshot(driver)

    zombie.pipeline.process(2)
    zombie.pipeline.state.on_save = replaced_while_paused
    with pytest.raises(ZombieExecution):  # step 7a: after the zombie wrote record 2 to MAP_0
        zombie.coordinator.take_snapshot()

    assert zombie.coordinator.state is S.FENCED
    assert cluster.snapshots.get_validation_record(MAP_0, 2) is not None
    assert cluster.records.record.snapshot_id == 3
    assert running(cluster).pipeline.sink.restored_ids == [3]


# Gaps the zombie model found (tests/unit/protocol/zombie_rules.py), now fixed; the model
# reaches both scenarios too, and fails if either fix is undone.


def test_a_zombie_in_restore_step_5_leaves_a_newer_executions_transaction_alone() -> None:
    cluster = Cluster()
    newer: list[Driver] = []
    zombie = cluster.start_driver()
    sink_restore = zombie.pipeline.sink.restore

    def paused_sink_restore(
        snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        # The zombie passed restore step 2 and is paused in step 5, before its sink settles
        # the job's prepared transactions (with a restore point, the same happens when it is
        # paused after reading its chunk).
        driver = running(cluster)
        driver.pipeline.process(3)
        assert driver.coordinator.take_snapshot().successful  # prepared, and the restore point
        newer.append(driver)
        sink_restore(snapshot, reader, through_snapshot_id)

    zombie.pipeline.sink.restore = paused_sink_restore  # type: ignore[method-assign]
    zombie.coordinator.restore()
    (driver,) = newer
    driver.coordinator.finish_snapshot()

    assert cluster.database.transactions[0].status is TxnStatus.COMMITTED
    assert cluster.violations == []


def test_a_zombie_fenced_at_step_7a_leaves_no_transaction_prepared() -> None:
    cluster = Cluster()
    zombie = running(cluster)
    assert snapshot(zombie) == 0
    newer: list[Driver] = []
    zombie.pipeline.process(2)
    # Paused in phase 1 of snapshot 1, before its sink prepares.
    zombie.pipeline.state.on_save = lambda: newer.append(running(cluster))
    with pytest.raises(ZombieExecution):
        zombie.coordinator.take_snapshot()
    (driver,) = newer

    driver.coordinator.request_termination(TerminationMode.CANCEL_GRACEFUL)

    assert driver.coordinator.state is S.CANCELLED
    assert cluster.database.prepared() == []


# Restore failures that end


def test_another_pipeline_fails_permanently_before_any_state_is_loaded() -> None:
    cluster = Cluster()
    snapshot(running(cluster))
    other = PipelineShape({"source": "", "state": "counts by other key", "sink": ""})
    driver = cluster.start_driver(shape=other)

    with pytest.raises(SnapshotIncompatible) as error:
        driver.coordinator.restore()

    assert "operator 'state' stores  in the snapshot, counts by other key in the pipeline" in (
        str(error.value)
    )
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.sink.restored_ids == []  # no participant was restored


def test_a_changed_byte_fails_the_restore_permanently_naming_the_chunk() -> None:
    cluster = Cluster()
    snapshot(running(cluster))
    entries = cluster.snapshots.maps[MAP_0]
    key = "0/state/1/0"
    value = entries[key]
    assert isinstance(value, bytes)
    entries[key] = value[:-1] + bytes([value[-1] ^ 1])
    driver = cluster.start_driver()

    with pytest.raises(SnapshotCorrupted, match="chunk '0/state/1/0' does not match its checksum"):
        driver.coordinator.restore()

    assert driver.coordinator.state is S.FAILED
    end = driver.coordinator.execution_end
    assert end is not None and "Snapshot 0 in map" in end.reason


def test_a_corruption_reported_as_text_by_another_process_fails_permanently() -> None:
    cluster = Cluster()
    snapshot(running(cluster))
    driver = cluster.start_driver()
    message = str(SnapshotCorrupted(MAP_0, 0, "chunk '0/state/2/0' does not match its checksum"))

    def task_failed(*_: object) -> None:
        raise RuntimeError(f"Job aborted due to stage failure: ... PythonException: {message}")

    driver.pipeline.state.restore = task_failed  # type: ignore[method-assign]

    with pytest.raises(SnapshotCorrupted) as error:
        driver.coordinator.restore()

    assert error.value.problem == "chunk '0/state/2/0' does not match its checksum"
    assert driver.coordinator.state is S.FAILED


@pytest.mark.parametrize(
    ("fault", "transient"),
    [
        ((Op.RECORD_SAFE, 0, Fault.INDETERMINATE_NOT_APPLIED), False),
        ((Op.RECORD_SAFE, 0, Fault.FAILED), True),
    ],
)
def test_only_an_indeterminate_record_write_is_a_forced_restart(
    fault: tuple[Op, int, Fault], transient: bool
) -> None:
    cluster = Cluster()
    cluster.faults.arm([fault])
    driver = cluster.start_driver()

    driver.coordinator.restore()

    assert driver.coordinator.state is S.RESTART_REQUIRED
    end = driver.coordinator.execution_end
    assert end is not None and end.mode is TerminationMode.RESTART_FORCEFUL
    assert end.transient is transient


def test_a_store_outage_during_restore_is_transient() -> None:
    cluster = Cluster()
    snapshot(running(cluster))
    driver = cluster.start_driver()

    def unavailable(map_name: str, snapshot_id: int) -> None:
        raise cluster_error()

    cluster.snapshots.get_validation_record = unavailable  # type: ignore[assignment]
    driver.coordinator.restore()

    end = driver.coordinator.execution_end
    assert driver.coordinator.state is S.RESTART_REQUIRED
    assert end is not None and end.transient and "cannot validate" in end.reason


def test_a_2nd_phase_that_cannot_commit_is_transient() -> None:
    cluster = Cluster()
    driver = running(cluster)
    driver.pipeline.process(2)
    driver.coordinator.take_snapshot()
    cluster.database.unavailable_for_commits = 1

    driver.coordinator.finish_snapshot()

    end = driver.coordinator.execution_end
    assert driver.coordinator.state is S.RESTART_REQUIRED
    assert end is not None and end.transient and "2nd phase" in end.reason


def cluster_error() -> Exception:
    from snapshot_protocol import SnapshotStoreError

    return SnapshotStoreError("connection refused")
