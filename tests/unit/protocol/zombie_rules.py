"""Zombies that act: the part of the invariants' state machine in which replaced drivers go on.

The operator replaces a driver it lost (a long GC pause, SIGSTOP, a partitioned node) by a new
execution. The old driver is not dead: when it wakes up it continues exactly where it stopped,
in the middle of a coordinator call, and writes whatever that call still had to write: chunks,
its validation record, record patches, the step-3 or step-8 discard, the 2nd phase on the
transactional database. What keeps the job correct then is fencing alone: the record store
refuses a replaced execution's writes (docs/concepts/protocol.md, "Fencing", I9), and snapshot data
is fenced by snapshot id (mechanism M8), so a zombie only ever writes or discards ids lower than
anything the newer execution writes.

A driver stops at any pause point of any call (``pausable.py``): every failpoint, every write to
the snapshot maps and, in a restore, the moment its sink settles the job's transactions in
restore step 5. A driver replaced after restore step 2 passed that fence, so it goes on with
steps 3-5 unhindered: it reads its restore point, restores its participants, and its sink
commits the transaction the snapshot names and rolls back the other prepared ones, but only of
ids up to the record's ``ongoingSnapshotId`` after its step 2, so a newer execution's
transactions are left alone (M8). If the newer execution's snapshots discarded its restore point
meanwhile, its restore fails permanently without writing anything, an end the model accepts of a
replaced execution.

A zombie fenced at taking step 7a leaves the transaction its sink prepared in phase 1. Nobody
can commit it (``_may_commit``), so it does not count as a snapshot in progress (I7) and rolling
it back is right even below the restore point (I6); but it may stay prepared only until the
current execution settles the job's transactions: after any call of the current driver that
commits a snapshot's transaction (a successful 2nd phase, or restore step 5's commit), no
older transaction may still be prepared, and a restore that completes or a graceful termination
leaves none at all. Undo either fix in ``fakes.FakeTransactionalSink`` (restore settling only
up to that id; a successful 2nd phase rolling back older transactions) and the machine finds a
counterexample within seconds, on I6 or on that check.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from hypothesis import strategies as st
from hypothesis.stateful import precondition, rule

from snapshot_protocol import (
    FAILPOINTS,
    CoordinatorState,
    Failpoints,
    SnapshotCorrupted,
    SnapshotUnusable,
    TerminationMode,
    ZombieExecution,
    validate_snapshot,
)
from snapshot_protocol.chunks import snapshot_id_of_key

from .fakes import Cluster, Driver, Fault, Op, TxnStatus
from .pausable import PausableCall

if TYPE_CHECKING:
    from snapshot_protocol import ExecutionRecord

S = CoordinatorState
IN_PROGRESS = frozenset({S.TAKING_SNAPSHOT, S.PHASE_2_PENDING, S.IN_PHASE_2})
STOPPED_FOR_GOOD = frozenset({S.FENCED, S.FAILED, S.CANCELLED})
# A restore passes every failpoint of restore steps 1-5 and the sink's settling in step 5.
RESTORE_PAUSE_POINTS = sum(1 for f in FAILPOINTS if f.procedure == "restore") + 1
GRACEFUL_MODES = tuple(mode for mode in TerminationMode if mode.terminal_snapshot)

# A failed put or discard makes a zombie's snapshot fail, so it also goes through step 8b and
# rolls back.
zombie_faults = st.none() | st.lists(
    st.tuples(
        st.sampled_from([Op.CHUNK_PUT, Op.VALIDATION_PUT, Op.CLEAR]),
        st.integers(0, 2),
        st.sampled_from([Fault.INDETERMINATE_APPLIED, Fault.FAILED]),
    ),
    max_size=1,
)


@dataclass
class Zombie:
    """A driver the operator replaced, and the call it was paused in, if any."""

    driver: Driver
    call: PausableCall | None = None

    @property
    def busy(self) -> bool:
        """Paused in a call, or between calls with a snapshot or restore in progress."""
        state = self.driver.coordinator.state
        return (self.call is not None and not self.call.done) or state in IN_PROGRESS

    @property
    def can_act(self) -> bool:
        """Whether it can still do anything: it is in a call, or may start one."""
        in_call = self.call is not None and not self.call.done
        return in_call or self.driver.coordinator.state not in STOPPED_FOR_GOOD

    def describe(self) -> str:
        where = "between calls" if self.call is None else f"in {self.call.name}"
        return (
            f"execution {self.driver.records.execution_id} "
            f"({self.driver.coordinator.state.value}, {where})"
        )


class ZombieRules:
    """The rules and checks of zombies, mixed into the invariants' state machine.

    The machine provides ``cluster``, ``driver``, ``zombies``, ``damaged_maps`` and the
    checks it applies to a call of the current driver.
    """

    cluster: Cluster
    driver: Driver | None
    zombies: list[Zombie]
    damaged_maps: set[str]
    failpoints: Failpoints
    suspend_on_failure: bool
    job_over: bool

    def _check_no_concurrent_restore(self) -> None:
        raise NotImplementedError

    def _check_corruption(self, corrupted: SnapshotCorrupted) -> None:
        raise NotImplementedError

    def _check_stopped_driver(self) -> None:
        raise NotImplementedError

    def _check_restored_exactly_once(self) -> None:
        raise NotImplementedError

    def _export_name_rejected(self, export_name: str | None, driver: Driver | None = None) -> bool:
        raise NotImplementedError

    def _state_is(self, *states: CoordinatorState) -> bool:
        raise NotImplementedError

    # The machine's rules that the zombie story calls as plain steps.

    def start_driver(self, failpoint: None, faults: None, commit_outage: bool) -> None:
        raise NotImplementedError

    def process_items(self, count: int) -> None:
        raise NotImplementedError

    def take_snapshot(
        self, export_name: None, failpoint: None, faults: None, lost: bool, request: None
    ) -> None:
        raise NotImplementedError

    def finish_snapshot(self, failpoint: None, faults: None, commit_outage: bool) -> None:
        raise NotImplementedError

    # Who may still commit (for invariants 6 and 7), and how long a zombie's leftover stays

    def _may_commit(self, snapshot_id: int) -> bool:
        """Whether a snapshot's transaction can still be committed by anyone.

        Not if a replaced execution allocated its id and the record does not point at it:
        only that execution could make the record point at it, and its record writes are
        refused. Such a transaction is a zombie's leftover: it does not count as a snapshot in
        progress (I7), and rolling it back is right even below the restore point (I6).
        """
        records = self.cluster.records
        allocated_by = records.allocated_by.get(snapshot_id, records.execution_id)
        return allocated_by == records.execution_id or records.record.snapshot_id == snapshot_id

    def _committed(self) -> set[int]:
        transactions = self.cluster.database.transactions
        return {sid for sid, txn in transactions.items() if txn.status is TxnStatus.COMMITTED}

    def _check_zombie_leftovers_settled(self, committed_before: set[int]) -> None:
        """After a call of the current driver that committed a snapshot's transaction, no
        older transaction is still prepared.

        The commit is a successful 2nd phase or restore step 5's commit "just in case"; both
        settle what lies below (mechanism M8). So a transaction a zombie prepared before it was
        fenced at taking step 7a stays prepared only until then; a restore that completes
        is checked by ``_check_restored_exactly_once``, which wants nothing prepared at all.

        Args:
            committed_before: The committed transactions' ids before the call.
        """
        newly = self._committed() - committed_before
        if not newly:
            return
        through = max(newly)
        left = [sid for sid in self.cluster.database.prepared() if sid < through]
        assert not left, (
            f"zombie leftover: transactions of snapshots {left} are still prepared after "
            f"execution {self.cluster.records.execution_id} committed snapshot {through}, "
            f"which settles every older one"
        )

    def _kill_zombies(self) -> None:
        for zombie in getattr(self, "zombies", []):
            if zombie.call is not None:
                zombie.call.kill()

    def teardown(self) -> None:
        self._kill_zombies()

    # Rules

    def _draw_call(
        self, data: st.DataObject, driver: Driver
    ) -> tuple[str, Callable[[], object]] | None:
        """A call the driver's state allows: what a driver does next in that state."""
        coordinator = driver.coordinator
        state = coordinator.state
        options: list[tuple[str, Callable[[], object]]] = []
        if state is S.RUNNING:
            options.append(("take_snapshot()", coordinator.take_snapshot))
            for name in ("nightly", "pre-upgrade"):
                if not self._export_name_rejected(name, driver):
                    options.append(
                        (f"take_snapshot({name!r})", lambda n=name: coordinator.take_snapshot(n))
                    )
            for mode in GRACEFUL_MODES:
                options.append(
                    (
                        f"request_termination({mode.name})",
                        lambda m=mode: coordinator.request_termination(m),
                    )
                )
        elif state is S.PHASE_2_PENDING:
            options.append(("finish_snapshot()", coordinator.finish_snapshot))
        elif state in (S.NOT_STARTED, S.RESTART_REQUIRED, S.SUSPENDED):
            options.append(("restore()", coordinator.restore))
        if not options:
            return None
        names = [name for name, _ in options]
        name = data.draw(st.sampled_from(names), label="call")
        return name, dict(options)[name]

    def _can_pause_a_call(self) -> bool:
        """The driver is in a state with a call to make, or there is none and the operator
        is about to start one (whose restore is then the call)."""
        return self._state_is(S.RUNNING, S.PHASE_2_PENDING, S.RESTART_REQUIRED, S.SUSPENDED) or (
            self.driver is None and not self.job_over
        )

    @precondition(lambda self: self._can_pause_a_call())
    @rule(data=st.data(), pause_at=st.integers(1, 24))
    def driver_paused_mid_call(self, data: st.DataObject, pause_at: int) -> None:
        """The driver stops in the middle of a call and the operator replaces it.

        It lives on as a zombie paused at its ``pause_at``-th pause point; if the call ends
        before that, it was an ordinary call of the current driver. Without a driver, the
        operator starts one and it stops in its restore.
        """
        if self.driver is None:
            self.driver = self.cluster.start_driver(self.failpoints, self.suspend_on_failure)
            self._check_no_concurrent_restore()
        driver = self.driver
        drawn = self._draw_call(data, driver)
        assert drawn is not None
        if drawn[0] == "restore()":
            # A restore passes fewer pause points than a snapshot: fold the draw onto them, so
            # that a restore stops mid-call as often as the other calls do.
            pause_at = 1 + (pause_at - 1) % RESTORE_PAUSE_POINTS
        committed_before = self._committed()
        call = PausableCall(*drawn)
        for _ in range(pause_at):
            call.step()
            if call.done:
                break
        self._check_zombie_leftovers_settled(committed_before)
        if not call.done:
            self.zombies.append(Zombie(driver, call))
            self.driver = None
            return
        if isinstance(call.error, SnapshotCorrupted):
            self._check_corruption(call.error)
        elif call.error is not None:
            raise call.error
        self._check_stopped_driver()
        if drawn[0] == "restore()" and driver.coordinator.state is S.RUNNING:
            self._check_restored_exactly_once()

    @precondition(lambda self: self._state_is(S.RUNNING))
    @rule()
    def driver_partitioned(self) -> None:
        """The operator loses the driver between two calls and starts another: the old one
        lives on as a zombie."""
        assert self.driver is not None
        self.zombies.append(Zombie(self.driver))
        self.driver = None

    def _fenced_zombies(self) -> list[Zombie]:
        return [z for z in self.zombies if z.driver.records.fenced and z.can_act]

    @precondition(lambda self: bool(self._fenced_zombies()))
    @rule(
        data=st.data(),
        steps=st.sampled_from([1, 2, 3, 5, 100]),
        faults=zombie_faults,
    )
    def zombie_resumes(
        self, data: st.DataObject, steps: int, faults: list[tuple[Op, int, Fault]] | None
    ) -> None:
        """A replaced driver wakes up and goes on for ``steps`` pause points.

        Paused in a call, it continues exactly where it stopped; between calls it starts the
        next call its state allows.
        """
        candidates = self._fenced_zombies()
        zombie = candidates[data.draw(st.integers(0, len(candidates) - 1), label="zombie")]
        if zombie.call is None or zombie.call.done:
            drawn = self._draw_call(data, zombie.driver)
            if drawn is None:
                return
            zombie.call = PausableCall(*drawn)
        self._resume(zombie, steps, faults)

    @precondition(lambda self: self._can_pause_a_call())
    @rule(
        data=st.data(),
        pause_at=st.integers(1, 24),
        snapshots=st.integers(0, 3),
        last_phase_2=st.booleans(),
        faults=zombie_faults,
    )
    def driver_replaced_mid_call(
        self,
        data: st.DataObject,
        pause_at: int,
        snapshots: int,
        last_phase_2: bool,
        faults: list[tuple[Op, int, Fault]] | None,
    ) -> None:
        """The whole story in one step, so that it is common: the driver stops mid-call, a new
        execution restores and takes ``snapshots`` snapshots, then the old driver wakes up and
        finishes its call.

        Unless ``last_phase_2``, the newer execution's last snapshot waits for its 2nd phase
        while the zombie goes on: its transaction is prepared and the record may point at it.
        """
        self.driver_paused_mid_call(data, pause_at)
        if self.driver is not None:
            return  # the call ended before it could pause
        zombie = self.zombies[-1]
        self.start_driver(None, None, False)
        for taken in range(1, snapshots + 1):
            if not self._state_is(S.RUNNING):
                break
            self.process_items(2)
            self.take_snapshot(None, None, None, False, None)
            if self._state_is(S.PHASE_2_PENDING) and (taken < snapshots or last_phase_2):
                self.finish_snapshot(None, None, False)
        self._resume(zombie, 1_000, faults)

    def _resume(
        self, zombie: Zombie, steps: int, faults: list[tuple[Op, int, Fault]] | None
    ) -> None:
        call = zombie.call
        assert call is not None
        self.cluster.faults.arm(faults or [])
        try:
            for _ in range(steps):
                self._zombie_step(zombie, call)
                if call.done:
                    break
        finally:
            self.cluster.faults.disarm()
        if call.done:
            zombie.call = None
            if isinstance(call.error, ZombieExecution):
                assert zombie.driver.coordinator.state is S.FENCED
            elif isinstance(call.error, SnapshotUnusable):
                # A zombie paused in a restore may find its restore point discarded by the
                # newer execution's snapshots (see the module docstring).
                assert zombie.driver.coordinator.state is S.FAILED
            elif call.error is not None:
                raise call.error

    @precondition(
        lambda self: any(
            z.call is None and z.driver.coordinator.state is S.RUNNING
            for z in self._fenced_zombies()
        )
    )
    @rule(graceful=st.booleans())
    def zombie_tries_to_snapshot(self, graceful: bool) -> None:
        """A fenced driver between calls can neither move the record nor write snapshot data."""
        zombie = next(
            z
            for z in self._fenced_zombies()
            if z.call is None and z.driver.coordinator.state is S.RUNNING
        )
        record = self.cluster.records.record
        maps = {name: dict(entries) for name, entries in self.cluster.snapshots.maps.items()}
        try:
            if graceful:
                zombie.driver.coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL)
            else:
                zombie.driver.coordinator.take_snapshot()
        except ZombieExecution:
            pass
        else:
            raise AssertionError(f"zombie {zombie.describe()} was not fenced at taking step 2")
        assert zombie.driver.coordinator.state is S.FENCED
        assert self.cluster.records.record == record
        assert self.cluster.snapshots.maps == maps

    # Checks of every zombie step (invariants 8 and 9)

    def _restore_point_entries(self) -> tuple[str, int, dict[str, object]] | None:
        """The restore point's map, id and entries, unless there is none or it was damaged."""
        record = self.cluster.records.record
        map_name = record.successful_snapshot_map_name(self.cluster.job)
        if map_name is None or map_name in self.damaged_maps:
            return None
        entries = self.cluster.snapshots.maps.get(map_name, {})
        return (
            map_name,
            record.snapshot_id,
            {k: v for k, v in entries.items() if snapshot_id_of_key(k) == record.snapshot_id},
        )

    def _zombie_step(self, zombie: Zombie, call: PausableCall) -> None:
        """One step of a zombie; it must change neither the record nor the restore point.

        Checked at once rather than by the invariants after the rule, so that a failure names
        the zombie and the pause points between which it did the damage.
        """
        before: ExecutionRecord = self.cluster.records.record
        point = self._restore_point_entries()
        start = call.paused_at
        call.step()
        step = f"zombie {zombie.describe()}, from {start} to {call.paused_at},"
        after_record = self.cluster.records.record
        assert after_record is before, (
            f"invariant 9: {step} changed the stored record: {before} -> {after_record}"
        )
        if point is None:
            return
        map_name, snapshot_id, entries = point
        after = self._restore_point_entries()
        assert after is not None and after[:2] == (map_name, snapshot_id)
        changed = sorted(
            k for k in entries.keys() | after[2].keys() if entries.get(k) != after[2].get(k)
        )
        assert not changed, (
            f"invariant 8: {step} changed the restore point, snapshot {snapshot_id} in "
            f"{map_name}: {changed}"
        )
        try:
            validate_snapshot(self.cluster.snapshots, map_name, snapshot_id)
        except SnapshotCorrupted as corrupted:
            raise AssertionError(
                f"invariant 8: {step} damaged the restore point: {corrupted}"
            ) from None
