"""The executor: actions performed in order, under the optimistic lock, stopping on a conflict.

The executor gets in-memory gateways (:mod:`tests.unit.operator.fake_gateways`: a job, its
Pods, a resourceVersion that moves on every write), so these tests pin what the integration
tests cannot provoke on purpose: a status write that loses the lock must stop the action list
before the Pod of the new execution is created, and every write of one decision is locked on
the previous one.
"""

from __future__ import annotations

import copy
import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from snapshot_operator import executing, observing
from snapshot_operator.executing import (
    RETRY_STALE_SECONDS,
    Outcome,
    Seen,
    Services,
    read_early,
    reconcile_once,
)
from snapshot_operator.gateways import StoreOperationFailed
from snapshot_operator.reconcile import PatchStatus, observe
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshot_operator.settings import OperatorSettings
from snapshotjob_contract import DurableStorageSpec, all_snapshot_map_names
from tests.unit.operator.fake_gateways import FakeDurable, FakeKubernetes, FakeStore
from tests.unit.operator.specs import VALID_SPEC


@pytest.fixture
def kube() -> FakeKubernetes:
    return FakeKubernetes(VALID_SPEC)


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def services(kube: FakeKubernetes, store: FakeStore) -> Services:
    settings = OperatorSettings(
        namespaces=("default",), store_members=("hz-0:5701",), store_cluster_name="store"
    )
    return Services(kube=kube, store=store, settings=settings)


def run(services: Services) -> Outcome:
    return reconcile_once(services, "default", "wordcount")


def events(kube: FakeKubernetes) -> list[str]:
    """The reasons of the job's Events, in the order they were emitted."""
    return [detail for kind, detail in kube.log if kind == "event"]


def test_the_execution_is_written_before_its_pod_is_created(
    kube: FakeKubernetes, services: Services
) -> None:
    outcome = run(services)
    kinds = kube.kinds()
    assert kinds.index("patch") < kinds.index("identity") < kinds.index("create")
    (pod,) = kube.pods.values()
    assert pod["metadata"]["labels"][LABEL_EXECUTION_ID] == kube.status["execution"]["id"]
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env["SJ_HAZELCAST_ADDRESS"] == "hz-0:5701"
    assert env["SJ_HAZELCAST_CLUSTER"] == "store"
    assert events(kube) == ["ExecutionStarted"]
    assert 0 < outcome.requeue_after <= services.settings.decision.resync_seconds


def test_a_lost_lock_stops_the_actions_before_the_pod(
    kube: FakeKubernetes, services: Services
) -> None:
    kube.conflicts = 1
    outcome = run(services)
    assert kube.kinds() == ["conflict"]
    assert kube.pods == {}
    assert outcome.requeue_after == executing.RETRY_STALE_SECONDS
    run(services)
    assert len(kube.pods) == 1, "the next reconcile decides again and starts the execution"


def test_the_writes_of_one_decision_are_chained_on_their_versions(
    kube: FakeKubernetes, services: Services
) -> None:
    run(services)
    (pod,) = kube.pods
    kube.set_pod(pod, "Running")
    run(services)
    assert kube.status["phase"] == "STARTING", "the Pod runs, the pipeline not yet"
    kube.report_pipeline()
    run(services)
    assert kube.status["phase"] == "RUNNING"
    assert kube.job is not None
    kube.job["spec"]["suspend"] = True
    kube.job["metadata"]["generation"] = 2
    kube.log.clear()
    read_version = kube.job["metadata"]["resourceVersion"]
    run(services)
    patches = [entry for kind, entry in kube.log if kind == "patch"]
    # One request: the phase and the request to the driver touch different fields.
    ((version, fields),) = patches
    assert version == read_version
    assert "phase" in fields and "termination" in fields
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL"
    assert kube.status["phase"] == "COMPLETING"

    # Writes that cannot share a request are chained: each locked on the one before.
    raw = kube.read_job("default", "wordcount")
    assert raw is not None
    observation = observe(raw, [], {}, datetime.now(UTC))
    kube.log.clear()
    executing._perform(
        services,
        observation,
        raw,
        dict(raw.get("status") or {}),
        (PatchStatus({"message": "first"}), PatchStatus({"message": "second"})),
    )
    (first_version, _), (second_version, _) = [e for k, e in kube.log if k == "patch"]
    assert int(second_version) == int(first_version) + 1
    assert kube.status["message"] == "second"


def test_a_suspended_job_exports_by_a_validated_copy(
    kube: FakeKubernetes, services: Services, store: FakeStore
) -> None:
    assert kube.job is not None
    kube.job["spec"]["suspend"] = True
    existing = {
        "name": "older",
        "snapshotId": 1,
        "numBytes": 5,
        "createdAt": "2026-01-01T00:00:00Z",
        "terminal": False,
    }
    kube.status.update(
        {
            "phase": "SUSPENDED",
            "observedGeneration": 1,
            "executionRecord": {
                "snapshotId": 4,
                "dataMapIndex": 1,
                "dataMapBackupCount": 3,
                "ongoingSnapshotId": 4,
            },
            "exportedSnapshots": [existing],
        }
    )
    kube.job["spec"]["exportSnapshot"] = {"name": "cold"}
    kube.job["metadata"]["generation"] = 2
    run(services)
    assert store.copies == [
        # The restore point's map is named by the record's backup count, not the spec's.
        {"source": "__sj.b3.snapshot.uid-1.1", "target": "__sj.export.default.cold", "id": 4}
    ]
    assert [entry["name"] for entry in kube.status["exportedSnapshots"]] == ["older", "cold"]
    assert kube.status["exportedSnapshots"][1]["numBytes"] == 123
    run(services)
    assert kube.status["phase"] == "SUSPENDED"
    assert len(store.copies) == 1, "a listed export is not copied again"


INSTALLATION_STORAGE = DurableStorageSpec(bucket="snapshots", credentials_secret="snapshots-s3")


@pytest.mark.parametrize(
    ("job_storage", "failure", "location"),
    [
        (None, None, "s3://snapshots/__sj.export.default.cold/4"),
        (INSTALLATION_STORAGE.to_json(), None, "s3://snapshots/__sj.export.default.cold/4"),
        (
            {**INSTALLATION_STORAGE.to_json(), "snapshotCopyIntervalSeconds": 30},
            None,
            "s3://snapshots/__sj.export.default.cold/4",
        ),
        ({"bucket": "team-a", "credentialsSecret": "team-a-s3"}, None, None),
        (None, StoreOperationFailed("SnapshotStoreError", "PUT refused"), None),
    ],
    ids=[
        "installation-storage",
        "same-storage-in-the-spec",
        "same-bucket-other-interval",
        "jobs-own-bucket",
        "copy-failed",
    ],
)
def test_a_suspended_jobs_export_is_copied_to_the_installations_storage(
    kube: FakeKubernetes,
    services: Services,
    job_storage: dict[str, Any] | None,
    failure: Exception | None,
    location: str | None,
) -> None:
    """The operator's own export gets a durable copy where it has the credentials; a copy that
    could not be made leaves the export listed without a location, as a driver's does."""
    durable = FakeDurable(INSTALLATION_STORAGE)
    durable.failures = [failure] if failure else []
    services = dataclasses.replace(services, durable=durable)
    assert kube.job is not None
    kube.job["spec"] |= {"suspend": True, "exportSnapshot": {"name": "cold"}}
    if job_storage is not None:
        kube.job["spec"]["durableStorage"] = job_storage
    kube.job["metadata"]["generation"] = 2
    kube.status.update(
        {
            "phase": "SUSPENDED",
            "observedGeneration": 1,
            "executionRecord": {"snapshotId": 4, "dataMapIndex": 1, "ongoingSnapshotId": 4},
        }
    )

    run(services)

    (exported,) = kube.status["exportedSnapshots"]
    assert exported["name"] == "cold"
    assert exported.get("durableLocation") == location
    expected_copies = (
        []
        if job_storage and job_storage["bucket"] == "team-a"
        else [("__sj.export.default.cold", 4)]
    )
    assert durable.copies == expected_copies


def test_a_failed_copy_is_recorded_and_retried_then_given_up(
    kube: FakeKubernetes, services: Services, store: FakeStore
) -> None:
    assert kube.job is not None
    kube.job["spec"]["suspend"] = True
    kube.status.update(
        {
            "phase": "SUSPENDED",
            "observedGeneration": 1,
            "executionRecord": {"snapshotId": 4, "dataMapIndex": 1, "ongoingSnapshotId": 4},
        }
    )
    kube.job["spec"]["exportSnapshot"] = {"name": "cold"}
    kube.job["metadata"]["generation"] = 2
    store.failures = [
        StoreOperationFailed("SnapshotStoreError", "put indeterminate"),
        StoreOperationFailed(
            "SnapshotCorrupted", "map=__sj.export.default.cold snapshot=4 validation record missing"
        ),
        StoreOperationFailed("SnapshotStoreError", "put indeterminate again"),
    ]
    clock = {"now": datetime(2026, 11, 21, 12, 0, tzinfo=UTC)}
    services = dataclasses.replace(services, clock=lambda: clock["now"])

    first = run(services)

    failure = kube.status["exportFailure"]
    assert (failure["name"], failure["attempts"]) == ("cold", 1)
    assert "put indeterminate" in failure["message"]
    assert kube.status["phase"] == "SUSPENDED_EXPORTING_SNAPSHOT"
    assert 0 < first.requeue_after <= services.settings.decision.export_retry_seconds
    run(services)
    assert len(store.copies) == 1, "waits for the backoff"
    degraded = next(c for c in kube.status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ExportFailed" and "name=cold" in degraded["message"]

    for attempts in (2, 3):
        clock["now"] += timedelta(minutes=5)
        run(services)
        assert kube.status["exportFailure"]["attempts"] == attempts
    assert kube.status["exportFailure"]["message"].endswith("put indeterminate again")
    clock["now"] += timedelta(minutes=5)
    run(services)

    assert len(store.copies) == 3
    assert kube.status["phase"] == "SUSPENDED"
    assert events(kube) == [
        "ExportCopyStarted",
        "ExportFailed",  # attempt 1 failed, copying again
        "ExportFailed",  # attempt 2 failed, copying again
        "ExportFailed",  # attempt 3 failed, giving up until exportSnapshot.name changes
    ]
    degraded = next(c for c in kube.status["conditions"] if c["type"] == "Degraded")
    assert "gave up" in degraded["message"]


QUOTA = 'pods "wordcount-driver-1" is forbidden: exceeded quota: no-pods, limited: pods=0'


def _degraded(kube: FakeKubernetes) -> dict[str, str]:
    return next(c for c in kube.status["conditions"] if c["type"] == "Degraded")


@pytest.mark.parametrize("kind", ["Pod", "ServiceAccount"])
def test_a_refused_create_is_reported_once_and_retried_with_the_same_execution(
    kube: FakeKubernetes, services: Services, kind: str
) -> None:
    kube.refused[kind] = QUOTA
    clock = {"now": datetime(2026, 11, 21, 12, 0, tzinfo=UTC)}
    services = dataclasses.replace(services, clock=lambda: clock["now"])

    # Each status write wakes the daemon at once: what a refusal used to turn into a loop.
    for _ in range(20):
        run(services)

    patches = kube.kinds().count("patch")
    assert patches <= 3, f"status written {patches} times for one refusal"
    assert kube.status["phase"] == "STARTING"
    execution = kube.status["execution"]
    assert execution["attempt"] == 1, "no new execution per failed create"
    failure = kube.status["startFailure"]
    assert failure["executionId"] == execution["id"]
    assert failure["attempts"] == 1 and failure["object"].startswith(f"{kind}/")
    assert QUOTA in failure["message"] and "status=403" in failure["message"]
    degraded = _degraded(kube)
    assert (degraded["status"], degraded["reason"]) == ("True", "CreateFailed")
    assert QUOTA in degraded["message"]
    assert events(kube) == ["CreateFailed"]

    clock["now"] += timedelta(seconds=10)  # the restart backoff
    for _ in range(5):
        run(services)
    assert kube.status["startFailure"]["attempts"] == 2
    assert kube.status["execution"] == execution
    assert events(kube) == ["CreateFailed"], "reported once, not per attempt"

    del kube.refused[kind]
    clock["now"] += timedelta(seconds=20)
    run(services)
    run(services)

    assert list(kube.pods) == [execution["driverPod"]]
    pod = kube.pods[execution["driverPod"]]
    assert pod["metadata"]["labels"][LABEL_EXECUTION_ID] == execution["id"]
    assert kube.status["execution"] == execution
    assert "startFailure" not in kube.status
    assert _degraded(kube)["status"] == "False"
    assert events(kube) == ["CreateFailed", "ExecutionStarted"]


def test_refused_creates_end_in_failed_until_the_spec_changes(
    kube: FakeKubernetes, services: Services
) -> None:
    assert kube.job is not None
    kube.refused["Pod"] = QUOTA
    clock = {"now": datetime(2026, 11, 21, 12, 0, tzinfo=UTC)}
    services = dataclasses.replace(services, clock=lambda: clock["now"])
    limit = services.settings.decision.start_attempts

    for _ in range(limit * 3):
        run(services)
        clock["now"] += timedelta(minutes=10)

    assert kube.kinds().count("refused") == limit
    assert kube.status["phase"] == "FAILED"
    assert kube.status["lastFailure"]["reason"] == "CreateFailed"
    assert QUOTA in kube.status["lastFailure"]["message"]
    assert _degraded(kube)["reason"] == "CreateFailed"
    assert events(kube) == ["CreateFailed", "RestartLimitReached"]

    del kube.refused["Pod"]
    kube.job["spec"]["snapshotIntervalSeconds"] = 20
    kube.job["metadata"]["generation"] = 2
    run(services)

    assert kube.status["execution"]["attempt"] == 2
    assert list(kube.pods) == [kube.status["execution"]["driverPod"]]
    assert "startFailure" not in kube.status


def test_deletion_destroys_the_maps_then_releases_the_finalizer(
    kube: FakeKubernetes, services: Services, store: FakeStore
) -> None:
    run(services)
    (pod,) = kube.pods
    kube.set_pod(pod, "Running")
    assert kube.job is not None
    kube.job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    first = run(services)
    assert not first.finalizer_removable, "the driver may still run"
    assert kube.pods == {}
    # Its version as read before the deletion is no view to stand for a read of it after.
    assert first.seen is not None and first.seen.driver_pod == pod
    assert first.seen.driver_pod_version is None
    second = run(services)
    assert second.finalizer_removable
    # Every name the job's maps may have had, whatever backup counts it ran with.
    assert store.destroyed == list(all_snapshot_map_names("uid-1"))


def test_a_job_that_is_gone_ends_the_loop(kube: FakeKubernetes, services: Services) -> None:
    kube.job = None
    assert run(services).gone


def _running_job(kube: FakeKubernetes, services: Services) -> str:
    """Runs the job to RUNNING; returns its driver Pod's name."""
    run(services)
    (pod,) = kube.pods
    kube.set_pod(pod, "Running")
    run(services)
    kube.report_pipeline()
    run(services)
    assert kube.status["phase"] == "RUNNING"
    return pod


def test_a_status_only_decision_reads_the_current_driver_by_name_and_others_cached(
    kube: FakeKubernetes, services: Services
) -> None:
    pod = _running_job(kube, services)
    assert kube.job is not None
    kube.job["spec"]["suspend"] = True
    kube.job["metadata"]["generation"] = 2
    # The watch cache is behind: it has yet to show the driver at all.
    kube.cached_pods = {}
    kube.pod_lists.clear()
    kube.log.clear()
    run(services)
    assert kube.pod_lists == ["cached"], "a termination request needs no consistent list"
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL"
    assert "create" not in kube.kinds(), "the driver read by name is seen, not taken for lost"
    assert pod in kube.pods


def test_a_start_is_decided_again_on_a_consistent_list(
    kube: FakeKubernetes, services: Services
) -> None:
    # A Pod of the job runs that the watch cache does not show yet (one of an execution the
    # status no longer names): the first look would start a driver next to it.
    uid = kube.job["metadata"]["uid"] if kube.job else ""
    kube.pods["wordcount-driver-0"] = {
        "metadata": {
            "name": "wordcount-driver-0",
            "labels": {"snapshotjob.io/job-uid": uid, LABEL_EXECUTION_ID: "older"},
        },
        "status": {"phase": "Running"},
    }
    kube.cached_pods = {}
    run(services)
    assert kube.pod_lists == ["cached", "consistent"]
    assert "create" not in kube.kinds(), "the consistent list shows the running Pod"


def _suspend(kube: FakeKubernetes) -> None:
    assert kube.job is not None
    kube.job["spec"]["suspend"] = True
    kube.job["metadata"]["generation"] = 2


def test_a_reconcile_says_which_driver_it_left_the_status_naming(
    kube: FakeKubernetes, services: Services
) -> None:
    outcome = run(services)
    (pod,) = kube.pods
    # The Pod was created by this reconcile: the status it read named no driver yet. The
    # version is its last write's, the one the watch must show before it stands for a read.
    assert kube.job is not None
    version = kube.job["metadata"]["resourceVersion"]
    assert version != "1"
    assert outcome.seen == Seen("uid-1", pod, ("hz-0:5701",), version)
    assert outcome.seen.driver_pod_version is None, "a reconcile that created Pods knows none"


def test_the_reads_the_last_reconcile_lets_guess_are_taken_not_made_again(
    kube: FakeKubernetes, services: Services, store: FakeStore
) -> None:
    pod = _running_job(kube, services)
    seen = run(services).seen
    assert kube.job is not None
    assert seen == Seen(
        "uid-1",
        pod,
        ("hz-0:5701",),
        kube.job["metadata"]["resourceVersion"],
        kube.pods[pod]["metadata"]["resourceVersion"],
    )
    _suspend(kube)
    kube.pod_reads.clear()
    kube.pod_lists.clear()
    store.health_reads.clear()
    early = read_early(services, "default", seen)
    outcome = reconcile_once(services, "default", "wordcount", early=early)
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL"
    assert kube.pod_reads == [pod], "the driver read with the job's read is the one used"
    assert kube.pod_lists == ["cached"]
    assert store.health_reads == [("hz-0:5701",)]
    assert outcome.seen == dataclasses.replace(
        seen, resource_version=kube.job["metadata"]["resourceVersion"]
    )


def test_a_guess_the_job_contradicts_is_read_again(
    kube: FakeKubernetes, services: Services, store: FakeStore
) -> None:
    pod = _running_job(kube, services)
    _suspend(kube)
    # Guessed from a reconcile of another job of that name, with another driver and store.
    wrong = Seen("uid-0", "wordcount-driver-9", ("hz-9:5701",))
    kube.pods["wordcount-driver-9"] = {
        "metadata": {"name": "wordcount-driver-9", "labels": {"snapshotjob.io/job-uid": "uid-0"}},
        "status": {"phase": "Failed"},
    }
    kube.pod_reads.clear()
    kube.pod_lists.clear()
    kube.log.clear()
    store.health_reads.clear()
    reconcile_once(services, "default", "wordcount", early=read_early(services, "default", wrong))
    assert kube.pod_reads == ["wordcount-driver-9", pod]
    assert kube.pod_lists == ["cached", "cached"]
    assert store.health_reads == [("hz-9:5701",), ("hz-0:5701",)]
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL", "decided on the job's driver"
    assert "create" not in kube.kinds()


class _RecordingReads(ThreadPoolExecutor):
    """Runs each read at once, in the caller's thread, and records the order of submission."""

    def __init__(self) -> None:
        super().__init__(max_workers=1)
        self.submitted: list[str] = []

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Future[Any]:
        self.submitted.append(fn.__name__)
        future: Future[Any] = Future()
        future.set_result(fn(*args, **kwargs))
        return future


def test_the_early_reads_start_with_the_slowest_the_drivers_get(
    kube: FakeKubernetes, services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = _RecordingReads()
    monkeypatch.setattr(observing, "READS", reads)
    read_early(services, "default", Seen("uid-1", "wordcount-driver-1", ("hz-0:5701",)))
    assert reads.submitted == ["read_pod", "read_health", "list_driver_pods"]


def test_a_watched_job_older_than_the_api_s_loses_the_status_write_s_lock(
    kube: FakeKubernetes, services: Services
) -> None:
    _running_job(kube, services)
    _suspend(kube)
    watched = copy.deepcopy(kube.job)
    kube.report_pipeline()  # the driver writes after the watch delivered the job
    outcome = reconcile_once(services, "default", "wordcount", job=watched)
    assert ("conflict", watched["metadata"]["resourceVersion"]) in kube.log
    assert "termination" not in kube.status
    assert outcome.requeue_after == RETRY_STALE_SECONDS
    assert outcome.seen is not None and outcome.seen.resource_version is None
    # The next reconcile reads the job (it is not handed one) and requests the termination.
    run(services)
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL"


def test_a_decision_that_acts_on_pods_is_made_again_on_a_read_not_the_watched_job(
    kube: FakeKubernetes, services: Services
) -> None:
    watched = copy.deepcopy(kube.job)
    _suspend(kube)  # the user suspended the new job; the watch has not shown it yet
    run_on_watched = reconcile_once(services, "default", "wordcount", job=watched)
    assert kube.pods == {}, "a driver was started for a job suspended before it started"
    assert "create" not in kube.kinds()
    assert run_on_watched.seen is not None


def _running_and_seen(kube: FakeKubernetes, services: Services) -> tuple[str, Seen]:
    """Runs the job to RUNNING and once more; returns its driver and what that run saw."""
    pod = _running_job(kube, services)
    seen = run(services).seen
    assert seen is not None
    return pod, seen


def test_the_driver_as_watched_stands_for_its_read_when_the_loop_hands_it(
    kube: FakeKubernetes, services: Services
) -> None:
    pod, seen = _running_and_seen(kube, services)
    assert seen.driver_pod_version == kube.pods[pod]["metadata"]["resourceVersion"]
    _suspend(kube)
    kube.pod_reads.clear()
    watched = copy.deepcopy(kube.pods[pod])
    early = read_early(services, "default", seen, watched)
    outcome = reconcile_once(services, "default", "wordcount", early=early)
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL"
    assert kube.pod_reads == [], "the watched driver was read again"
    assert (
        outcome.seen is not None
        and outcome.seen.driver_pod_version == (watched["metadata"]["resourceVersion"])
    )


def test_a_watched_pod_the_last_reconcile_did_not_name_is_not_taken(
    kube: FakeKubernetes, services: Services
) -> None:
    pod, seen = _running_and_seen(kube, services)
    other = copy.deepcopy(kube.pods[pod])
    other["metadata"]["name"] = "wordcount-driver-0"
    kube.pod_reads.clear()
    early = read_early(services, "default", seen, other)
    assert early is not None and early.driver is not None
    assert early.driver.result() == kube.pods[pod]
    assert kube.pod_reads == [pod]


def _export(name: str, phase: str, job_uid: str, snapshot_id: int) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"{name}-uid",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"jobName": "other", "origin": "User"},
        "status": {"phase": phase, "jobUid": job_uid, "snapshotId": snapshot_id},
    }


@pytest.mark.parametrize(
    ("phase", "identity"),
    [("Completed", ("0b5e-uid", "7")), ("InProgress", (None, None))],
    ids=["completed", "in-progress"],
)
def test_a_start_from_an_export_hands_the_driver_the_export_s_identity(
    store: FakeStore, phase: str, identity: tuple[str | None, str | None]
) -> None:
    kube = FakeKubernetes({**VALID_SPEC, "initialSnapshotName": "golden"})
    kube.exports = [_export("golden", phase, "0b5e-uid", 7), _export("other", "Completed", "x", 9)]
    settings = OperatorSettings(namespaces=("default",), store_members=("hz-0:5701",))
    run(Services(kube=kube, store=store, settings=settings))
    (pod,) = kube.pods.values()
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env["SJ_INITIAL_SNAPSHOT_NAME"] == "golden"
    # Only a completed export has an identity the restore can check; without one the driver
    # takes the name's highest snapshot id (snapshot_protocol/export_names.py).
    assert (env.get("SJ_INITIAL_SNAPSHOT_JOB_UID"), env.get("SJ_INITIAL_SNAPSHOT_ID")) == identity


def test_with_a_precreated_driver_account_no_rbac_is_created_and_pods_run_as_it(
    kube: FakeKubernetes, store: FakeStore
) -> None:
    """The chart's ``jobs.rbac.precreate``: the operator holds no right to create RBAC."""
    settings = OperatorSettings(
        namespaces=("default",),
        store_members=("hz-0:5701",),
        store_label="sj.store",
        driver_service_account="sj-driver",
    )
    run(Services(kube=kube, store=store, settings=settings))
    assert "identity" not in kube.kinds()
    (pod,) = kube.pods.values()
    assert pod["spec"]["serviceAccountName"] == "sj-driver"
    assert pod["metadata"]["labels"]["snapshotjob.io/store"] == "sj.store"
    args = pod["spec"]["containers"][0]["args"]
    assert "--conf=spark.kubernetes.authenticate.driver.serviceAccountName=sj-driver" in args
