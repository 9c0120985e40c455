"""The coordinator, step by step against docs/concepts/protocol.md's taking and restore procedures.

The coordinator runs against the in-memory fakes of ``fakes.py``, which stand for the
execution record (the SnapshotJob's status), the Hazelcast snapshot maps and a
two-phase-commit database. The real stores are tested in ``tests/integration``
(``test_protocol_hazelcast.py``, ``test_kube_record_store.py``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import pytest

from snapshot_protocol import (
    FAILPOINTS,
    TRANSITIONS,
    ChunkDescriptor,
    ChunkWriter,
    CoordinatorConfig,
    CoordinatorState,
    FailpointAction,
    FailpointCrash,
    Failpoints,
    IllegalTransition,
    SnapshotCoordinator,
    SnapshotCorrupted,
    TerminationMode,
    TerminationRequest,
    ZombieExecution,
    validate_snapshot,
)
from snapshot_protocol.chunks import validation_record_key

from .fakes import INTERVAL_MS, Cluster, Driver, Fault, Op, TxnStatus

pytestmark = pytest.mark.unit

S = CoordinatorState
MAP_0 = "__sj.b1.snapshot.0b5e-uid.0"
MAP_1 = "__sj.b1.snapshot.0b5e-uid.1"


def running(
    cluster: Cluster | None = None,
    failpoints: Failpoints | None = None,
    suspend_on_failure: bool = False,
) -> tuple[Cluster, Driver]:
    cluster = cluster or Cluster()
    driver = cluster.start_driver(failpoints, suspend_on_failure)
    driver.coordinator.restore()
    assert driver.coordinator.state is S.RUNNING
    return cluster, driver


def snapshot(driver: Driver, items: int = 3, export_name: str | None = None) -> int:
    driver.pipeline.process(items)
    outcome = driver.coordinator.take_snapshot(export_name)
    driver.coordinator.finish_snapshot()
    assert outcome.successful
    return outcome.snapshot_id


def txn_status(cluster: Cluster, snapshot_id: int) -> TxnStatus:
    return cluster.database.transactions[snapshot_id].status


# Snapshot taking procedure


def test_automatic_snapshot_commits_only_after_the_record_is_safe() -> None:
    cluster, driver = running()
    driver.pipeline.process(3)
    outcome = driver.coordinator.take_snapshot()
    assert (outcome.snapshot_id, outcome.map_name, outcome.successful) == (0, MAP_0, True)
    assert driver.coordinator.state is S.PHASE_2_PENDING
    stored = cluster.records.record
    assert (stored.snapshot_id, stored.data_map_index, stored.ongoing_snapshot_id) == (0, 0, 0)
    assert cluster.records.safe_record == stored
    assert txn_status(cluster, 0) is TxnStatus.PREPARED  # phase 2 not yet run
    record = validate_snapshot(cluster.snapshots, MAP_0, 0)
    assert record.num_chunks == len(record.chunk_keys) == 5  # source 1 + state 3 + sink 1
    assert stored.snapshot_stats is not None and stored.snapshot_stats.num_chunks == 5
    driver.coordinator.finish_snapshot()
    assert driver.coordinator.state is S.RUNNING
    assert txn_status(cluster, 0) is TxnStatus.COMMITTED
    assert cluster.database.committed_items() == [0, 1, 2]


def test_snapshots_alternate_maps_and_step_8a_clears_the_previous_one() -> None:
    cluster, driver = running()
    snapshot(driver)
    driver.pipeline.process(2)
    outcome = driver.coordinator.take_snapshot()
    assert outcome.map_name == MAP_1
    assert cluster.snapshots.maps[MAP_0] == {}
    assert cluster.records.record.data_map_index == 1


def test_next_snapshot_is_due_an_interval_after_the_last_one() -> None:
    cluster, driver = running()
    assert not driver.coordinator.is_snapshot_due()
    cluster.clock.now += INTERVAL_MS
    assert driver.coordinator.is_snapshot_due()
    snapshot(driver)
    assert not driver.coordinator.is_snapshot_due()


@pytest.mark.parametrize(
    "fault",
    [(Op.RECORD_SAFE, 0, Fault.INDETERMINATE_APPLIED), (Op.RECORD_SAFE, 0, Fault.FAILED)],
)
def test_step_2_failure_means_the_snapshot_failed_to_start(fault: tuple[Op, int, Fault]) -> None:
    cluster, driver = running()
    cluster.faults.arm([fault])
    outcome = driver.coordinator.take_snapshot()
    assert not outcome.successful and outcome.failure is not None
    assert outcome.failure.startswith("failed to start")
    assert driver.coordinator.state is S.RUNNING
    assert not any(cluster.snapshots.maps.values())
    assert cluster.database.transactions == {}
    # The id is never reused, even though nothing was written under it.
    assert snapshot(driver) == 1


def test_phase_1_failure_fails_the_snapshot_and_step_8b_clears_its_map() -> None:
    cluster, driver = running()
    driver.pipeline.state.fail_next_save = True
    outcome = driver.coordinator.take_snapshot()
    assert not outcome.successful
    assert outcome.failure == "1st phase failed: executor lost during phase 1"
    assert cluster.snapshots.maps[MAP_0] == {}
    assert cluster.records.record.last_snapshot_failure == outcome.failure
    assert cluster.records.safe_record is not None
    assert cluster.records.safe_record.last_snapshot_failure is None  # 7b: standard write
    driver.coordinator.finish_snapshot()
    assert driver.coordinator.state is S.RUNNING


def test_indeterminate_validation_record_fails_the_snapshot_and_its_rollback_restarts() -> None:
    cluster, driver = running()
    driver.pipeline.process(2)
    cluster.faults.arm([(Op.VALIDATION_PUT, 0, Fault.INDETERMINATE_APPLIED)])
    outcome = driver.coordinator.take_snapshot()
    assert not outcome.successful
    assert cluster.records.record.snapshot_id == -1
    driver.coordinator.finish_snapshot()
    assert txn_status(cluster, 0) is TxnStatus.ROLLED_BACK
    assert driver.coordinator.state is S.RESTART_REQUIRED
    termination = driver.coordinator.execution_end
    assert termination is not None and termination.mode is TerminationMode.RESTART_FORCEFUL


def test_indeterminate_chunk_put_fails_the_snapshot() -> None:
    cluster, driver = running()
    cluster.faults.arm([(Op.CHUNK_PUT, 2, Fault.INDETERMINATE_NOT_APPLIED)])
    outcome = driver.coordinator.take_snapshot()
    assert not outcome.successful and outcome.failure is not None
    assert "injected indeterminate-not-applied" in outcome.failure


@pytest.mark.parametrize("applied", [True, False])
def test_step_7a_restarts_without_phase_2_and_ignores_the_waiting_request(applied: bool) -> None:
    cluster, driver = running()
    driver.pipeline.process(3)
    coordinator = driver.coordinator
    driver.pipeline.state.on_save = lambda: coordinator.request_termination(
        TerminationMode.SUSPEND_GRACEFUL
    )
    fault = Fault.INDETERMINATE_APPLIED if applied else Fault.INDETERMINATE_NOT_APPLIED
    cluster.faults.arm([(Op.RECORD_SAFE, 1, fault)])
    outcome = coordinator.take_snapshot()
    assert outcome.successful
    assert coordinator.state is S.RESTART_REQUIRED
    termination = coordinator.execution_end
    assert termination is not None
    assert termination.mode is TerminationMode.RESTART_FORCEFUL
    assert termination.ignored_request == TerminationRequest(TerminationMode.SUSPEND_GRACEFUL)
    assert coordinator.pending_termination is None
    # No 2nd phase: neither commit nor rollback, and the snapshot's data is kept.
    assert txn_status(cluster, 0) is TxnStatus.PREPARED
    validate_snapshot(cluster.snapshots, MAP_0, 0)
    # The next execution finds out which way the write went and finishes the transactions.
    cluster.faults.disarm()
    cluster, driver = running(cluster)
    expected = TxnStatus.COMMITTED if applied else TxnStatus.ROLLED_BACK
    assert txn_status(cluster, 0) is expected
    assert driver.pipeline.source.offset == (3 if applied else 0)


def test_step_7a_then_restore_in_the_same_coordinator_keeps_the_newer_record() -> None:
    cluster, driver = running()
    driver.pipeline.process(3)
    cluster.faults.arm([(Op.RECORD_SAFE, 1, Fault.FAILED)])
    driver.coordinator.take_snapshot()
    assert driver.coordinator.state is S.RESTART_REQUIRED
    assert cluster.records.record.snapshot_id == -1
    cluster.faults.disarm()
    # docs/concepts/protocol.md, restore step 1 (the in-memory record is kept)
    driver.coordinator.restore()
    assert driver.coordinator.state is S.RUNNING
    assert cluster.records.record.snapshot_id == 0
    assert txn_status(cluster, 0) is TxnStatus.COMMITTED
    assert driver.pipeline.source.offset == 3


def test_export_only_snapshot_saves_state_only_and_never_becomes_the_restore_point() -> None:
    cluster, driver = running()
    first = snapshot(driver)
    driver.pipeline.process(2)
    cluster.faults.arm([(Op.RECORD_STANDARD, 0, Fault.FAILED)])  # 7b ignores it
    outcome = driver.coordinator.take_snapshot("nightly")
    assert outcome.successful and outcome.map_name == "__sj.export.team-a.nightly"
    assert driver.coordinator.state is S.PHASE_2_PENDING
    assert 1 not in cluster.database.transactions  # no transaction prepared
    assert cluster.records.record.snapshot_id == first
    validate_snapshot(cluster.snapshots, outcome.map_name, 1)
    assert cluster.snapshots.maps[MAP_1] == {}  # untouched by the export
    driver.coordinator.finish_snapshot()
    assert driver.coordinator.state is S.RUNNING
    # Restart goes back to the automatic snapshot, not the newer export.
    cluster, driver = running(cluster)
    assert driver.pipeline.source.offset == 3
    assert cluster.database.committed_items() == [0, 1, 2]


def test_terminal_exported_snapshot_becomes_the_restore_point() -> None:
    cluster, driver = running()
    snapshot(driver)
    driver.pipeline.process(2)
    driver.coordinator.request_termination(TerminationMode.CANCEL_GRACEFUL, "final")
    assert driver.coordinator.state is S.CANCELLED
    stored = cluster.records.record
    assert (stored.snapshot_id, stored.exported_snapshot_name) == (1, "final")
    assert stored.successful_snapshot_map_name(cluster.job) == "__sj.export.team-a.final"
    validate_snapshot(cluster.snapshots, "__sj.export.team-a.final", 1)
    assert txn_status(cluster, 1) is TxnStatus.COMMITTED
    assert cluster.database.prepared() == []
    assert cluster.snapshots.maps[MAP_0] != {}  # 8a is only for automatic maps


def test_graceful_suspend_takes_a_terminal_snapshot_and_resume_restores_it() -> None:
    cluster, driver = running()
    driver.pipeline.process(4)
    driver.coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL)
    assert driver.coordinator.state is S.SUSPENDED
    stored = cluster.records.record
    assert (stored.snapshot_id, stored.suspended) == (0, True)
    assert cluster.database.prepared() == []
    cluster, driver = running(cluster)
    assert cluster.records.record.suspended is False
    assert driver.pipeline.source.offset == 4


@pytest.mark.parametrize(
    ("mode", "state"),
    [
        (TerminationMode.RESTART_FORCEFUL, S.RESTART_REQUIRED),
        (TerminationMode.SUSPEND_FORCEFUL, S.SUSPENDED),
        (TerminationMode.CANCEL_FORCEFUL, S.CANCELLED),
    ],
)
def test_forceful_modes_take_no_snapshot(mode: TerminationMode, state: CoordinatorState) -> None:
    cluster, driver = running()
    driver.coordinator.request_termination(mode)
    assert driver.coordinator.state is state
    assert cluster.records.record.ongoing_snapshot_id == -1


def test_forceful_modes_cannot_export() -> None:
    _, driver = running()
    with pytest.raises(ValueError, match="cannot export"):
        driver.coordinator.request_termination(TerminationMode.SUSPEND_FORCEFUL, "x")
    assert driver.coordinator.state is S.RUNNING


def test_termination_request_waits_for_phase_2_of_the_running_snapshot() -> None:
    cluster, driver = running()
    driver.pipeline.process(1)
    driver.coordinator.take_snapshot()
    driver.coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL)
    assert driver.coordinator.state is S.PHASE_2_PENDING
    assert driver.coordinator.pending_termination is not None
    driver.coordinator.finish_snapshot()
    assert driver.coordinator.state is S.SUSPENDED
    assert cluster.records.record.snapshot_id == 1  # the terminal snapshot after snapshot 0
    assert [txn_status(cluster, i) for i in (0, 1)] == [TxnStatus.COMMITTED] * 2


def test_forceful_request_replaces_a_waiting_graceful_one() -> None:
    _, driver = running()
    driver.coordinator.take_snapshot()
    driver.coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL)
    driver.coordinator.request_termination(TerminationMode.CANCEL_FORCEFUL)
    driver.coordinator.request_termination(TerminationMode.RESTART_GRACEFUL)
    driver.coordinator.finish_snapshot()
    assert driver.coordinator.state is S.CANCELLED


def test_failed_terminal_snapshot_restarts_instead_of_suspending() -> None:
    cluster, driver = running()
    driver.pipeline.process(2)
    cluster.faults.arm([(Op.VALIDATION_PUT, 0, Fault.FAILED)])
    driver.coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL)
    assert driver.coordinator.state is S.RESTART_REQUIRED
    termination = driver.coordinator.execution_end
    assert termination is not None and termination.mode is TerminationMode.RESTART_FORCEFUL
    assert termination.ignored_request == TerminationRequest(TerminationMode.SUSPEND_GRACEFUL)
    assert txn_status(cluster, 0) is TxnStatus.ROLLED_BACK


@pytest.mark.parametrize(("suspend_on_failure", "state"), [(True, S.SUSPENDED), (False, S.FAILED)])
def test_job_failure(suspend_on_failure: bool, state: CoordinatorState) -> None:
    cluster, driver = running(suspend_on_failure=suspend_on_failure)
    driver.coordinator.fail("division by zero")
    assert driver.coordinator.state is state
    assert cluster.records.record.ongoing_snapshot_id == -1  # no snapshot (SUSPEND_FORCEFUL)
    termination = driver.coordinator.execution_end
    assert termination is not None and termination.reason == "division by zero"
    expected_mode = TerminationMode.SUSPEND_FORCEFUL if suspend_on_failure else None
    assert termination.mode is expected_mode


def test_export_under_the_name_holding_the_restore_point_is_refused() -> None:
    cluster = Cluster()
    _, driver = running(cluster)
    driver.coordinator.request_termination(TerminationMode.RESTART_GRACEFUL, "keep")
    _, driver = running(cluster)
    with pytest.raises(ValueError, match="holds the job's restore point"):
        driver.coordinator.take_snapshot("keep")
    with pytest.raises(ValueError, match="holds the job's restore point"):
        driver.coordinator.request_termination(TerminationMode.CANCEL_GRACEFUL, "keep")
    assert driver.coordinator.state is S.RUNNING


def test_participant_reporting_foreign_chunks_fails_the_snapshot() -> None:
    _, driver = running()

    def save(snapshot_id: int, writer: ChunkWriter, export_only: bool) -> Sequence[ChunkDescriptor]:
        descriptor = writer.write(0, 0, b"x", 1)
        return [descriptor, descriptor]

    driver.pipeline.source.save_and_prepare = save  # type: ignore[method-assign]
    outcome = driver.coordinator.take_snapshot()
    assert (
        outcome.failure
        == "1st phase failed: participant 'source' reported chunk '0/source/0/0' twice"
    )


def test_participant_names_must_be_unique() -> None:
    cluster = Cluster()
    driver = cluster.start_driver()
    with pytest.raises(ValueError, match="unique"):
        SnapshotCoordinator(
            CoordinatorConfig(cluster.job, INTERVAL_MS),
            driver.records,
            cluster.snapshots,
            [driver.pipeline.source, driver.pipeline.source],
            cluster.clock,
        )


# Snapshot restore procedure


def test_restore_step_2_failure_does_not_start_the_job() -> None:
    cluster = Cluster()
    driver = cluster.start_driver()
    cluster.faults.arm([(Op.RECORD_SAFE, 0, Fault.INDETERMINATE_APPLIED)])
    driver.coordinator.restore()
    assert driver.coordinator.state is S.RESTART_REQUIRED
    assert driver.pipeline.sink.restored_ids == []


def test_restore_commits_the_named_transaction_and_rolls_back_the_others() -> None:
    failpoints = Failpoints()
    cluster, driver = running(failpoints=failpoints)
    snapshot(driver)
    driver.pipeline.process(2)
    failpoints.arm("take.after_step_7", FailpointAction.CRASH)
    with pytest.raises(FailpointCrash):
        driver.coordinator.take_snapshot()
    driver.pipeline.process(1)
    crash_in_phase_1 = Failpoints({"take.after_step_4": FailpointAction.CRASH})
    cluster, driver = running(cluster, crash_in_phase_1)
    driver.pipeline.process(4)
    with pytest.raises(FailpointCrash):
        driver.coordinator.take_snapshot()
    assert cluster.database.prepared() == [2]
    cluster, driver = running(cluster)
    # Snapshot 1 is the restore point: committed "just in case"; 2 was never decided.
    assert [txn_status(cluster, i) for i in (0, 1, 2)] == [
        TxnStatus.COMMITTED,
        TxnStatus.COMMITTED,
        TxnStatus.ROLLED_BACK,
    ]
    assert driver.pipeline.sink.restored_ids == [1]
    assert sorted(cluster.database.committed_items()) == list(range(driver.pipeline.source.offset))


def test_restore_from_a_corrupted_snapshot_fails_permanently() -> None:
    cluster, driver = running()
    snapshot(driver)
    del cluster.snapshots.maps[MAP_0][validation_record_key(0)]
    driver = cluster.start_driver()
    with pytest.raises(SnapshotCorrupted, match=r"Snapshot 0 in map '__sj.b1.snapshot.0b5e-uid.0'"):
        driver.coordinator.restore()
    assert driver.coordinator.state is S.FAILED
    assert driver.pipeline.sink.restored_ids == []
    with pytest.raises(IllegalTransition):
        driver.coordinator.restore()


def test_zombie_execution_is_fenced() -> None:
    cluster, zombie = running()
    running(cluster)
    record = cluster.records.record
    with pytest.raises(ZombieExecution):
        zombie.coordinator.take_snapshot()
    assert zombie.coordinator.state is S.FENCED
    assert cluster.records.record == record


def test_every_failpoint_is_passed_in_order() -> None:
    passed: list[str] = []

    class Recording(Failpoints):
        def hit(self, name: str) -> None:
            passed.append(name)

    _, driver = running(failpoints=Recording())
    snapshot(driver)
    assert passed == [failpoint.name for failpoint in FAILPOINTS[20:]] + [
        failpoint.name for failpoint in FAILPOINTS[:20]
    ]


def test_nothing_reaches_a_store_or_a_participant_between_two_steps(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A crash after step N leaves the world as a crash before step N + 1 does.

    The chaos test (``tests/integration/test_exactly_once_chaos.py``) crashes a real driver
    only at the distinct ones of those points, and rests on this: between one step's
    ``after`` failpoint and the next step's ``before`` failpoint of the same procedure no
    store, database or participant is called (taking step 8 to 9 included: the driver calls
    ``finish_snapshot`` right after ``take_snapshot``, as ``snapshot()`` here does).
    """
    events: list[str] = []

    class Recording(Failpoints):
        def hit(self, name: str) -> None:
            events.append(name)

    def recorded(cls: type, method: str) -> None:
        original = getattr(cls, method)

        def wrapper(self: object, *args: object, **kwargs: object) -> object:
            events.append(f"call {cls.__name__}.{method}")
            return original(self, *args, **kwargs)

        monkeypatch.setattr(cls, method, wrapper)

    from . import fakes

    for cls, methods in (
        (fakes.FakeRecordStore, ("read", "write_safe", "write_standard")),
        (
            fakes.FakeSnapshotStore,
            (
                "discard",
                "put_chunk",
                "put_chunks",
                "put_validation_record",
                "get_validation_record",
                "latest_snapshot_id",
                "missing_chunks",
                "read_chunk",
            ),
        ),
        (fakes.TransactionalDatabase, ("prepare", "commit", "rollback")),
    ):
        for method in methods:
            recorded(cls, method)
    for participant in (fakes.FakeSource, fakes.FakeKeyedState, fakes.FakeTransactionalSink):
        for method in ("save_and_prepare", "commit_finish", "restore"):
            recorded(participant, method)

    cluster, driver = running(failpoints=Recording())
    snapshot(driver)
    snapshot(driver)
    cluster.start_driver(failpoints=Recording()).coordinator.restore()

    assert any(event.startswith("call ") for event in events), "the recording records nothing"
    between: list[str] = []
    for index, event in enumerate(events):
        if "after_step" not in event:
            continue
        procedure = event.split(".")[0]
        following = events[index + 1 :]
        upto = next(
            (n for n, later in enumerate(following) if later.startswith(f"{procedure}.")),
            len(following),
        )
        calls = [later for later in following[:upto] if later.startswith("call ")]
        last_step = {"take": "10", "restore": "5"}[procedure]
        if not event.endswith(f"_step_{last_step}"):
            between.extend(f"{event} -> {call}" for call in calls)
    assert between == []


# The state machine


def test_transition_table_covers_every_state() -> None:
    assert set(TRANSITIONS) == set(CoordinatorState)
    for state in (S.CANCELLED, S.FAILED, S.FENCED):
        assert TRANSITIONS[state] == frozenset()


def reach(state: CoordinatorState) -> Driver:
    cluster = Cluster()
    driver = cluster.start_driver()
    coordinator = driver.coordinator
    if state is S.NOT_STARTED:
        return driver
    coordinator.restore()
    if state is S.PHASE_2_PENDING:
        coordinator.take_snapshot()
    elif state is S.FAILED:
        coordinator.fail("boom")
    elif state is S.FENCED:
        cluster.start_driver()
        with pytest.raises(ZombieExecution):
            coordinator.take_snapshot()
    elif state is not S.RUNNING:
        mode = {
            S.RESTART_REQUIRED: TerminationMode.RESTART_FORCEFUL,
            S.SUSPENDED: TerminationMode.SUSPEND_FORCEFUL,
            S.CANCELLED: TerminationMode.CANCEL_FORCEFUL,
        }[state]
        coordinator.request_termination(mode)
    assert coordinator.state is state
    return driver


OPERATIONS: dict[str, tuple[Callable[[Driver], object], frozenset[CoordinatorState]]] = {
    "restore": (
        lambda d: d.coordinator.restore(),
        frozenset({S.NOT_STARTED, S.RESTART_REQUIRED, S.SUSPENDED}),
    ),
    "take_snapshot": (lambda d: d.coordinator.take_snapshot(), frozenset({S.RUNNING})),
    "finish_snapshot": (lambda d: d.coordinator.finish_snapshot(), frozenset({S.PHASE_2_PENDING})),
    "request_termination": (
        lambda d: d.coordinator.request_termination(TerminationMode.CANCEL_FORCEFUL),
        frozenset({S.RUNNING, S.PHASE_2_PENDING}),
    ),
    "fail": (lambda d: d.coordinator.fail("x"), frozenset({S.RUNNING, S.PHASE_2_PENDING})),
}
REACHABLE = [
    S.NOT_STARTED,
    S.RUNNING,
    S.PHASE_2_PENDING,
    S.RESTART_REQUIRED,
    S.SUSPENDED,
    S.CANCELLED,
    S.FAILED,
    S.FENCED,
]


@pytest.mark.parametrize("state", REACHABLE, ids=lambda s: s.value)
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_illegal_operations_raise_and_leave_the_state_unchanged(
    state: CoordinatorState, operation: str
) -> None:
    call, allowed_in = OPERATIONS[operation]
    driver = reach(state)
    if state in allowed_in:
        call(driver)  # allowed: must not raise
        return
    record = driver.coordinator.record
    with pytest.raises(IllegalTransition):
        call(driver)
    assert driver.coordinator.state is state
    assert driver.coordinator.record == record
