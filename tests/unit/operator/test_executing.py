"""The executor: actions performed in order, under the optimistic lock, stopping on a conflict.

The I/O modules are replaced by an in-memory API (a job, its Pods, a resourceVersion that
moves on every write), so these tests pin what the integration tests cannot provoke on
purpose: a status write that loses the lock must stop the action list before the Pod of the
new execution is created, and every write of one decision is locked on the previous one.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import pytest
from kubernetes import client

from snapshot_operator import executing
from snapshot_operator.executing import Outcome, Runtime, reconcile
from snapshot_operator.patching import StaleObservation
from snapshot_operator.reconcile import EmitEvent, JobRef
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshot_operator.settings import OperatorSettings
from snapshot_operator.snapshot_maps import CopiedSnapshot
from spark_runtime.protocol import SnapshotCorrupted, SnapshotStoreError
from tests.unit.operator.specs import VALID_SPEC

HEALTHY = {
    "nodeState": "ACTIVE",
    "clusterState": "ACTIVE",
    "clusterSafe": True,
    "clusterSize": 3,
    "migrationQueueSize": 0,
}


class FakeMaps:
    """Snapshot map operations that record their calls."""

    def __init__(self) -> None:
        self.copies: list[dict[str, Any]] = []
        self.destroyed: list[str] = []
        self.failures: list[Exception] = []

    def copy(
        self,
        members: Sequence[str],
        cluster_name: str,
        *,
        source_map: str,
        target_map: str,
        snapshot_id: int,
    ) -> CopiedSnapshot:
        self.copies.append({"source": source_map, "target": target_map, "id": snapshot_id})
        if self.failures:
            raise self.failures.pop(0)
        return CopiedSnapshot(snapshot_id=snapshot_id, num_bytes=123)

    def destroy(self, members: Sequence[str], cluster_name: str, map_names: Sequence[str]) -> None:
        self.destroyed += map_names


class FakeAPI:
    """One SnapshotJob and its Pods, with a resourceVersion bumped by every write."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, spec: Mapping[str, Any]) -> None:
        self.job: dict[str, Any] | None = {
            "metadata": {
                "name": "wordcount",
                "namespace": "default",
                "uid": "uid-1",
                "generation": 1,
                "resourceVersion": "1",
            },
            "spec": dict(spec),
        }
        self.pods: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, Any]] = []
        self.conflicts = 0
        self.health: dict[str, Any] | None = HEALTHY
        monkeypatch.setattr(executing.fetching, "read_job", self.read_job)
        monkeypatch.setattr(executing.fetching, "list_driver_pods", self.list_pods)
        monkeypatch.setattr(executing.store_health, "read_health", lambda *_: self.health)
        monkeypatch.setattr(executing.patching, "patch_status", self.patch_status)
        monkeypatch.setattr(executing.creating, "ensure_driver_identity", self.ensure_identity)
        monkeypatch.setattr(executing.creating, "create_pod", self.create_pod)
        monkeypatch.setattr(executing.deleting, "delete_pod", self.delete_pod)
        monkeypatch.setattr(executing.eventing, "emit_event", self.emit_event)

    @property
    def status(self) -> dict[str, Any]:
        assert self.job is not None
        return cast(dict[str, Any], self.job.setdefault("status", {}))

    def _bump(self) -> str:
        assert self.job is not None
        version = str(int(self.job["metadata"]["resourceVersion"]) + 1)
        self.job["metadata"]["resourceVersion"] = version
        return version

    def read_job(self, api: object, namespace: str, name: str) -> dict[str, Any] | None:
        return copy.deepcopy(self.job)

    def list_pods(self, api: object, namespace: str, uid: str) -> list[dict[str, Any]]:
        return copy.deepcopy(list(self.pods.values()))

    def patch_status(
        self, api: object, namespace: str, name: str, version: str, patch: Mapping[str, Any]
    ) -> str:
        assert self.job is not None
        if self.conflicts:
            self.conflicts -= 1
            self.log.append(("conflict", version))
            raise StaleObservation("changed")
        if version != self.job["metadata"]["resourceVersion"]:
            self.log.append(("conflict", version))
            raise StaleObservation("stale")
        self.log.append(("patch", (version, sorted(patch))))
        for key, value in patch.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value
        return self._bump()

    def ensure_identity(self, api: object, job: JobRef) -> None:
        self.log.append(("identity", job.name))

    def create_pod(self, api: object, pod: dict[str, Any]) -> bool:
        self.log.append(("create", pod["metadata"]["name"]))
        self.pods[pod["metadata"]["name"]] = pod
        return True

    def delete_pod(self, api: object, namespace: str, name: str) -> bool:
        self.log.append(("delete", name))
        return self.pods.pop(name, None) is not None

    def emit_event(self, api: object, job: JobRef, event: EmitEvent, instance: str) -> None:
        self.log.append(("event", event.reason.value))

    def set_pod(self, name: str, phase: str, exit_code: int | None = None) -> None:
        status: dict[str, Any] = {"phase": phase}
        if exit_code is not None:
            status["containerStatuses"] = [
                {"name": "driver", "state": {"terminated": {"exitCode": exit_code}}}
            ]
        self.pods[name]["status"] = status

    def kinds(self) -> list[str]:
        return [kind for kind, _ in self.log]


@pytest.fixture
def maps() -> FakeMaps:
    return FakeMaps()


@pytest.fixture
def runtime(maps: FakeMaps) -> Runtime:
    settings = OperatorSettings(
        namespaces=("default",), store_members=("hz-0:5701",), store_cluster_name="store"
    )
    return Runtime(api=cast(client.ApiClient, None), settings=settings, maps=cast(Any, maps))


def run(runtime: Runtime) -> Outcome:
    return reconcile(runtime, "default", "wordcount")


def test_the_execution_is_written_before_its_pod_is_created(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime
) -> None:
    api = FakeAPI(monkeypatch, VALID_SPEC)
    outcome = run(runtime)
    kinds = api.kinds()
    assert kinds.index("patch") < kinds.index("identity") < kinds.index("create")
    (pod,) = api.pods.values()
    assert pod["metadata"]["labels"][LABEL_EXECUTION_ID] == api.status["execution"]["id"]
    env = {item["name"]: item.get("value") for item in pod["spec"]["containers"][0]["env"]}
    assert env["SJ_HAZELCAST_ADDRESS"] == "hz-0:5701"
    assert env["SJ_HAZELCAST_CLUSTER"] == "store"
    assert ("event", "ExecutionStarted") in api.log
    assert 0 < outcome.requeue_after <= runtime.settings.decision.resync_seconds


def test_a_lost_lock_stops_the_actions_before_the_pod(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime
) -> None:
    api = FakeAPI(monkeypatch, VALID_SPEC)
    api.conflicts = 1
    outcome = run(runtime)
    assert api.kinds() == ["conflict"]
    assert api.pods == {}
    assert outcome.requeue_after == executing.RETRY_STALE_SECONDS
    run(runtime)
    assert len(api.pods) == 1, "the next reconcile decides again and starts the execution"


def test_the_writes_of_one_decision_are_chained_on_their_versions(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime
) -> None:
    api = FakeAPI(monkeypatch, VALID_SPEC)
    run(runtime)
    (pod,) = api.pods
    api.set_pod(pod, "Running")
    run(runtime)
    assert api.status["phase"] == "RUNNING"
    assert api.job is not None
    api.job["spec"]["suspend"] = True
    api.job["metadata"]["generation"] = 2
    api.log.clear()
    run(runtime)
    patches = [entry for kind, entry in api.log if kind == "patch"]
    assert len(patches) == 2, "the phase, then the request to the driver"
    (first_version, first_fields), (second_version, second_fields) = patches
    assert int(second_version) == int(first_version) + 1
    assert "phase" in first_fields
    assert second_fields == ["termination"]
    assert api.status["termination"]["mode"] == "SUSPEND_GRACEFUL"


def test_a_suspended_job_exports_by_a_validated_copy(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime, maps: FakeMaps
) -> None:
    api = FakeAPI(monkeypatch, {**VALID_SPEC, "suspend": True})
    existing = {
        "name": "older",
        "snapshotId": 1,
        "numBytes": 5,
        "createdAt": "2026-01-01T00:00:00Z",
        "terminal": False,
    }
    api.status.update(
        {
            "phase": "SUSPENDED",
            "observedGeneration": 1,
            "executionRecord": {"snapshotId": 4, "dataMapIndex": 1, "ongoingSnapshotId": 4},
            "exportedSnapshots": [existing],
        }
    )
    assert api.job is not None
    api.job["spec"]["exportSnapshot"] = {"name": "cold"}
    api.job["metadata"]["generation"] = 2
    run(runtime)
    assert maps.copies == [
        {"source": "__sj.snapshot.uid-1.1", "target": "__sj.export.default.cold", "id": 4}
    ]
    assert [entry["name"] for entry in api.status["exportedSnapshots"]] == ["older", "cold"]
    assert api.status["exportedSnapshots"][1]["numBytes"] == 123
    run(runtime)
    assert api.status["phase"] == "SUSPENDED"
    assert len(maps.copies) == 1, "a listed export is not copied again"


def test_a_failed_copy_is_recorded_and_retried_then_given_up(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime, maps: FakeMaps
) -> None:
    api = FakeAPI(monkeypatch, {**VALID_SPEC, "suspend": True})
    api.status.update(
        {
            "phase": "SUSPENDED",
            "observedGeneration": 1,
            "executionRecord": {"snapshotId": 4, "dataMapIndex": 1, "ongoingSnapshotId": 4},
        }
    )
    assert api.job is not None
    api.job["spec"]["exportSnapshot"] = {"name": "cold"}
    api.job["metadata"]["generation"] = 2
    maps.failures = [
        SnapshotStoreError("put indeterminate"),
        SnapshotCorrupted("__sj.export.default.cold", 4, "validation record missing"),
        SnapshotStoreError("put indeterminate again"),
    ]
    clock = {"now": datetime(2026, 11, 21, 12, 0, tzinfo=UTC)}
    monkeypatch.setattr(executing, "datetime", _Clock(clock))

    first = run(runtime)

    failure = api.status["exportFailure"]
    assert (failure["name"], failure["attempts"]) == ("cold", 1)
    assert "put indeterminate" in failure["message"]
    assert api.status["phase"] == "SUSPENDED_EXPORTING_SNAPSHOT"
    assert 0 < first.requeue_after <= runtime.settings.decision.export_retry_seconds
    run(runtime)
    assert len(maps.copies) == 1, "waits for the backoff"
    degraded = next(c for c in api.status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "ExportFailed" and "name=cold" in degraded["message"]

    for attempts in (2, 3):
        clock["now"] += timedelta(minutes=5)
        run(runtime)
        assert api.status["exportFailure"]["attempts"] == attempts
    assert api.status["exportFailure"]["message"].endswith("put indeterminate again")
    clock["now"] += timedelta(minutes=5)
    run(runtime)

    assert len(maps.copies) == 3
    assert api.status["phase"] == "SUSPENDED"
    assert api.kinds().count("event") >= 3
    assert ("event", "ExportFailed") in api.log
    degraded = next(c for c in api.status["conditions"] if c["type"] == "Degraded")
    assert "gave up" in degraded["message"]


class _Clock:
    """Stands in for ``datetime`` in the executor: ``now`` is the test's clock."""

    def __init__(self, clock: dict[str, datetime]) -> None:
        self._clock = clock

    def now(self, tz: Any = None) -> datetime:
        return self._clock["now"]


def test_deletion_destroys_the_maps_then_releases_the_finalizer(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime, maps: FakeMaps
) -> None:
    api = FakeAPI(monkeypatch, VALID_SPEC)
    run(runtime)
    (pod,) = api.pods
    api.set_pod(pod, "Running")
    assert api.job is not None
    api.job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    first = run(runtime)
    assert not first.finalizer_removable, "the driver may still run"
    assert api.pods == {}
    second = run(runtime)
    assert second.finalizer_removable
    assert maps.destroyed == ["__sj.snapshot.uid-1.0", "__sj.snapshot.uid-1.1"]


def test_a_job_that_is_gone_ends_the_loop(
    monkeypatch: pytest.MonkeyPatch, runtime: Runtime
) -> None:
    api = FakeAPI(monkeypatch, VALID_SPEC)
    api.job = None
    assert run(runtime).gone
