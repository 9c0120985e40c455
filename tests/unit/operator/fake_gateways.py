"""In-memory gateways for unit tests of the executor and the store restart step.

:class:`FakeKubernetes` plays the Kubernetes API (one SnapshotJob with its driver Pods, one
StatefulSet with its member Pods) and :class:`FakeStore` plays the Hazelcast store (health
documents, snapshot map copies and destruction), each implementing its Protocol of
:mod:`snapshot_operator.gateways`. They keep only what the callers' logic depends on: a
resourceVersion that moves on every status write and refuses a stale one, Pods that appear
and disappear, a deletion precondition, a log of the calls in order. The real gateways
(:mod:`snapshot_operator.kubernetes_gateway`, :mod:`snapshot_operator.store_gateway`) are
tested against a real control plane and Hazelcast cluster by
``tests/integration/test_operator.py`` and ``tests/integration/test_store_rollout.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any, cast

from snapshot_operator.gateways import (
    CopiedSnapshot,
    CreateFailed,
    StaleObservation,
    StoreOperationFailed,
)
from snapshot_operator.reconcile import EmitEvent, JobRef
from snapshotjob_contract import DurableStorageSpec

HEALTHY: dict[str, Any] = {
    "nodeState": "ACTIVE",
    "clusterState": "ACTIVE",
    "clusterSafe": True,
    "clusterSize": 3,
    "migrationQueueSize": 0,
}
"""The health document of a whole, cluster-safe 3-member store."""


class FakeKubernetes:
    """The Kubernetes API in memory: a SnapshotJob, its Pods, a StatefulSet and its Pods.

    Attributes:
        job: The SnapshotJob (camelCase), None once it is gone.
        pods: Driver Pods by name.
        pod_lists: Every list of the driver Pods, ``cached`` or ``consistent``, in order.
        pod_reads: The name of every Pod read by name, in order.
        statefulset: The store's StatefulSet, None if there is none.
        member_pods: The StatefulSet's Pods by name.
        log: Every write, in order, as ``(kind, detail)``.
        conflicts: How many of the next status patches fail as if the job had changed.
        refused: Kinds (``Pod``, ``ServiceAccount``) whose creation the API server refuses,
            with the message it refuses them with.
    """

    def __init__(self, spec: Mapping[str, Any] | None = None) -> None:
        self.job: dict[str, Any] | None = {
            "metadata": {
                "name": "wordcount",
                "namespace": "default",
                "uid": "uid-1",
                "generation": 1,
                "resourceVersion": "1",
            },
            "spec": dict(spec or {}),
        }
        self.pods: dict[str, dict[str, Any]] = {}
        self.exports: list[dict[str, Any]] = []
        # What a list from the API server's watch cache shows, when it is behind (None: it
        # is not, and shows :attr:`pods`).
        self.cached_pods: dict[str, dict[str, Any]] | None = None
        self.pod_lists: list[str] = []
        self.pod_reads: list[str] = []
        self.statefulset: dict[str, Any] | None = None
        self.member_pods: dict[str, dict[str, Any]] = {}
        self.log: list[tuple[str, Any]] = []
        self.conflicts = 0
        self.refused: dict[str, str] = {}

    @property
    def status(self) -> dict[str, Any]:
        """The job's status, created empty if it has none."""
        assert self.job is not None
        return cast(dict[str, Any], self.job.setdefault("status", {}))

    def kinds(self) -> list[str]:
        """The kinds of the logged writes, in order."""
        return [kind for kind, _ in self.log]

    def set_pod(self, name: str, phase: str, exit_code: int | None = None) -> None:
        """Sets a driver Pod's phase and, if given, its driver container's exit code."""
        status: dict[str, Any] = {"phase": phase}
        if exit_code is not None:
            status["containerStatuses"] = [
                {"name": "driver", "state": {"terminated": {"exitCode": exit_code}}}
            ]
        self.pods[name]["status"] = status
        metadata = self.pods[name]["metadata"]
        metadata["resourceVersion"] = str(int(metadata.get("resourceVersion", "0")) + 1)

    def report_pipeline(self) -> None:
        """Plays the driver's report that its pipeline runs (``status.pipelineStarted``)."""
        execution_id = self.status["execution"]["id"]
        self.status["pipelineStarted"] = {
            "executionId": execution_id,
            "time": "2026-01-01T00:00:00Z",
        }
        self._bump()

    def _bump(self) -> str:
        assert self.job is not None
        version = str(int(self.job["metadata"]["resourceVersion"]) + 1)
        self.job["metadata"]["resourceVersion"] = version
        return version

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Returns a copy of the job, or None if it is gone."""
        return copy.deepcopy(self.job)

    def list_driver_pods(
        self, namespace: str, job_uid: str, *, cached: bool = False
    ) -> list[dict[str, Any]]:
        """Returns copies of the driver Pods; ``cached``: of :attr:`cached_pods` if set."""
        self.pod_lists.append("cached" if cached else "consistent")
        if cached and self.cached_pods is not None:
            return copy.deepcopy(list(self.cached_pods.values()))
        return copy.deepcopy(list(self.pods.values()))

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Returns a copy of one driver Pod, or None; records the name in :attr:`pod_reads`."""
        self.pod_reads.append(name)
        return copy.deepcopy(self.pods.get(name))

    def list_exports(self, namespace: str, *, cached: bool = False) -> list[dict[str, Any]]:
        """Returns copies of :attr:`exports` (none unless a test puts some there)."""
        return copy.deepcopy(self.exports)

    def patch_status(
        self, namespace: str, name: str, resource_version: str, patch: Mapping[str, Any]
    ) -> str:
        """Applies the patch if the version is current; raises StaleObservation if not."""
        assert self.job is not None
        if self.conflicts:
            self.conflicts -= 1
            self.log.append(("conflict", resource_version))
            raise StaleObservation("changed")
        if resource_version != self.job["metadata"]["resourceVersion"]:
            self.log.append(("conflict", resource_version))
            raise StaleObservation("stale")
        self.log.append(("patch", (resource_version, sorted(patch))))
        for key, value in patch.items():
            if value is None:
                self.status.pop(key, None)
            else:
                self.status[key] = value
        return self._bump()

    def ensure_driver_identity(self, job: JobRef) -> None:
        """Logs the identity as ensured; raises CreateFailed if ServiceAccounts are refused."""
        if "ServiceAccount" in self.refused:
            self.log.append(("refused", "ServiceAccount"))
            raise CreateFailed(
                "ServiceAccount", f"{job.name}-driver", 403, self.refused["ServiceAccount"]
            )
        self.log.append(("identity", job.name))

    def create_pod(self, pod: dict[str, Any]) -> bool:
        """Adds a driver Pod; raises CreateFailed if Pods are refused."""
        if "Pod" in self.refused:
            self.log.append(("refused", "Pod"))
            raise CreateFailed("Pod", pod["metadata"]["name"], 403, self.refused["Pod"])
        self.log.append(("create", pod["metadata"]["name"]))
        pod["metadata"]["resourceVersion"] = "1"
        self.pods[pod["metadata"]["name"]] = pod
        return True

    def delete_pod(self, namespace: str, name: str, *, at_once: bool = False) -> bool:
        """Removes a driver Pod; False if there was none."""
        self.log.append(("delete-at-once" if at_once else "delete", name))
        return self.pods.pop(name, None) is not None

    def emit_job_event(self, job: JobRef, event: EmitEvent) -> None:
        """Logs the Event's reason."""
        self.log.append(("event", event.reason.value))

    def read_statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Returns a copy of the StatefulSet, or None if there is none."""
        return copy.deepcopy(self.statefulset)

    def list_statefulset_pods(self, statefulset: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Returns copies of the member Pods."""
        return copy.deepcopy(list(self.member_pods.values()))

    def delete_pod_if_unchanged(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        """Removes a member Pod if its uid and resourceVersion still match."""
        pod = self.member_pods.get(name)
        metadata = (pod or {}).get("metadata") or {}
        if metadata.get("uid") != uid or metadata.get("resourceVersion") != resource_version:
            self.log.append(("precondition failed", name))
            return False
        del self.member_pods[name]
        self.log.append(("delete member", name))
        return True

    def emit_event(
        self,
        regarding: Mapping[str, str],
        *,
        action: str,
        reason: str,
        event_type: str,
        note: str,
    ) -> None:
        """Logs the Event's reason and the kind and name of what it regards."""
        self.log.append(("event", (reason, regarding["kind"], regarding["name"])))


class FakeStore:
    """The snapshot store in memory: health documents, and copies that record their calls.

    Attributes:
        health: The document every member answers with; None: no member answers.
        unreachable: Members that never answer, whatever ``health`` says.
        health_reads: The members of every health read, in order.
        copies: Every copy asked for, in order.
        destroyed: Every map destroyed, in order.
        failures: Errors the next copies raise, one each, first first.
    """

    def __init__(self) -> None:
        self.health: dict[str, Any] | None = HEALTHY
        self.unreachable: set[str] = set()
        self.copies: list[dict[str, Any]] = []
        self.destroyed: list[str] = []
        self.failures: list[Exception] = []
        self.health_reads: list[tuple[str, ...]] = []

    def read_health(self, members: Sequence[str], timeout: float) -> dict[str, Any] | None:
        """Returns ``health`` if any of the members is reachable; records the members asked."""
        self.health_reads.append(tuple(members))
        if all(member in self.unreachable for member in members):
            return None
        return self.health

    def copy_snapshot(
        self,
        members: Sequence[str],
        cluster_name: str,
        *,
        source_map: str,
        target_map: str,
        snapshot_id: int,
    ) -> CopiedSnapshot:
        """Records the copy; raises the next of ``failures`` if any."""
        self.copies.append({"source": source_map, "target": target_map, "id": snapshot_id})
        if self.failures:
            raise self.failures.pop(0)
        return CopiedSnapshot(snapshot_id=snapshot_id, num_bytes=123)

    def destroy_maps(
        self, members: Sequence[str], cluster_name: str, map_names: Sequence[str]
    ) -> None:
        """Records the maps as destroyed."""
        self.destroyed += map_names


class FakeDurable:
    """The installation's object storage in memory: copies and discards that record their calls.

    Attributes:
        storage: The installation's durable storage.
        copies: Every export copied, as ``(map, snapshot id)``.
        discarded: Every location discarded.
        failures: Errors the next copies raise, one each, first first.
        job_copies: Jobs' periodic copies, snapshot ids by ``(prefix, map)``.
        discard_failures: Errors the next deletions of a job's copies raise.
    """

    def __init__(self, storage: DurableStorageSpec) -> None:
        self.storage = storage
        self.copies: list[tuple[str, int]] = []
        self.discarded: list[str] = []
        self.failures: list[Exception] = []
        self.job_copies: dict[tuple[str, str], list[int]] = {}
        self.discard_failures: list[Exception] = []

    def copy_export(
        self, members: Sequence[str], cluster_name: str, map_name: str, snapshot_id: int
    ) -> str:
        """Records the copy; raises the next of ``failures`` if any."""
        self.copies.append((map_name, snapshot_id))
        if self.failures:
            raise self.failures.pop(0)
        return f"s3://{self.storage.bucket}/{map_name}/{snapshot_id}"

    def discard(self, location: str) -> None:
        """Records the location as discarded."""
        self.discarded.append(location)

    def discard_job_copies(self, storage: DurableStorageSpec, map_name: str) -> list[int]:
        """Deletes the copies ``job_copies`` holds under the prefix and map; raises the next of
        ``discard_failures`` if any, or ``NotOperatorBucket`` for another bucket or endpoint."""
        if self.discard_failures:
            raise self.discard_failures.pop(0)
        if (storage.bucket, storage.endpoint) != (self.storage.bucket, self.storage.endpoint):
            raise StoreOperationFailed("NotOperatorBucket", f"not bucket={storage.bucket}")
        return sorted(self.job_copies.pop((storage.prefix, map_name), []))
