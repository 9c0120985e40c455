"""In-memory, fault-injecting implementations of the protocol's ports, and a tiny pipeline.

They stand in for etcd (the execution record), Hazelcast (the snapshot maps) and a database
with two-phase commit (the external transactional resource) so that the property tests can
crash the driver anywhere and make any store call indeterminate. Each fake records the facts
the invariants of docs/concepts/protocol.md are stated about (which record versions were applied or
known safe, which transactions were committed or rolled back when); violations found at the
moment they happen are appended to ``violations`` for the state machine's invariants to report.
"""

from __future__ import annotations

import enum
import json
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from snapshot_protocol import (
    ChunkDescriptor,
    ChunkKey,
    ChunkReader,
    ChunkWriter,
    CoordinatorConfig,
    CoordinatorState,
    ExecutionRecord,
    ExportIdentity,
    Failpoints,
    IndeterminateChunkWrite,
    IndeterminateRecordWrite,
    JobIdentity,
    PipelineShape,
    RecordStoreError,
    SnapshotCoordinator,
    SnapshotRef,
    SnapshotStoreError,
    ValidationRecord,
    ZombieExecution,
)
from snapshot_protocol.chunks import (
    discarded_keys,
    keys_of_snapshots,
    snapshot_id_of_key,
    validation_record_id,
    validation_record_key,
)
from snapshot_protocol.incremental import ChainPolicy, Write, chains_of, plan_snapshot
from snapshot_protocol.signing import SnapshotKeys


class Op(enum.Enum):
    """The store calls faults can be injected into."""

    RECORD_SAFE = "record.write_safe"
    RECORD_STANDARD = "record.write_standard"
    CLEAR = "snapshot.clear"
    CHUNK_PUT = "snapshot.put_chunk"
    VALIDATION_PUT = "snapshot.put_validation_record"


class Fault(enum.Enum):
    """How a store call goes wrong.

    INDETERMINATE_APPLIED / _NOT_APPLIED: the caller gets an indeterminate result; the write
    did or did not take effect. FAILED: a determinate failure, nothing applied. PARTIAL (clear
    only): the clear "succeeds" but was not replicated, so some entries survive as strays.
    """

    INDETERMINATE_APPLIED = "indeterminate-applied"
    INDETERMINATE_NOT_APPLIED = "indeterminate-not-applied"
    FAILED = "failed"
    PARTIAL = "partial"


@dataclass
class FaultPlan:
    """Faults armed for the n-th next call of an operation (counted from arming)."""

    _armed: dict[tuple[Op, int], Fault] = field(default_factory=dict)
    _calls: Counter[Op] = field(default_factory=Counter)

    def arm(self, faults: Iterable[tuple[Op, int, Fault]]) -> None:
        self._armed = {(op, nth): fault for op, nth, fault in faults}
        self._calls = Counter()

    def disarm(self) -> None:
        self._armed.clear()

    def next(self, op: Op) -> Fault | None:
        nth = self._calls[op]
        self._calls[op] += 1
        return self._armed.pop((op, nth), None)


class FakeClock:
    """A clock that moves 1 ms per reading, so every timestamp differs."""

    def __init__(self) -> None:
        self.now = 1_000

    def __call__(self) -> int:
        self.now += 1
        return self.now


class RecordDatabase:
    """The linearizable store of the execution record (etcd), shared by all executions."""

    def __init__(self, faults: FaultPlan, violations: list[str]) -> None:
        self.record = ExecutionRecord()
        self.execution_id = 0
        self.safe_record: ExecutionRecord | None = None
        # Which execution stored each ongoing id first, so the model can tell a zombie's
        # snapshots (which can never become the restore point) from the current one's.
        self.allocated_by: dict[int, int] = {}
        self.faults = faults
        self.violations = violations

    def start_execution(self) -> FakeRecordStore:
        """The operator starts a new execution; older executions become zombies."""
        self.execution_id += 1
        return FakeRecordStore(self, self.execution_id)

    def apply(self, record: ExecutionRecord, execution_id: int) -> None:
        old = self.record
        self.allocated_by.setdefault(record.ongoing_snapshot_id, execution_id)
        # Invariant 3 (and never reusing ids): checked on every version that reaches the store.
        if record.snapshot_id < old.snapshot_id:
            self.violations.append(f"snapshotId went back from {old.snapshot_id} to {record}")
        if record.ongoing_snapshot_id < old.ongoing_snapshot_id:
            self.violations.append(f"ongoingSnapshotId went back: {old} -> {record}")
        self.record = record


class FakeRecordStore:
    """One execution's view of the record store, fenced by its execution id."""

    def __init__(self, database: RecordDatabase, execution_id: int) -> None:
        self.database = database
        self.execution_id = execution_id

    @property
    def fenced(self) -> bool:
        return self.execution_id != self.database.execution_id

    def read(self) -> ExecutionRecord:
        return self.database.record

    def write_safe(self, record: ExecutionRecord) -> None:
        if self.fenced:
            raise ZombieExecution(f"execution {self.execution_id} is fenced")
        fault = self.database.faults.next(Op.RECORD_SAFE)
        if fault in (None, Fault.INDETERMINATE_APPLIED):
            self.database.apply(record, self.execution_id)
        if fault is None:
            self.database.safe_record = record
        elif fault is Fault.FAILED:
            raise RecordStoreError("injected failure")
        else:
            raise IndeterminateRecordWrite(f"injected {fault.value}")

    def write_standard(self, record: ExecutionRecord) -> None:
        if self.fenced:
            return
        fault = self.database.faults.next(Op.RECORD_STANDARD)
        if fault in (None, Fault.INDETERMINATE_APPLIED):
            self.database.apply(record, self.execution_id)


class FakeSnapshotStore:
    """Hazelcast maps with fail-on-indeterminate single-key puts."""

    def __init__(self, records: RecordDatabase, faults: FaultPlan, violations: list[str]) -> None:
        self.maps: dict[str, dict[str, bytes | ValidationRecord]] = {}
        self.validation_records_written: set[int] = set()
        self.records = records
        self.faults = faults
        self.violations = violations
        # Called with a description before every write, so a test can pause the writer there.
        self.before_write: Callable[[str], None] = lambda write: None
        # Maps whose snapshot ids are another job's (its export, copied in from durable
        # storage): invariant 4 is about this job's own ids.
        self.foreign_maps: set[str] = set()

    def discard(
        self, map_name: str, through_snapshot_id: int, keep: Sequence[ValidationRecord] = ()
    ) -> None:
        self.before_write(f"discard {map_name} through {through_snapshot_id}")
        fault = self.faults.next(Op.CLEAR)
        entries = self.maps.setdefault(map_name, {})
        if fault is Fault.FAILED:
            raise SnapshotStoreError("injected discard failure")
        doomed = discarded_keys(entries, through_snapshot_id, keep)
        # Not replicated to a backup that later took over: every other entry comes back.
        for key in doomed if fault is None else doomed[1::2]:
            del entries[key]

    def discard_snapshots(self, map_name: str, snapshot_ids: Sequence[int]) -> None:
        self.before_write(f"discard {map_name} snapshots {list(snapshot_ids)}")
        entries = self.maps.setdefault(map_name, {})
        for key in keys_of_snapshots(entries, snapshot_ids):
            del entries[key]

    def snapshot_ids(self, map_name: str) -> list[int]:
        return sorted(
            found
            for key in self.maps.get(map_name, {})
            if (found := validation_record_id(key)) is not None
        )

    def _put(self, op: Op, map_name: str, key: str, value: bytes | ValidationRecord) -> None:
        self.before_write(f"{op.value} {key}")
        fault = self.faults.next(op)
        if fault in (None, Fault.INDETERMINATE_APPLIED, Fault.PARTIAL):
            self.maps.setdefault(map_name, {})[key] = value
        if fault is Fault.FAILED:
            raise SnapshotStoreError("injected put failure")
        if fault in (Fault.INDETERMINATE_APPLIED, Fault.INDETERMINATE_NOT_APPLIED):
            raise IndeterminateChunkWrite(f"injected {fault.value}")

    def _check_invariant_4(self, snapshot_id: int) -> None:
        ongoing = self.records.record.ongoing_snapshot_id
        if snapshot_id > ongoing:
            self.violations.append(
                f"invariant 4: data of snapshot {snapshot_id} written while the stored "
                f"ongoingSnapshotId is {ongoing}"
            )

    def put_chunk(self, map_name: str, key: ChunkKey, data: bytes) -> None:
        if map_name not in self.foreign_maps:
            self._check_invariant_4(key.snapshot_id)
        self._put(Op.CHUNK_PUT, map_name, str(key), data)

    def put_chunks(self, map_name: str, chunks: Sequence[tuple[ChunkKey, bytes]]) -> None:
        # Like the Hazelcast store: every put is attempted, then the first failure is raised.
        first_error: SnapshotStoreError | None = None
        for key, data in chunks:
            try:
                self.put_chunk(map_name, key, data)
            except SnapshotStoreError as error:
                first_error = first_error or error
        if first_error is not None:
            raise first_error

    def put_validation_record(self, map_name: str, record: ValidationRecord) -> None:
        if map_name not in self.foreign_maps:
            self._check_invariant_4(record.snapshot_id)
        self._put(Op.VALIDATION_PUT, map_name, validation_record_key(record.snapshot_id), record)
        self.validation_records_written.add(record.snapshot_id)

    def get_validation_record(self, map_name: str, snapshot_id: int) -> ValidationRecord | None:
        value = self.maps.get(map_name, {}).get(validation_record_key(snapshot_id))
        assert value is None or isinstance(value, ValidationRecord)
        return value

    def latest_snapshot_id(self, map_name: str) -> int | None:
        ids = [
            found
            for key in self.maps.get(map_name, {})
            if (found := validation_record_id(key)) is not None
        ]
        return max(ids, default=None)

    def missing_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[ChunkKey]:
        entries = self.maps.get(map_name, {})
        return [key for key in keys if str(key) not in entries]

    def read_chunk(self, map_name: str, key: ChunkKey) -> bytes:
        value = self.maps.get(map_name, {}).get(str(key))
        if not isinstance(value, bytes):
            raise SnapshotStoreError(f"chunk {key} is not in {map_name}")
        return value

    def snapshot_ids_stored(self) -> list[tuple[str, int]]:
        """Every (map, snapshot id) of a chunk or validation record, for invariant 4."""
        found = []
        for map_name, entries in self.maps.items():
            for key, value in entries.items():
                if isinstance(value, ValidationRecord):
                    found.append((map_name, value.snapshot_id))
                else:
                    found.append((map_name, ChunkKey.parse(key).snapshot_id))
                assert snapshot_id_of_key(key) == found[-1][1], key
        return found


class TxnStatus(enum.Enum):
    PREPARED = "PREPARED"
    COMMITTED = "COMMITTED"
    ROLLED_BACK = "ROLLED_BACK"


@dataclass
class Transaction:
    status: TxnStatus
    items: tuple[int, ...]


class TransactionalDatabase:
    """An external resource with two-phase commit; one transaction per snapshot id.

    ``on_commit`` / ``on_rollback`` are called when a prepared transaction changes state,
    before the change, so invariants 5 and 6 can be checked at that very moment.
    ``may_commit`` tells whether a snapshot's transaction can still be committed: a zombie's
    prepared transaction cannot, so it does not count as a second snapshot in progress.
    """

    def __init__(self, violations: list[str]) -> None:
        self.transactions: dict[int, Transaction] = {}
        self.violations = violations
        self.on_commit: Callable[[int], None] = lambda snapshot_id: None
        self.on_rollback: Callable[[int], None] = lambda snapshot_id: None
        self.may_commit: Callable[[int], bool] = lambda snapshot_id: True
        # Called with a description before a sink's restore settles the job's transactions,
        # so a test can pause the restoring driver inside restore step 5.
        self.before_settle: Callable[[str], None] = lambda settle: None
        self.unavailable_for_commits = 0

    def prepare(self, snapshot_id: int, items: Sequence[int]) -> None:
        others = [sid for sid in self.prepared() if sid != snapshot_id and self.may_commit(sid)]
        if others and self.may_commit(snapshot_id):
            self.violations.append(
                f"invariant 7: snapshot {snapshot_id} prepares while {others} are still prepared"
            )
        if snapshot_id in self.transactions:
            self.violations.append(f"transaction of snapshot {snapshot_id} prepared twice")
        self.transactions[snapshot_id] = Transaction(TxnStatus.PREPARED, tuple(items))

    def commit(self, snapshot_id: int) -> None:
        if self.unavailable_for_commits:
            self.unavailable_for_commits -= 1
            raise ConnectionError("database unavailable")
        txn = self.transactions.get(snapshot_id)
        if txn is None:
            self.violations.append(f"commit of unknown transaction {snapshot_id}")
            return
        if txn.status is TxnStatus.ROLLED_BACK:
            self.violations.append(f"commit of rolled back transaction {snapshot_id}")
        elif txn.status is TxnStatus.PREPARED:
            self.on_commit(snapshot_id)
            txn.status = TxnStatus.COMMITTED

    def rollback(self, snapshot_id: int) -> None:
        txn = self.transactions.get(snapshot_id)
        if txn is None:
            return
        if txn.status is TxnStatus.COMMITTED:
            self.violations.append(f"rollback of committed transaction {snapshot_id}")
        elif txn.status is TxnStatus.PREPARED:
            self.on_rollback(snapshot_id)
            txn.status = TxnStatus.ROLLED_BACK

    def prepared(self) -> list[int]:
        return sorted(s for s, t in self.transactions.items() if t.status is TxnStatus.PREPARED)

    def committed_items(self) -> list[int]:
        return [
            item
            for _, txn in sorted(self.transactions.items())
            if txn.status is TxnStatus.COMMITTED
            for item in txn.items
        ]


def _encode(value: object) -> bytes:
    return json.dumps(value, sort_keys=True).encode()


def _decode(data: bytes) -> object:
    return json.loads(data)


class FakeSource:
    """A replayable source: its state is the offset of the next item (driver-side participant)."""

    name = "source"

    def __init__(self) -> None:
        self.offset = 0

    def emit(self, count: int) -> list[int]:
        items = list(range(self.offset, self.offset + count))
        self.offset += count
        return items

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        return [writer.write(0, 0, _encode(self.offset), 1)]

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        pass

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        self.offset = 0
        if snapshot is not None:
            (key,) = snapshot.chunk_keys
            offset = _decode(snapshot.read(reader, key))
            assert isinstance(offset, int)
            self.offset = offset


class FakeKeyedState:
    """Keyed counts in hash partitions, saved the way Spark tasks would: each partition writes
    its own chunks (at most two keys each) straight into the map, and the driver only collects
    the descriptors (executor-side participant).

    Given a restore point to build on (:attr:`ChunkWriter.previous`, a job with incremental
    snapshots), it plans each partition by ``snapshot_protocol.incremental``: a partition
    without updates since the restore point inherits its chain, one with updates gets a delta
    of the updated keys, and chains are cut by full versions within :data:`CHAIN_POLICY`.
    """

    name = "state"
    partitions = 3
    keys_per_chunk = 2

    def __init__(self, store: FakeSnapshotStore) -> None:
        self.store = store
        self.counts: dict[int, int] = {}
        self.fail_next_save = False
        self.on_save: Callable[[], None] | None = None
        # Keys updated since the restore point, and those a snapshot in flight wrote.
        self.dirty: set[int] = set()
        self.saving: tuple[int, frozenset[int]] | None = None
        self.writes: list[dict[int, Write]] = []

    @classmethod
    def expected_counts(cls, items: Iterable[int]) -> dict[int, int]:
        return dict(Counter(item % 7 for item in items))

    def update(self, items: Iterable[int]) -> None:
        for item in items:
            self.counts[item % 7] = self.counts.get(item % 7, 0) + 1
            self.dirty.add(item % 7)

    def _save_partition(
        self, writer: ChunkWriter, partition: int, only: set[int] | None = None
    ) -> list[ChunkDescriptor]:
        # What one Spark task does on an executor: it has only the map name and the key layout.
        entries = sorted(
            (k, v)
            for k, v in self.counts.items()
            if k % self.partitions == partition and (only is None or k in only)
        )
        descriptors = []
        for seq, start in enumerate(range(0, max(len(entries), 1), self.keys_per_chunk)):
            chunk = entries[start : start + self.keys_per_chunk]
            data = _encode(chunk)
            key = writer.key(partition, seq)
            self.store.put_chunk(writer.map_name, key, data)
            descriptors.append(ChunkDescriptor.of(key, data, len(chunk), only is not None))
        return descriptors

    def _plan(self, snapshot_id: int, previous: SnapshotRef | None) -> dict[int, Write]:
        if previous is None:
            return dict.fromkeys(range(self.partitions), Write.FULL)
        changed = {k % self.partitions: 1 for k in self.dirty}
        return plan_snapshot(
            chains_of(previous.chunks), changed, self.partitions, CHAIN_POLICY, snapshot_id
        )

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        if self.on_save is not None:
            self.on_save()
        plan = self._plan(snapshot_id, writer.previous)
        self.writes.append(plan)
        if not export_only:
            self.saving = (snapshot_id, frozenset(self.dirty))
        descriptors: list[ChunkDescriptor] = []
        for partition, write in plan.items():
            if write is not Write.FULL:
                # The chain so far, inherited; a delta extends it.
                assert writer.previous is not None
                descriptors.extend(
                    c for c in writer.previous.chunks if c.key.partition == partition
                )
            if write is Write.DELTA:
                descriptors.extend(self._save_partition(writer, partition, self.dirty))
            elif write is Write.FULL:
                descriptors.extend(self._save_partition(writer, partition))
            if self.fail_next_save:
                self.fail_next_save = False
                raise RuntimeError("executor lost during phase 1")
        return descriptors

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        # The snapshot is the restore point now: later deltas start from it.
        if success and self.saving is not None and self.saving[0] == snapshot_id:
            self.dirty -= self.saving[1]
        self.saving = None

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        self.counts = {}
        self.dirty = set()
        self.saving = None
        if snapshot is None:
            return
        # A chain: the full version, then each delta in snapshot order, the newest value wins.
        order = sorted(snapshot.chunk_keys, key=lambda k: (k.partition, k.snapshot_id, k.seq))
        for key in order:
            chunk = _decode(snapshot.read(reader, key))
            assert isinstance(chunk, list)
            for item_key, count in chunk:
                self.counts[item_key] = count


class FakeTransactionalSink:
    """A sink with one transaction per snapshot (docs/concepts/protocol.md, mechanism M7).

    Output since the previous snapshot goes into the open transaction; phase 1 prepares it and
    saves its id; phase 2 commits it, or rolls it back and fails the execution, because the
    rolled back output is lost unless the job restarts from the restore point (Jet does the
    same: "we can't ignore the snapshot failure").
    """

    name = "sink"

    def __init__(self, database: TransactionalDatabase, export_only_log: set[int]) -> None:
        self.database = database
        self.export_only_log = export_only_log
        self.open_items: list[int] = []
        self.prepared_for: int | None = None
        self.restored_ids: list[int | None] = []

    def write(self, items: Iterable[int]) -> None:
        self.open_items.extend(items)

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        if export_only:
            # Export-only snapshots only save state; no transaction is prepared.
            self.export_only_log.add(snapshot_id)
            return [writer.write(0, 0, _encode(None), 0)]
        self.database.prepare(snapshot_id, self.open_items)
        self.open_items = []
        self.prepared_for = snapshot_id
        return [writer.write(0, 0, _encode(snapshot_id), 1)]

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        if self.prepared_for != snapshot_id:
            return
        self.prepared_for = None
        if success:
            self.database.commit(snapshot_id)
            # Left by a replaced execution fenced at step 7a: no restore commits them now.
            for older in self.database.prepared():
                if older < snapshot_id:
                    self.database.rollback(older)
        else:
            self.database.rollback(snapshot_id)
            raise RuntimeError(f"snapshot {snapshot_id} failed; its output must be reprocessed")

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        self.open_items = []
        self.prepared_for = None
        named: int | None = None
        if snapshot is not None:
            (key,) = snapshot.chunk_keys
            value = _decode(snapshot.read(reader, key))
            assert value is None or isinstance(value, int)
            named = value
        self.database.before_settle(f"sink settles transactions through {through_snapshot_id}")
        if named is not None:
            self.database.commit(named)  # just in case (docs/concepts/protocol.md, restore step 5)
        for snapshot_id in self.database.prepared():
            if snapshot_id != named and snapshot_id <= through_snapshot_id:
                self.database.rollback(snapshot_id)
        self.restored_ids.append(named)


JOB = JobIdentity(uid="0b5e-uid", namespace="team-a", backup_count=1)
INCREMENTAL_JOB = JobIdentity(uid="1c6f-uid", namespace="team-a", backup_count=1, incremental=True)
CHAIN_POLICY = ChainPolicy(max_deltas=3, delta_ratio=10.0)
"""Short chains, so runs of a few snapshots cut them."""
INTERVAL_MS = 10_000


class Pipeline:
    """The participants of one execution: source -> keyed state -> transactional sink."""

    def __init__(
        self, store: FakeSnapshotStore, database: TransactionalDatabase, export_only_log: set[int]
    ) -> None:
        self.source = FakeSource()
        self.state = FakeKeyedState(store)
        self.sink = FakeTransactionalSink(database, export_only_log)

    @property
    def participants(self) -> list[FakeSource | FakeKeyedState | FakeTransactionalSink]:
        return [self.source, self.state, self.sink]

    def process(self, count: int) -> None:
        items = self.source.emit(count)
        self.state.update(items)
        self.sink.write(items)


class Cluster:
    """Everything that outlives a driver process: record store, snapshot maps, database."""

    def __init__(self, job: JobIdentity = JOB) -> None:
        self.job = job
        self.violations: list[str] = []
        self.faults = FaultPlan()
        self.clock = FakeClock()
        self.records = RecordDatabase(self.faults, self.violations)
        self.snapshots = FakeSnapshotStore(self.records, self.faults, self.violations)
        self.database = TransactionalDatabase(self.violations)
        self.export_only_snapshots: set[int] = set()

    def start_driver(
        self,
        failpoints: Failpoints | None = None,
        suspend_on_failure: bool = False,
        initial_snapshot_name: str | None = None,
        shape: PipelineShape | None = None,
        split_brain_protection: bool = False,
        durable: FakeSnapshotStore | None = None,
        accepted_older_copy: tuple[int, int] | None = None,
        initial_snapshot_identity: ExportIdentity | None = None,
        snapshot_keys: SnapshotKeys | None = None,
    ) -> Driver:
        """Starts a new execution (a new driver process), fencing off the previous ones."""
        pipeline = Pipeline(self.snapshots, self.database, self.export_only_snapshots)
        records = self.records.start_execution()
        coordinator = SnapshotCoordinator(
            CoordinatorConfig(
                self.job,
                INTERVAL_MS,
                suspend_on_failure,
                initial_snapshot_name,
                shape,
                split_brain_protection,
                accepted_older_copy=accepted_older_copy,
                initial_snapshot_identity=initial_snapshot_identity,
                snapshot_keys=snapshot_keys,
            ),
            records,
            self.snapshots,
            pipeline.participants,
            self.clock,
            failpoints,
            durable=durable,
        )
        return Driver(coordinator, pipeline, records)


@dataclass
class Driver:
    """One driver process: its coordinator, its participants, its fenced record store."""

    coordinator: SnapshotCoordinator
    pipeline: Pipeline
    records: FakeRecordStore


def running(cluster: Cluster, **options: Any) -> Driver:
    """A new execution of ``cluster``'s job (``start_driver`` options) that has restored."""
    driver = cluster.start_driver(**options)
    driver.coordinator.restore()
    assert driver.coordinator.state is CoordinatorState.RUNNING
    return driver


def snapshot(driver: Driver, items: int = 3) -> int:
    """Processes ``items`` items, then takes a successful automatic snapshot; its id."""
    driver.pipeline.process(items)
    outcome = driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    assert outcome.successful
    return outcome.snapshot_id
