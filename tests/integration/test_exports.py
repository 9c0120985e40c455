"""SnapshotJobExport objects against a real API server, Hazelcast cluster and S3 server.

The operator runs as a subprocess (``python -m snapshot_operator``) with the installation's
durable storage on the session's s3proxy and that server's credentials, as the chart gives
them. As in ``test_operator.py`` the tests play the kubelet and the driver: a suspended job's
export is a copy the operator makes itself (no driver involved), and a running job's export
with a durable copy is written the way a driver writes it (the snapshot into Hazelcast and
S3, then ``status.exportedSnapshots``). The driver's own side of durable exports is tested
with a real driver in ``test_driver_kubernetes.py``.

Deleting a job under ``deletionPolicy: Export`` (the default) keeps its state as one more
export: a suspended job's restore point copied by the operator (durable, then restored exactly
by a new job: the end of the first test), a running job's terminal export asked of its driver
(the last test). ``Destroy`` is in ``test_operator.py``.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from typing import Any

import pytest
from kubernetes import client

from snapshot_protocol.chunks import ChunkKey, validate_snapshot
from snapshot_protocol.export_names import ExportIdentity, find_export
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract import export_map_name, snapshot_map_name
from snapshotjob_contract.environment import (
    ENV_DURABLE_ACCESS_KEY_ID,
    ENV_DURABLE_SECRET_ACCESS_KEY,
    ENV_INITIAL_SNAPSHOT_ID,
    ENV_INITIAL_SNAPSHOT_JOB_UID,
    ENV_INITIAL_SNAPSHOT_NAME,
)
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.exports import EXPORT_KIND, EXPORT_PLURAL
from snapshotjob_contract.record import durable_copy_map_name
from snapshotjob_contract.resource import GROUP, VERSION
from testbed.operator_harness import WAIT, OperatorHarness
from testbed.s3 import S3Server
from tests.integration.operator_fixtures import (
    crd,
    harness,
    namespace,
    operator,
    store,
    write_snapshot,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube]

__all__ = ["crd", "harness", "namespace", "operator", "store"]


@pytest.fixture
def operator_args(s3: S3Server, s3_bucket: str) -> tuple[str, ...]:
    """The installation's durable storage on the test's bucket."""
    return (
        "--durable-bucket",
        s3_bucket,
        "--durable-endpoint",
        s3.endpoint,
        "--durable-credentials-secret",
        "snapshots-s3",
    )


@pytest.fixture
def operator_env(s3: S3Server) -> dict[str, str]:
    """The bucket's credentials, as the chart gives them to the operator from its Secret."""
    return {ENV_DURABLE_ACCESS_KEY_ID: s3.access_key, ENV_DURABLE_SECRET_ACCESS_KEY: s3.secret_key}


class Exports:
    """The user's side of SnapshotJobExport objects in the test's namespace."""

    def __init__(self, harness: OperatorHarness) -> None:
        self.harness = harness
        self.objects: Any = client.CustomObjectsApi(harness.api)
        self.namespace = harness.namespace

    def create(self, name: str, job: str, **spec: Any) -> None:
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": EXPORT_KIND,
            "metadata": {"name": name},
            "spec": {"jobName": job, **spec},
        }
        self.objects.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, EXPORT_PLURAL, body
        )

    def get(self, name: str) -> dict[str, Any] | None:
        try:
            found: dict[str, Any] = self.objects.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, EXPORT_PLURAL, name
            )
        except client.exceptions.ApiException as error:
            if error.status == 404:
                return None
            raise
        return found

    def delete(self, name: str) -> None:
        self.objects.delete_namespaced_custom_object(
            GROUP, VERSION, self.namespace, EXPORT_PLURAL, name
        )

    def wait(
        self, name: str, check: Callable[[dict[str, Any] | None], bool], what: str
    ) -> dict[str, Any] | None:
        deadline = time.monotonic() + WAIT
        while True:
            found = self.get(name)
            if check(found):
                return found
            if time.monotonic() > deadline:
                raise AssertionError(f"Export {name} never {what}: {found}")
            time.sleep(0.2)

    def wait_phase(self, name: str, phase: str) -> dict[str, Any]:
        found = self.wait(
            name, lambda e: e is not None and e.get("status", {}).get("phase") == phase, phase
        )
        assert found is not None
        return found["status"]  # type: ignore[no-any-return]


def _deletion_export(job: str, uid: str) -> str:
    """The export a deletion keeps a job's state in (``<job>-deleted-<uid prefix>``)."""
    return f"{job}-deleted-{uid.replace('-', '')[:8]}"


def _wait_gone(harness: OperatorHarness, job: str) -> None:
    deadline = time.monotonic() + WAIT
    while harness.job(job) is not None:
        assert time.monotonic() < deadline, harness.operator.process.log_tail(40)
        time.sleep(0.1)


def _write_status(harness: OperatorHarness, job: str, **fields: Any) -> None:
    """As the driver writes its status, under the lock: kopf's annotations of a deleted job's
    handler move the version between the read and the write, so a conflict is tried again."""
    for _ in range(50):
        try:
            harness.write_status(job, **fields)
            return
        except client.exceptions.ApiException as error:
            if error.status != 409:
                raise
            time.sleep(0.05)
    raise AssertionError(f"Could not write the status of {job}: conflicts")


def _ready(status: dict[str, Any]) -> dict[str, Any]:
    (condition,) = status["conditions"]
    assert condition["type"] == "Ready"
    return condition  # type: ignore[no-any-return]


def _suspended_with_snapshot(
    harness: OperatorHarness, store: HazelcastSnapshotStore, name: str, snapshot_id: int
) -> str:
    """A job suspended with a restore point of 400 bytes; returns its uid."""
    uid, running = harness.start_running(name)
    write_snapshot(store, snapshot_map_name(uid, 0, 2), uid, snapshot_id)
    harness.write_status(
        name,
        executionRecord={
            "snapshotId": snapshot_id,
            "dataMapIndex": 0,
            "dataMapBackupCount": 2,
            "ongoingSnapshotId": snapshot_id,
        },
    )
    harness.patch_spec(name, suspend=True)
    harness.wait_status(name, lambda s: "termination" in s, "the suspend request")
    harness.exit_pod(running["execution"]["driverPod"], DriverExit.TERMINATED)
    harness.wait_phase(name, "SUSPENDED")
    return uid


def test_user_export_lifecycle_and_deletion_protected_while_in_use(
    harness: OperatorHarness, store: HazelcastSnapshotStore, s3: S3Server, s3_bucket: str
) -> None:
    """Asked for by an object, taken by the job, kept while a job starts from it, disposed.

    The job is suspended, so the operator makes the export itself: a validated copy in the
    store, then a verified copy in the installation's bucket.
    """
    exports = Exports(harness)
    bucket = S3SnapshotStore(s3.client(), s3_bucket)
    archive_uid = _suspended_with_snapshot(harness, store, "archive", 3)

    exports.create("cold", "archive", disposeOnDelete=True)
    done = exports.wait_phase("cold", "Completed")
    assert (done["snapshotId"], done["numBytes"], done["terminal"]) == (3, 400, False)
    assert (_ready(done)["status"], _ready(done)["reason"]) == ("True", "ExportCompleted")
    target = export_map_name(harness.namespace, "cold")
    assert validate_snapshot(store, target, 3).num_bytes == 400
    assert done["durableLocation"] == f"s3://{s3_bucket}/{target}/3"
    assert validate_snapshot(bucket, target, 3).num_bytes == 400
    harness.wait_event("cold", "ExportCompleted")
    listed = harness.wait_status(
        "archive", lambda s: bool(s.get("exportedSnapshots")), "the export listed on the job"
    )
    assert [e["name"] for e in listed["exportedSnapshots"]] == ["cold"]

    exports.create("ghost", "no-such-job")
    pending = exports.wait(
        "ghost",
        lambda e: e is not None and "conditions" in e.get("status", {}),
        "reported",
    )
    assert pending is not None
    assert pending["status"]["phase"] == "Pending"
    assert _ready(pending["status"])["reason"] == "JobNotFound"

    # A job that starts from the export protects it: the deletion waits, the data stays.
    harness.create_job("reader", suspend=True, initialSnapshotName="cold")
    exports.delete("cold")
    harness.wait_event("cold", "ExportInUse")
    time.sleep(2)
    assert exports.get("cold") is not None, "deleted while a job names it"
    assert validate_snapshot(store, target, 3).num_bytes == 400

    harness.delete_job("reader")
    exports.wait("cold", lambda e: e is None, "went away once no job named it")
    assert store.get_validation_record(target, 3) is None, "disposeOnDelete destroyed the map"
    assert bucket.snapshot_ids(target) == [], "and the durable copy"
    forgotten = harness.wait_status(
        "archive", lambda s: not s.get("exportedSnapshots"), "the job forgot the export"
    )
    assert "exportedSnapshots" not in forgotten or forgotten["exportedSnapshots"] == []
    time.sleep(2)
    assert exports.get("cold") is None, "the operator brought a deleted export back"
    store.destroy(target)

    # Deleting the job (deletionPolicy Export, the default) keeps its state: the restore point
    # copied to an export whose object outlives the job, durable, and which a new job restores.
    kept = _deletion_export("archive", archive_uid)
    kept_map = export_map_name(harness.namespace, kept)
    harness.delete_job("archive")
    _wait_gone(harness, "archive")
    found = exports.get(kept)
    assert found is not None, "the deletion's export outlives the job"
    assert "ownerReferences" not in found["metadata"]
    assert (found["spec"]["origin"], found["spec"]["disposeOnDelete"]) == ("ExportSnapshot", True)
    status = found["status"]
    assert (status["phase"], status["snapshotId"], status["numBytes"]) == ("Completed", 3, 400)
    assert (status["jobUid"], status["terminal"]) == (archive_uid, False)
    assert status["durableLocation"] == f"s3://{s3_bucket}/{kept_map}/3"
    messages = harness.event_messages("archive", "DeletionExportKept")
    assert messages and f"exportName={kept} snapshotId=3" in messages[0], messages
    assert store.get_validation_record(snapshot_map_name(archive_uid, 0, 2), 3) is None
    # Exactly the job's state, in the store and in the bucket, as a restore resolves it.
    written = {ChunkKey(3, "counts", p, 0): bytes([p]) * 100 for p in range(4)}
    for where in (store, bucket):
        record = find_export(where, kept_map, ExportIdentity(archive_uid, 3))
        assert record is not None, where
        assert {c.key: where.read_chunk(kept_map, c.key) for c in record.chunks} == written

    revived = harness.create_job("revived", initialSnapshotName=kept)
    harness.wait_phase("revived", "STARTING")
    (pod,) = harness.pods(revived)
    env = {item.name: item.value for item in pod.spec.containers[0].env}
    assert (env[ENV_INITIAL_SNAPSHOT_NAME], env[ENV_INITIAL_SNAPSHOT_JOB_UID]) == (
        kept,
        archive_uid,
    )
    assert env[ENV_INITIAL_SNAPSHOT_ID] == "3", "the new job restores exactly that snapshot"
    store.destroy(kept_map)


def test_spec_exports_get_objects_and_retention_retires_them(
    harness: OperatorHarness, store: HazelcastSnapshotStore
) -> None:
    """spec.exportSnapshot exports become objects; maxCount retires (and disposes) the older."""
    exports = Exports(harness)
    _suspended_with_snapshot(harness, store, "nightly", 5)
    harness.patch_spec("nightly", exportPolicy={"maxCount": 1})

    harness.patch_spec("nightly", exportSnapshot={"name": "monday"})
    monday = exports.wait_phase("monday", "Completed")
    assert monday["snapshotId"] == 5
    found = exports.get("monday")
    assert found is not None
    assert (found["spec"]["origin"], found["spec"]["disposeOnDelete"]) == ("ExportSnapshot", True)

    harness.patch_spec("nightly", exportSnapshot={"name": "tuesday"})
    exports.wait_phase("tuesday", "Completed")
    exports.wait("monday", lambda e: e is None, "retired by maxCount=1")
    harness.wait_event("monday", "ExportRetired")
    assert store.get_validation_record(export_map_name(harness.namespace, "monday"), 5) is None
    tuesday = export_map_name(harness.namespace, "tuesday")
    assert validate_snapshot(store, tuesday, 5).num_bytes == 400, "the newest is kept"
    status = harness.wait_status(
        "nightly",
        lambda s: [e["name"] for e in s.get("exportedSnapshots", [])] == ["tuesday"],
        "the retired export forgotten",
    )
    assert status["phase"] == "SUSPENDED"
    store.destroy(tuesday)


def test_disposing_of_an_export_deletes_its_durable_copy(
    harness: OperatorHarness,
    store: HazelcastSnapshotStore,
    s3: S3Server,
    s3_bucket: str,
) -> None:
    """An export a driver copied to object storage: deleting its object deletes both copies.

    Plays the driver: the export's snapshot is written to Hazelcast and to the bucket as a
    driver's durable export writes it, then listed in ``status.exportedSnapshots``.
    """
    exports = Exports(harness)
    uid, _ = harness.start_running("warm")
    name = f"warm-{uuid.uuid4().hex[:6]}"
    map_name = export_map_name(harness.namespace, name)
    write_snapshot(store, map_name, uid, 7)
    bucket = S3SnapshotStore(s3.client(), s3_bucket)
    chunks = [(key, store.read_chunk(map_name, key)) for key in _keys(store, map_name, 7)]
    bucket.put_chunks(map_name, chunks)
    record = store.get_validation_record(map_name, 7)
    assert record is not None
    bucket.put_validation_record(map_name, record)
    location = f"s3://{s3_bucket}/{map_name}/7"
    exported = {
        "name": name,
        "snapshotId": 7,
        "numBytes": 400,
        "createdAt": "2026-11-24T12:00:00Z",
        "terminal": False,
        "durableLocation": location,
    }
    harness.write_status("warm", exportedSnapshots=[exported])

    created = exports.wait_phase(name, "Completed")
    assert created["durableLocation"] == location
    assert validate_snapshot(bucket, map_name, 7).num_bytes == 400

    exports.delete(name)
    exports.wait(name, lambda e: e is None, "disposed of")
    harness.wait_event(name, "ExportDisposed")
    assert bucket.snapshot_ids(map_name) == [], "the durable copy is deleted"
    assert store.get_validation_record(map_name, 7) is None


def _keys(store: HazelcastSnapshotStore, map_name: str, snapshot_id: int) -> list[Any]:
    record = store.get_validation_record(map_name, snapshot_id)
    assert record is not None
    return [chunk.key for chunk in record.chunks]


def test_deleting_a_job_deletes_its_periodic_durable_copies(
    harness: OperatorHarness,
    store: HazelcastSnapshotStore,
    s3: S3Server,
    s3_bucket: str,
) -> None:
    """A deleted job's periodic copies go with it (also the chunks of a copy that never got its
    validation record); another job's copies and an export's stay.

    Plays the driver: the copies are written to the bucket as a driver's periodic copy writes
    them (chunks, then the validation record), under the installation's durable storage.
    """
    uid, _ = harness.start_running("copied")
    neighbour_uid, _ = harness.start_running("neighbour")
    bucket = S3SnapshotStore(s3.client(), s3_bucket)
    mine, theirs = durable_copy_map_name(uid), durable_copy_map_name(neighbour_uid)
    export = export_map_name(harness.namespace, f"kept-{uid[:8]}")
    for map_name, job_uid in ((mine, uid), (theirs, neighbour_uid), (export, uid)):
        write_snapshot(store, map_name, job_uid, 5)  # A scratch map of the same name.
        bucket.put_chunks(
            map_name, [(key, store.read_chunk(map_name, key)) for key in _keys(store, map_name, 5)]
        )
        record = store.get_validation_record(map_name, 5)
        assert record is not None
        bucket.put_validation_record(map_name, record)
        store.destroy(map_name)
    # A copy cut short: its chunk is there, its validation record never came.
    bucket.put_chunks(mine, [(ChunkKey(6, "counts", 0, 0), b"\x00" * 100)])

    harness.delete_job("copied")
    # deletionPolicy Export (the default): the running driver is asked for a terminal export,
    # played here: written to the store, listed, then the driver exits as asked.
    asked = harness.wait_status(
        "copied",
        lambda s: bool((s.get("termination") or {}).get("exportName")),
        "the deletion's terminal export asked of the driver",
    )
    kept = _deletion_export("copied", uid)
    termination = asked["termination"]
    assert (termination["mode"], termination["exportName"]) == ("CANCEL_GRACEFUL", kept)
    kept_map = export_map_name(harness.namespace, kept)
    write_snapshot(store, kept_map, uid, 6)
    terminal = {
        "name": kept,
        "snapshotId": 6,
        "numBytes": 400,
        "createdAt": "2026-11-24T12:00:00Z",
        "terminal": True,
    }
    _write_status(harness, "copied", exportedSnapshots=[terminal])
    harness.exit_pod(asked["execution"]["driverPod"], DriverExit.TERMINATED)
    harness.wait_event("copied", "DurableCopiesDeleted")
    _wait_gone(harness, "copied")
    found = Exports(harness).get(kept)
    assert found is not None, "the terminal export outlives the job"
    assert (found["status"]["phase"], found["status"]["terminal"]) == ("Completed", True)
    assert validate_snapshot(store, kept_map, 6).num_bytes == 400
    store.destroy(kept_map)
    listed = s3.client().list_objects_v2(Bucket=s3_bucket, Prefix=f"{mine}/")
    assert listed.get("KeyCount", 0) == 0, listed.get("Contents")
    assert validate_snapshot(bucket, theirs, 5).snapshot_id == 5, "another job's copy stays"
    assert validate_snapshot(bucket, export, 5).snapshot_id == 5, "an export's copy stays"
    message = harness.event_messages("copied", "DurableCopiesDeleted")
    assert f"location=s3://{s3_bucket}/{mine}/ snapshotIds=5," in message[0], message
