"""Acceptance: invariants I1-I8 of docs/concepts/protocol.md hold under any interleaving of faults.

A hypothesis state machine drives the pure protocol core against the fakes of ``fakes.py``:
snapshots of every kind (automatic, export-only, terminal, terminal exported), termination
requests in all six modes (also arriving while a snapshot is in phase 1), driver crashes at
every failpoint followed by a restart and restore (in a new process or in the same one),
indeterminate or failed results of any record write, chunk put or validation record put,
clears that leave strays, job failures, and lost snapshot data (more failed members than
backups). After every step each of those invariants is checked as an explicit
``@invariant``; violations that can only be seen at the moment they happen (a commit, a
rollback, a put) are recorded by the fakes and reported by the same invariants.

Zombies act (``zombie_rules.py``): a driver may stop in the middle of any call, at any
failpoint or snapshot write (a restore also where its sink settles transactions), be replaced by
a new execution, and later go on exactly where it stopped, writing chunks, validation records,
discards, record patches (refused: it is fenced), its 2nd phase and its restore's settling of
transactions. So I7 and I8 are checked in the form fencing makes true: at most one snapshot
that can still count is in progress, a restore never runs while an execution that is not fenced
is active, and no step of a zombie changes the stored record or the restore point's validation
record and chunks (checked after every zombie step, which names the zombie and where it was). A
transaction a zombie left prepared may stay only until the current execution next commits one.

Beyond the invariants, every successful restore is checked end to end, also in runs where
zombies acted: the restored state and the committed output of the transactional sink are
exactly those of the restore point (exactly-once), and a restore from a snapshot that lost data
fails permanently with ``SnapshotCorrupted`` naming that snapshot instead of restoring
corrupted state.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
)

from snapshot_protocol import (
    FAILPOINTS,
    NO_SNAPSHOT,
    TRANSITIONS,
    CoordinatorState,
    FailpointAction,
    FailpointCrash,
    SnapshotCorrupted,
    TerminationMode,
    validate_snapshot,
)
from snapshot_protocol.chunks import chunks_of
from snapshot_protocol.incremental import chains_of

from .fakes import (
    CHAIN_POLICY,
    INCREMENTAL_JOB,
    JOB,
    Cluster,
    Driver,
    FakeKeyedState,
    Fault,
    Op,
    TxnStatus,
)
from .pausable import PausingFailpoints, pause_point
from .zombie_rules import Zombie, ZombieRules

pytestmark = pytest.mark.unit

T = TypeVar("T")
S = CoordinatorState

EXPORT_NAMES = ("nightly", "pre-upgrade")
STOPPED_BY_ACTION = {"RESTART": S.RESTART_REQUIRED, "SUSPEND": S.SUSPENDED, "CANCEL": S.CANCELLED}


def sometimes(strategy: st.SearchStrategy[T]) -> st.SearchStrategy[T | None]:
    """Draws from ``strategy`` one time in four, else None, so that runs also get far."""
    return st.tuples(st.integers(0, 3), strategy).map(lambda t: t[1] if t[0] == 0 else None)


def failpoints_of(procedure: str) -> st.SearchStrategy[tuple[str, FailpointAction] | None]:
    options = sorted(
        (
            (failpoint.name, action)
            for failpoint in FAILPOINTS
            if failpoint.procedure == procedure
            for action in failpoint.actions
            # A pause only hands control to the runtime's hook; the zombies this machine
            # models (new_execution, zombie_tries_to_snapshot) stand for what it leads to.
            if action is not FailpointAction.PAUSE
        ),
        key=lambda option: (option[0], option[1].value),
    )
    return sometimes(st.sampled_from(options))


store_faults = sometimes(
    st.lists(
        st.one_of(
            st.tuples(
                st.sampled_from(
                    [Op.RECORD_SAFE, Op.RECORD_STANDARD, Op.CHUNK_PUT, Op.VALIDATION_PUT]
                ),
                st.integers(0, 2),
                st.sampled_from(
                    [Fault.INDETERMINATE_APPLIED, Fault.INDETERMINATE_NOT_APPLIED, Fault.FAILED]
                ),
            ),
            st.tuples(
                st.just(Op.CLEAR), st.integers(0, 1), st.sampled_from([Fault.FAILED, Fault.PARTIAL])
            ),
        ),
        min_size=1,
        max_size=2,
    )
)

termination_requests = st.tuples(
    st.sampled_from(TerminationMode), st.none() | st.sampled_from(EXPORT_NAMES)
).map(lambda r: r if r[0].terminal_snapshot else (r[0], None))


class SnapshotProtocolMachine(ZombieRules, RuleBasedStateMachine):
    """One job, its cluster that outlives drivers, and the drivers the operator starts."""

    job = JOB

    def __init__(self) -> None:
        super().__init__()
        self.failpoints = PausingFailpoints()
        self.suspend_on_failure = False
        self._new_job()

    def _new_job(self) -> None:
        self._kill_zombies()
        self.cluster = Cluster(self.job)
        self.cluster.database.on_commit = self._on_commit
        self.cluster.database.on_rollback = self._on_rollback
        self.cluster.database.may_commit = self._may_commit
        self.cluster.snapshots.before_write = pause_point
        self.cluster.database.before_settle = pause_point
        self.driver: Driver | None = None
        self.zombies: list[Zombie] = []
        self.damaged_maps: set[str] = set()
        self.job_over = False

    # Moment-of-event checks (invariants 5, 6, 8)

    def _on_commit(self, snapshot_id: int) -> None:
        safe = self.cluster.records.safe_record
        if safe is None or safe.snapshot_id != snapshot_id:
            self.cluster.violations.append(
                f"invariant 5: transactions of snapshot {snapshot_id} committed while the safe "
                f"record is {safe}"
            )
        if snapshot_id not in self.cluster.snapshots.validation_records_written:
            self.cluster.violations.append(f"committed snapshot {snapshot_id} was not successful")

    def _on_rollback(self, snapshot_id: int) -> None:
        stored = self.cluster.records.record.snapshot_id
        in_memory = NO_SNAPSHOT
        if self.driver is not None and self.driver.coordinator.record is not None:
            in_memory = self.driver.coordinator.record.snapshot_id
        # A replaced execution's snapshot that the record does not point at can never be
        # committed; rolling it back is right even if the restore point is newer.
        newer_or_same = max(stored, in_memory) >= snapshot_id and self._may_commit(snapshot_id)
        if snapshot_id in (stored, in_memory) or newer_or_same:
            self.cluster.violations.append(
                f"invariant 6: transactions of snapshot {snapshot_id} rolled back while the "
                f"record points to {stored} (stored) / {in_memory} (in memory)"
            )

    def _check_no_concurrent_restore(self) -> None:
        # Zombies may be in the middle of anything: what matters is that they are fenced.
        busy = [z for z in self.zombies if z.busy and not z.driver.records.fenced]
        if busy:
            self.cluster.violations.append(
                f"invariant 8: restore while {busy[0].describe()} is active and not fenced"
            )

    # Driving the coordinator

    def _drive(
        self,
        action: Callable[[], Any],
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
    ) -> None:
        assert self.driver is not None
        if failpoint is not None:
            self.failpoints.arm(*failpoint)
        self.cluster.faults.arm(faults or [])
        committed_before = self._committed()
        try:
            action()
        except FailpointCrash:
            self.driver = None  # the driver process died; the chaos harness calls os._exit
        except SnapshotCorrupted as corrupted:
            self._check_corruption(corrupted)
        finally:
            self.failpoints.disarm_all()
            self.cluster.faults.disarm()
        self._check_zombie_leftovers_settled(committed_before)
        self._check_stopped_driver()

    def _restore(
        self,
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
        commit_outage: bool,
    ) -> None:
        assert self.driver is not None
        self._check_no_concurrent_restore()
        self.cluster.database.unavailable_for_commits = int(commit_outage)
        self._drive(self.driver.coordinator.restore, failpoint, faults)
        self.cluster.database.unavailable_for_commits = 0
        if self.driver is not None and self.driver.coordinator.state is S.RUNNING:
            self._check_restored_exactly_once()

    def _check_corruption(self, corrupted: SnapshotCorrupted) -> None:
        record = self.cluster.records.record
        map_name = record.successful_snapshot_map_name(self.cluster.job)
        assert (corrupted.map_name, corrupted.snapshot_id) == (map_name, record.snapshot_id)
        assert map_name in self.damaged_maps, f"false alarm: {corrupted}"
        message = str(corrupted)
        assert map_name in message
        assert f"Snapshot {record.snapshot_id} " in message
        assert "spec.initialSnapshotName" in message
        assert self.driver is not None and self.driver.coordinator.state is S.FAILED
        self.job_over = True

    def _check_restored_exactly_once(self) -> None:
        """The restored job continues exactly where its committed output ends."""
        assert self.driver is not None
        offset = self.driver.pipeline.source.offset
        committed = self.cluster.database.committed_items()
        assert sorted(committed) == list(range(offset)), (offset, committed)
        assert self.driver.pipeline.state.counts == FakeKeyedState.expected_counts(range(offset))
        assert self.cluster.database.prepared() == []

    def _check_stopped_driver(self) -> None:
        if self.driver is None:
            return
        coordinator = self.driver.coordinator
        termination = coordinator.execution_end
        if coordinator.state in (S.CANCELLED, S.FAILED):
            self.job_over = True
        if termination is None or termination.mode is None:
            return
        assert coordinator.state is STOPPED_BY_ACTION[termination.mode.action_after.value]
        if termination.mode.terminal_snapshot:
            # A graceful termination that went through leaves a clean state: the terminal
            # snapshot is the restore point and no transaction is left prepared.
            assert coordinator.record is not None
            assert self.cluster.records.record.snapshot_id == coordinator.record.snapshot_id
            assert self.cluster.records.safe_record is not None
            # Also a zombie's: the terminal snapshot's 2nd phase rolled back older ones.
            left = self.cluster.database.prepared()
            assert left == [], f"transactions {left} still prepared after {termination.mode}"

    def _export_name_rejected(self, export_name: str | None, driver: Driver | None = None) -> bool:
        driver = driver or self.driver
        assert driver is not None and driver.coordinator.record is not None
        return (
            export_name is not None
            and export_name == driver.coordinator.record.exported_snapshot_name
        )

    def _state_is(self, *states: CoordinatorState) -> bool:
        return self.driver is not None and self.driver.coordinator.state in states

    # Rules

    @initialize(suspend_on_failure=st.booleans())
    def configure(self, suspend_on_failure: bool) -> None:
        self.suspend_on_failure = suspend_on_failure

    @precondition(
        lambda self: (
            not self.job_over
            and (self.driver is None or self._state_is(S.RESTART_REQUIRED, S.SUSPENDED))
        )
    )
    @rule(failpoint=failpoints_of("restore"), faults=store_faults, commit_outage=st.booleans())
    def start_driver(
        self,
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
        commit_outage: bool,
    ) -> None:
        """The operator starts a new execution: a new driver process restores the job."""
        self.driver = self.cluster.start_driver(self.failpoints, self.suspend_on_failure)
        self._restore(failpoint, faults, commit_outage)

    @precondition(lambda self: self._state_is(S.RESTART_REQUIRED, S.SUSPENDED))
    @rule(failpoint=failpoints_of("restore"), faults=store_faults, commit_outage=st.booleans())
    def restore_in_same_driver(
        self,
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
        commit_outage: bool,
    ) -> None:
        """The same coordinator restores again with its in-memory record (protocol.md restore 1)."""
        self._restore(failpoint, faults, commit_outage)

    @precondition(lambda self: self._state_is(S.RUNNING, S.PHASE_2_PENDING))
    @rule(count=st.integers(1, 4))
    def process_items(self, count: int) -> None:
        assert self.driver is not None
        self.driver.pipeline.process(count)

    @precondition(lambda self: self._state_is(S.RUNNING))
    @rule(
        export_name=sometimes(st.sampled_from(EXPORT_NAMES)),
        failpoint=failpoints_of("take"),
        faults=store_faults,
        executor_lost=st.booleans(),
        request_during_phase_1=sometimes(termination_requests),
    )
    def take_snapshot(
        self,
        export_name: str | None,
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
        executor_lost: bool,
        request_during_phase_1: tuple[TerminationMode, str | None] | None,
    ) -> None:
        """An automatic or export-only snapshot, maybe with a termination request arriving."""
        assert self.driver is not None
        coordinator = self.driver.coordinator
        if self._export_name_rejected(export_name):
            with pytest.raises(ValueError, match="restore point"):
                coordinator.take_snapshot(export_name)
            assert coordinator.state is S.RUNNING
            return
        state = self.driver.pipeline.state
        state.fail_next_save = executor_lost
        if request_during_phase_1 is not None and not self._export_name_rejected(
            request_during_phase_1[1]
        ):
            mode, name = request_during_phase_1
            state.on_save = lambda: coordinator.request_termination(mode, name)
        self._drive(lambda: coordinator.take_snapshot(export_name), failpoint, faults)
        state.fail_next_save = False
        state.on_save = None

    @precondition(lambda self: self._state_is(S.PHASE_2_PENDING))
    @rule(failpoint=failpoints_of("take"), faults=store_faults, commit_outage=st.booleans())
    def finish_snapshot(
        self,
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
        commit_outage: bool,
    ) -> None:
        """Phase 2 and step 10, then any termination request that waited for the snapshot."""
        assert self.driver is not None
        self.cluster.database.unavailable_for_commits = int(commit_outage)
        self._drive(self.driver.coordinator.finish_snapshot, failpoint, faults)
        self.cluster.database.unavailable_for_commits = 0

    @precondition(lambda self: self._state_is(S.RUNNING, S.PHASE_2_PENDING))
    @rule(request=termination_requests, failpoint=failpoints_of("take"), faults=store_faults)
    def request_termination(
        self,
        request: tuple[TerminationMode, str | None],
        failpoint: tuple[str, FailpointAction] | None,
        faults: list[tuple[Op, int, Fault]] | None,
    ) -> None:
        """Any of the six termination modes, with or without exporting the terminal snapshot."""
        assert self.driver is not None
        coordinator = self.driver.coordinator
        mode, export_name = request
        if self._export_name_rejected(export_name):
            state = coordinator.state
            with pytest.raises(ValueError, match="restore point"):
                coordinator.request_termination(mode, export_name)
            assert coordinator.state is state
            return
        self._drive(lambda: coordinator.request_termination(mode, export_name), failpoint, faults)

    @precondition(lambda self: self._state_is(S.RUNNING, S.PHASE_2_PENDING))
    @rule()
    def job_fails(self) -> None:
        """The pipeline fails; suspendOnFailure suspends without a snapshot."""
        assert self.driver is not None
        self.driver.coordinator.fail("user code raised")
        expected = S.SUSPENDED if self.suspend_on_failure else S.FAILED
        assert self.driver.coordinator.state is expected
        self._check_stopped_driver()

    @precondition(lambda self: self.driver is not None and not self.job_over)
    @rule()
    def driver_crashes(self) -> None:
        """The driver process dies between two steps of the pipeline."""
        self.driver = None

    @precondition(lambda self: not self.job_over)
    @rule(data=st.data(), happens=st.integers(0, 3))
    def lose_snapshot_data(self, data: st.DataObject, happens: int) -> None:
        """More members fail than the maps have backups: entries of one map are lost."""
        maps = sorted(name for name, entries in self.cluster.snapshots.maps.items() if entries)
        if happens != 0 or not maps:
            return
        map_name = data.draw(st.sampled_from(maps), label="map")
        entries = self.cluster.snapshots.maps[map_name]
        lost = data.draw(
            st.lists(st.sampled_from(sorted(entries)), min_size=1, unique=True), label="lost"
        )
        for key in lost:
            del entries[key]
        self.damaged_maps.add(map_name)

    @precondition(lambda self: self.job_over)
    @rule()
    def submit_new_job(self) -> None:
        """After a cancellation or a permanent failure, go on with a fresh job."""
        self._new_job()

    # Invariants I1-I8 of docs/concepts/protocol.md, one check each

    @invariant()
    def invariant_1_record_in_memory_is_never_older(self) -> None:
        """I1: the driver's record in memory is never behind the stored one (it may be ahead)."""
        if self.driver is None or self.driver.coordinator.record is None:
            return
        in_memory = self.driver.coordinator.record
        stored = self.cluster.records.record
        assert in_memory.ongoing_snapshot_id >= stored.ongoing_snapshot_id, (in_memory, stored)
        assert in_memory.snapshot_id >= stored.snapshot_id, (in_memory, stored)

    @invariant()
    def invariant_2_record_points_to_successful_snapshot(self) -> None:
        """I2: the stored record points at a successful snapshot that is not export-only, usable
        for a restore that keeps the guarantees and the sinks' state."""
        record = self.cluster.records.record
        if record.snapshot_id == NO_SNAPSHOT:
            return
        snapshot_id = record.snapshot_id
        assert snapshot_id in self.cluster.snapshots.validation_records_written
        assert snapshot_id not in self.cluster.export_only_snapshots
        transaction = self.cluster.database.transactions.get(snapshot_id)
        assert transaction is not None and transaction.status is not TxnStatus.ROLLED_BACK, (
            f"invariant 2: the record points at snapshot {snapshot_id}, whose transaction is "
            f"{transaction}; {self.cluster.violations}"
        )
        map_name = record.successful_snapshot_map_name(self.cluster.job)
        assert map_name is not None
        if map_name not in self.damaged_maps:
            validate_snapshot(self.cluster.snapshots, map_name, snapshot_id)

    @invariant()
    def invariant_3_snapshot_id_is_strictly_monotonic(self) -> None:
        """I3: the record's snapshot id only grows; it may skip values."""
        assert not [v for v in self.cluster.violations if "went back" in v]

    @invariant()
    def invariant_4_no_data_above_ongoing_snapshot_id(self) -> None:
        """I4: no chunk or validation record in any snapshot map carries an id above the
        stored ongoing id; a map may hold data of several older ids."""
        ongoing = self.cluster.records.record.ongoing_snapshot_id
        assert all(sid <= ongoing for _, sid in self.cluster.snapshots.snapshot_ids_stored())
        assert not [v for v in self.cluster.violations if v.startswith("invariant 4")]

    @invariant()
    def invariant_5_no_commit_without_safe_record(self) -> None:
        """I5: no sink transaction of a snapshot is committed before the record naming it is
        safe."""
        assert not [v for v in self.cluster.violations if "commit" in v and "rollback" not in v]

    @invariant()
    def invariant_6_no_rollback_of_recorded_snapshot(self) -> None:
        """I6: no sink transaction of a snapshot that the record may point at is rolled back."""
        assert not [v for v in self.cluster.violations if "rollback" in v or "rolled back" in v]

    @invariant()
    def invariant_7_one_snapshot_in_progress(self) -> None:
        """I7: at most one snapshot of a job that may still count is in progress at any time.

        Zombies' snapshots may be in progress too, but they are fenced: they can never become
        the restore point, and their prepared transactions never commit (``_may_commit``).
        """
        drivers = [*self.zombies, *([Zombie(self.driver)] if self.driver else [])]
        counting = [d.describe() for d in drivers if d.busy and not d.driver.records.fenced]
        assert len(counting) <= 1, counting
        violations = [v for v in self.cluster.violations if v.startswith("invariant 7")]
        assert not violations, violations

    @invariant()
    def invariant_8_restore_never_concurrent(self) -> None:
        """I8: a restore never runs alongside a snapshot or another restore that is not fenced,
        and nothing a zombie does changes the restore point (checked after every zombie step)."""
        violations = [v for v in self.cluster.violations if v.startswith("invariant 8")]
        assert not violations, violations

    @invariant()
    def no_other_violation(self) -> None:
        """Transactions are prepared once, and never committed after a rollback or vice versa."""
        assert not [v for v in self.cluster.violations if "twice" in v or "unknown" in v]
        assert not [v for v in self.cluster.violations if "not successful" in v]

    @invariant()
    def transitions_follow_the_table(self) -> None:
        """Whatever happened, the coordinator is in a state the table knows."""
        if self.driver is not None:
            assert self.driver.coordinator.state in TRANSITIONS


class IncrementalSnapshotProtocolMachine(SnapshotProtocolMachine):
    """The same job with incremental snapshots: every automatic snapshot goes to the chain
    map and the keyed state inherits the chains of partitions without updates, so discards
    must keep the restore point's chains (I2 validates it after every step) and a restore
    must apply them (the end-to-end check compares the state)."""

    job = INCREMENTAL_JOB

    @invariant()
    def chains_are_bounded(self) -> None:
        """I14: every chain the stored restore point lists has at most ``1 + maxDeltas``
        versions."""
        record = self.cluster.records.record
        map_name = record.successful_snapshot_map_name(self.cluster.job)
        if map_name is None or map_name in self.damaged_maps:
            return
        stored = self.cluster.snapshots.get_validation_record(map_name, record.snapshot_id)
        assert stored is not None
        for chain in chains_of(chunks_of(stored, FakeKeyedState.name)).values():
            assert chain.deltas <= CHAIN_POLICY.max_deltas, chain


for machine in (SnapshotProtocolMachine, IncrementalSnapshotProtocolMachine):
    machine.TestCase.settings = settings(
        max_examples=200,
        stateful_step_count=50,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
TestSnapshotProtocol = SnapshotProtocolMachine.TestCase
TestIncrementalSnapshotProtocol = IncrementalSnapshotProtocolMachine.TestCase
