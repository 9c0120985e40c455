"""The snapshot protocol on a real 3-member Hazelcast cluster (issue 4's acceptance).

The protocol core is proven against fakes by the property tests; these tests prove that its
assumptions about the real store hold: a hung backup member really fails a snapshot, one lost
member never loses the restore point, two lost members are caught at restore, and the record
written through the real Kubernetes API decides what happens after an indeterminate write.

The participants here are deliberately small (bytes per state partition, a sink whose
transactions live in memory) so that each test can state exactly what must have been
restored, committed or rolled back.
"""

from __future__ import annotations

import itertools
import os
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes import client

from snapshot_protocol import (
    ChunkDescriptor,
    ChunkKey,
    ChunkReader,
    ChunkWriter,
    CoordinatorConfig,
    CoordinatorState,
    JobIdentity,
    RecordStore,
    SnapshotCoordinator,
    SnapshotCorrupted,
    SnapshotRef,
    SnapshotStoreError,
    TerminationMode,
    ZombieExecution,
)
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshotjob_contract.record import export_map_name, snapshot_map_name
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.kube_record_store import KubernetesRecordStore
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.snapshotjob_crd import create_job, install_crd

pytestmark = pytest.mark.integration

PARTITIONS = 32  # enough chunks that every member owns and backs up some of them


def clock() -> int:
    return int(time.time() * 1000)


class PartitionedState:
    """Keyed state as bytes per partition, one chunk per partition, like the Spark state."""

    def __init__(self, name: str = "state") -> None:
        self.name = name
        self.partitions: dict[int, bytes] = {}
        self.before_save: Callable[[], None] = lambda: None
        self.after_save: Callable[[], None] = lambda: None

    def set_generation(self, generation: int) -> None:
        self.partitions = {
            p: f"gen={generation};partition={p};".encode() + os.urandom(64)
            for p in range(PARTITIONS)
        }

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        self.before_save()
        try:
            return writer.write_many([(p, 0, data, 1) for p, data in self.partitions.items()])
        finally:
            self.after_save()

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        return None

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        self.partitions = {}
        if snapshot is None:
            return
        for key in snapshot.chunk_keys:
            self.partitions[key.partition] = snapshot.read(reader, key)


class TransactionalSink:
    """A sink with one prepared transaction per snapshot; its ledger outlives executions.

    The ledger stands for the external system (PostgreSQL in the runtime): it is shared by
    the sink objects of successive executions.
    """

    name = "sink"

    def __init__(self, ledger: dict[int, str]) -> None:
        self.ledger = ledger  # snapshot id -> prepared | committed | rolled back

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        if export_only:
            return [writer.write(0, 0, b"no transaction", 0)]
        self.ledger[snapshot_id] = "prepared"
        return [writer.write(0, 0, str(snapshot_id).encode(), 0)]

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        if self.ledger.get(snapshot_id) == "prepared":
            self.ledger[snapshot_id] = "committed" if success else "rolled back"

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        named: int | None = None
        if snapshot is not None and snapshot.chunk_keys:
            data = snapshot.read(reader, snapshot.chunk_keys[0])
            named = int(data) if data.isdigit() else None
        for snapshot_id, state in self.ledger.items():
            if state == "prepared" and snapshot_id <= through_snapshot_id:
                self.ledger[snapshot_id] = "committed" if snapshot_id == named else "rolled back"


class Job:
    """One job: its identity, record file and the ledger of its external transactions."""

    def __init__(self, tmp_path: Path, store: HazelcastSnapshotStore) -> None:
        self.identity = JobIdentity(f"it-{uuid.uuid4().hex[:10]}", "default", 1)
        self.record_path = tmp_path / "record.json"
        self.store = store
        self.ledger: dict[int, str] = {}
        self._executions = itertools.count(1)

    def execution(
        self, state: PartitionedState | None = None, records: RecordStore | None = None
    ) -> tuple[SnapshotCoordinator, PartitionedState]:
        """A new execution (new fencing token) that has run the restore procedure."""
        state = state or PartitionedState()
        if records is None:
            records = FileRecordStore.claim(self.record_path, f"exec-{next(self._executions)}")
        coordinator = SnapshotCoordinator(
            CoordinatorConfig(self.identity, snapshot_interval_ms=0),
            records,
            self.store,
            # The sink goes first, so a snapshot failing in the state still has a prepared
            # transaction for the 2nd phase to roll back.
            [TransactionalSink(self.ledger), state],
            clock,
        )
        coordinator.restore()
        return coordinator, state


def snapshot(coordinator: SnapshotCoordinator, export_name: str | None = None) -> Any:
    outcome = coordinator.take_snapshot(export_name)
    if coordinator.state is CoordinatorState.PHASE_2_PENDING:
        coordinator.finish_snapshot()
    return outcome


@pytest.fixture
def store(healthy_hazelcast: HazelcastCluster) -> Iterator[HazelcastSnapshotStore]:
    hz = connect([m.address for m in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    yield HazelcastSnapshotStore(hz)
    hz.shutdown()


@pytest.fixture
def job(tmp_path: Path, store: HazelcastSnapshotStore) -> Job:
    return Job(tmp_path, store)


def test_paused_backup_fails_the_snapshot_and_the_next_one_succeeds(
    healthy_hazelcast: HazelcastCluster, job: Job
) -> None:
    cluster = healthy_hazelcast
    paused = 2
    coordinator, state = job.execution()
    state.set_generation(1)
    first = snapshot(coordinator)
    assert first.successful
    assert coordinator.record is not None and coordinator.record.snapshot_id == first.snapshot_id

    # Member 2 hangs while the chunks are written (after step 3's clear, which waits for every
    # partition owner). The chunks written are those owned by live members, so member 2 is a
    # backup only: their puts cannot collect its ack, which is what must fail the snapshot.
    # (A put owned by a hung member just waits for the heartbeat time-out, a different fault.)
    lookup = cluster.client()

    class WritesWhileBackupHangs(PartitionedState):
        hang = True

        def save_and_prepare(
            self, snapshot_id: int, writer: ChunkWriter, export_only: bool
        ) -> Sequence[ChunkDescriptor]:
            if not self.hang:
                return super().save_and_prepare(snapshot_id, writer, export_only)
            live_owned = [
                p
                for p in self.partitions
                if cluster.owner_index(lookup, str(writer.key(p))) != paused
            ]
            cluster.pause(paused)
            try:
                return writer.write_many([(p, 0, self.partitions[p], 1) for p in live_owned])
            finally:
                cluster.resume(paused)

    hanging = WritesWhileBackupHangs()
    hanging.partitions = state.partitions
    coordinator_with_hang, _ = job.execution(state=hanging)
    hanging.set_generation(2)
    failed = snapshot(coordinator_with_hang)

    assert not failed.successful
    assert "Indeterminate" in (failed.failure or "")
    record = coordinator_with_hang.record
    assert record is not None and record.snapshot_id == first.snapshot_id
    assert FileRecordStore(job.record_path, "reader").read().snapshot_id == first.snapshot_id
    assert job.ledger[failed.snapshot_id] == "rolled back"

    cluster.wait_cluster_safe(expected_size=3)
    hanging.hang = False
    succeeded = snapshot(coordinator_with_hang)
    assert succeeded.successful
    assert succeeded.snapshot_id > failed.snapshot_id
    assert coordinator_with_hang.record is not None
    assert coordinator_with_hang.record.snapshot_id == succeeded.snapshot_id

    _, restored = job.execution()
    assert restored.partitions == hanging.partitions


def test_indeterminate_record_write_skips_phase_2_and_overrides_graceful_suspend(
    kube_api: KubeAPI, job: Job
) -> None:
    """Taking step 7a (docs/concepts/protocol.md), with the record in a real SnapshotJob status.

    The operator asks for SUSPEND_GRACEFUL while an automatic snapshot is in its 1st phase;
    the record write of step 7 then times out on every attempt. The execution must restart
    forcefully without a 2nd phase, and the ignored suspend is reported.
    """
    api = kube_api.api_client()
    install_crd(api)
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]

    class CutOffFromApiServer(client.CustomObjectsApi):  # type: ignore[misc]
        """Once ``armed``: the next status patch reaches the server but its response is lost,
        and every request after it times out, so the driver cannot find out what happened."""

        armed = False
        cut_off = False

        def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            if self.cut_off:
                raise urllib3.exceptions.ReadTimeoutError(None, "/snapshotjobs", "Read timed out")
            return super().get_namespaced_custom_object(*args, **kwargs)

        def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Any:
            if self.cut_off:
                raise urllib3.exceptions.ReadTimeoutError(None, "/status", "Read timed out")
            result = super().patch_namespaced_custom_object_status(*args, **kwargs)
            if self.armed:
                self.cut_off = True
                raise urllib3.exceptions.ReadTimeoutError(None, "/status", "Read timed out")
            return result

    objects = CutOffFromApiServer(api)
    records = KubernetesRecordStore(objects, "default", name, "exec-1", deadline_s=1.0)
    coordinator, state = job.execution(records=records)
    state.set_generation(1)
    good = snapshot(coordinator)
    assert good.successful

    state.set_generation(2)

    def suspend_requested_then_api_times_out() -> None:
        coordinator.request_termination(TerminationMode.SUSPEND_GRACEFUL)
        objects.armed = True

    state.before_save = suspend_requested_then_api_times_out
    outcome = coordinator.take_snapshot()

    assert outcome.successful  # phase 1 and the validation record were fine
    assert coordinator.state is CoordinatorState.RESTART_REQUIRED
    termination = coordinator.execution_end
    assert termination is not None
    assert termination.mode is TerminationMode.RESTART_FORCEFUL
    assert termination.ignored_request is not None
    assert termination.ignored_request.mode is TerminationMode.SUSPEND_GRACEFUL
    assert job.ledger[outcome.snapshot_id] == "prepared", "phase 2 must not have run"

    # The response was lost, but the API server applied the write: the restart finds the
    # record pointing at the new snapshot, restores it and commits its transaction.
    assert "Could not determine whether the record write" in termination.reason
    fresh = KubernetesRecordStore(client.CustomObjectsApi(api), "default", name, "exec-1")
    assert fresh.read().snapshot_id == outcome.snapshot_id
    _, restored = job.execution(records=fresh)
    assert restored.partitions == state.partitions
    assert job.ledger[outcome.snapshot_id] == "committed"
    api.close()


def test_losing_one_member_never_loses_the_last_good_snapshot(
    healthy_hazelcast: HazelcastCluster, job: Job
) -> None:
    coordinator, state = job.execution()
    state.set_generation(7)
    assert snapshot(coordinator).successful

    healthy_hazelcast.kill(0)
    healthy_hazelcast.wait_cluster_safe(expected_size=2)

    _, restored = job.execution()
    assert restored.partitions == state.partitions


def test_losing_two_members_is_detected_at_restore(
    healthy_hazelcast: HazelcastCluster, job: Job
) -> None:
    coordinator, state = job.execution()
    state.set_generation(3)
    taken = snapshot(coordinator)
    assert taken.successful

    # Backup count 1 cannot survive two crashes at once: partitions whose owner and backup
    # were both on the killed members are gone.
    healthy_hazelcast.kill(1)
    healthy_hazelcast.kill(2)
    healthy_hazelcast.wait_cluster_safe(expected_size=1)

    restarted = SnapshotCoordinator(
        CoordinatorConfig(job.identity, snapshot_interval_ms=0),
        FileRecordStore.claim(job.record_path, "exec-after-loss"),
        job.store,
        [TransactionalSink(job.ledger), PartitionedState()],
        clock,
    )
    with pytest.raises(SnapshotCorrupted) as corrupted:
        restarted.restore()
    message = str(corrupted.value)
    assert taken.map_name in message
    assert str(taken.snapshot_id) in message
    assert "missing" in message
    assert "initialSnapshotName" in message
    assert restarted.state is CoordinatorState.FAILED


def test_restore_reads_the_right_map_after_20_alternating_snapshots(job: Job) -> None:
    coordinator, state = job.execution()
    indexes = []
    for generation in range(20):
        state.set_generation(generation)
        assert snapshot(coordinator).successful
        assert coordinator.record is not None
        indexes.append(coordinator.record.data_map_index)
    assert indexes == [i % 2 for i in range(20)] or indexes == [(i + 1) % 2 for i in range(20)]

    record = FileRecordStore(job.record_path, "reader").read()
    _, restored = job.execution()
    assert restored.partitions == state.partitions
    assert restored.partitions[0].startswith(b"gen=19;")
    # The other map was cleared after the last snapshot (docs/concepts/protocol.md, taking step 8a).
    other = snapshot_map_name(
        job.identity.uid, 1 - record.data_map_index, job.identity.backup_count
    )
    assert job.store.latest_snapshot_id(other) is None


def test_export_only_snapshot_is_never_the_restore_point_a_terminal_export_is(
    job: Job,
) -> None:
    coordinator, state = job.execution()
    state.set_generation(1)
    automatic = snapshot(coordinator)
    state.set_generation(2)
    export_only = snapshot(coordinator, export_name="before-upgrade")
    assert export_only.successful
    assert export_only.map_name == export_map_name("default", "before-upgrade")
    assert coordinator.record is not None
    assert coordinator.record.snapshot_id == automatic.snapshot_id
    assert job.ledger.get(export_only.snapshot_id) is None  # export-only prepares nothing

    _, restored = job.execution()
    assert restored.partitions[0].startswith(b"gen=1;")

    # A terminal exported snapshot (cancel with export) does become the restore point.
    coordinator, state = job.execution()
    state.set_generation(3)
    coordinator.request_termination(TerminationMode.CANCEL_GRACEFUL, export_name="final")
    assert coordinator.state is CoordinatorState.CANCELLED
    record = FileRecordStore(job.record_path, "reader").read()
    assert record.exported_snapshot_name == "final"
    _, restored = job.execution()
    assert restored.partitions[0].startswith(b"gen=3;")


def test_zombie_driver_writes_are_refused(job: Job) -> None:
    zombie, state = job.execution()
    state.set_generation(1)
    taken = snapshot(zombie)
    _, _ = job.execution()  # a new execution claims the record

    state.set_generation(2)
    with pytest.raises(ZombieExecution):
        zombie.take_snapshot()
    assert zombie.state is CoordinatorState.FENCED
    record = FileRecordStore(job.record_path, "reader").read()
    assert record.snapshot_id == taken.snapshot_id
    # Step 2 refused the new ongoing id, so no chunk of it was ever written.
    assert record.ongoing_snapshot_id == taken.snapshot_id


def test_copy_into_an_export_is_validated(job: Job) -> None:
    coordinator, state = job.execution()
    state.set_generation(5)
    taken = snapshot(coordinator)

    target = export_map_name("default", f"copy-{uuid.uuid4().hex[:6]}")
    copied = job.store.copy_snapshot(taken.map_name, target, taken.snapshot_id)
    assert copied.num_chunks == PARTITIONS + 1

    # A source that lost a chunk is refused, naming the snapshot, instead of being copied.
    lost = copied.chunk_keys[0]
    job.store._map(taken.map_name).delete(str(lost)).result()
    with pytest.raises(SnapshotCorrupted, match=str(taken.snapshot_id)):
        job.store.copy_snapshot(taken.map_name, target + "-2", taken.snapshot_id)


def test_an_automatic_snapshot_costs_two_status_writes(kube_api: KubeAPI, job: Job) -> None:
    """The record's price per snapshot in API calls: steps 2 and 7, one read before each."""
    api = kube_api.api_client()
    install_crd(api)
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]

    class CountingObjects(client.CustomObjectsApi):  # type: ignore[misc]
        reads = 0
        writes = 0

        def get_namespaced_custom_object(self, *args: Any, **kwargs: Any) -> Any:
            self.reads += 1
            return super().get_namespaced_custom_object(*args, **kwargs)

        def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Any:
            self.writes += 1
            return super().patch_namespaced_custom_object_status(*args, **kwargs)

    objects = CountingObjects(api)
    records = KubernetesRecordStore(objects, "default", name, "exec-1")
    coordinator, state = job.execution(records=records)
    state.set_generation(1)
    before = (objects.reads, objects.writes)
    for _ in range(5):
        assert snapshot(coordinator).successful
    reads, writes = objects.reads - before[0], objects.writes - before[1]
    print(f"API calls per automatic snapshot: writes={writes / 5} reads={reads / 5}")
    assert (reads, writes) == (10, 10)
    api.close()


def test_a_store_whose_client_lost_the_cluster_raises_store_errors(
    healthy_hazelcast: HazelcastCluster,
) -> None:
    """Every operation of a client that lost its connections fails as SnapshotStoreError.

    The protocol fails a snapshot on a store error and goes on; any other exception ends the
    driver with exit 1. A driver stopped longer than the heartbeat timeout (a zombie, a
    frozen Pod) comes back to a client that dropped its connections and may have shut down,
    and must then be fenced at its next record write, not crash on a raw Hazelcast error.
    """
    hz = connect([m.address for m in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    store = HazelcastSnapshotStore(hz)
    hz.shutdown()
    name = f"lost-{uuid.uuid4().hex[:6]}"
    key = ChunkKey(1, "state", 0, 0)
    operations: list[tuple[str, Callable[[], object]]] = [
        ("discard", lambda: store.discard(name, 3)),
        ("put_chunks", lambda: store.put_chunks(name, [(key, b"x")])),
        ("read_chunks", lambda: store.read_chunks(name, [key])),
        ("latest_snapshot_id", lambda: store.latest_snapshot_id(name)),
        ("missing_chunks", lambda: store.missing_chunks(name, [key])),
        ("get_validation_record", lambda: store.get_validation_record(name, 1)),
    ]
    raised: dict[str, str] = {}
    for what, operation in operations:
        try:
            operation()
        except SnapshotStoreError:
            raised[what] = "SnapshotStoreError"
        except Exception as error:
            raised[what] = type(error).__name__
        else:
            raised[what] = "nothing"
    assert raised == {what: "SnapshotStoreError" for what, _ in operations}
