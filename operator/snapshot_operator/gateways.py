"""The operator's two external systems as typed interfaces: the Kubernetes API and the store.

The reconcile executor (:mod:`snapshot_operator.executing`) and the store's rolling restart
(:mod:`snapshot_operator.store_restarts`) only join pure decisions to the world. Handing them
the world as these interfaces, built once by ``__main__`` and injected through the kopf memo,
keeps them free of any client library (an import-linter contract in ``pyproject.toml`` holds
them to it) and lets their unit tests run against small in-memory gateways instead of
patched modules, the shape of the Apache Flink Kubernetes Operator's ``FlinkService``.

The real implementations are :class:`snapshot_operator.kubernetes_gateway.ClientKubernetesGateway`
(over the verb-named modules that make the HTTP calls: ``fetching``, ``patching``,
``creating``, ``deleting``, ``eventing``, ``restarting``) and
:class:`snapshot_operator.store_gateway.HazelcastStoreGateway` (over ``store_health`` and
``snapshot_maps``); ``tests/integration/test_operator.py`` and
``tests/integration/test_store_rollout.py`` test them against a real control plane and a real
Hazelcast cluster.

This module is pure: Protocol classes and the data types they exchange, no client import.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from snapshot_operator.reconcile import EmitEvent, JobRef
from snapshotjob_contract import DurableStorageSpec


class StaleObservation(Exception):  # noqa: N818 (a signal to decide again, not a failure)
    """The SnapshotJob changed since it was read: decide again from a fresh read."""


class StoreOperationFailed(Exception):  # noqa: N818 - names the outcome, like StaleObservation
    """A store operation failed; the gateway's implementation says why in ``reason``.

    The executor does not import the store's errors: the store gateway translates
    them, so this is all the executor needs to know to record and retry a failed copy.

    Args:
        reason: The store's own name for the failure, e.g. ``SnapshotCorrupted`` or
            ``SnapshotStoreError``; it is shown to users in ``status.exportFailure``.
        message: What failed, naming the map and snapshot where known.
    """

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


class CreateFailed(Exception):  # noqa: N818 - names the outcome, like StaleObservation
    """The API server did not create an object: it refused it (e.g. 403 exceeded quota, 422
    invalid) or failed (5xx). "Already exists" is not this: the create is then done.

    The executor does not import the client's errors: the gateway translates them, so the
    executor can record the failure in the status, where the decision sees it.

    Args:
        kind: The object's kind, e.g. ``Pod``.
        name: The object's name.
        code: The HTTP status code.
        message: The API server's reason and message, e.g. ``Forbidden: pods "x" is forbidden:
            exceeded quota: ...``.
    """

    def __init__(self, kind: str, name: str, code: int, message: str) -> None:
        super().__init__(f"{kind}/{name} status={code}: {message}")
        self.kind = kind
        self.name = name
        self.code = code
        self.message = message


@dataclass(frozen=True)
class CopiedSnapshot:
    """What a validated copy holds, for ``status.exportedSnapshots``.

    Attributes:
        snapshot_id: The snapshot copied.
        num_bytes: Bytes of its chunks.
    """

    snapshot_id: int
    num_bytes: int


class KubernetesGateway(Protocol):
    """The Kubernetes API calls the operator makes.

    Objects go in and come out as plain dictionaries in the API's own camelCase shape: the
    decision and the restart planner read that shape, not a client library's models. Every
    call blocks; the handlers run its callers in worker threads.
    """

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Returns the SnapshotJob, or None if it is gone."""
        ...

    def list_driver_pods(
        self, namespace: str, job_uid: str, *, cached: bool = False
    ) -> list[dict[str, Any]]:
        """Returns every Pod labelled with the job's uid (``cached`` as in :meth:`list_jobs`)."""
        ...

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Returns one Pod, read consistently, or None if it does not exist."""
        ...

    def patch_status(
        self, namespace: str, name: str, resource_version: str, patch: Mapping[str, Any]
    ) -> str:
        """Merge-patches the job's status if the job is still at ``resource_version``.

        Args:
            namespace: The job's namespace.
            name: The job's name.
            resource_version: The version the patch was computed from.
            patch: Top-level status fields (camelCase); None deletes a field.

        Returns:
            The job's new ``resourceVersion``, the lock for the next write of the decision.

        Raises:
            StaleObservation: If the job changed or is gone.
        """
        ...

    def ensure_driver_identity(self, job: JobRef) -> None:
        """Creates the job's driver ServiceAccount, Role and RoleBinding unless they exist.

        Raises:
            CreateFailed: If the API server did not create one of them.
        """
        ...

    def create_pod(self, pod: dict[str, Any]) -> bool:
        """Creates a Pod; returns False if a Pod of that name already exists.

        Raises:
            CreateFailed: If the API server did not create it.
        """
        ...

    def delete_pod(self, namespace: str, name: str, *, at_once: bool = False) -> bool:
        """Deletes a driver Pod, without a grace period if ``at_once``; False if it was gone."""
        ...

    def emit_job_event(self, job: JobRef, event: EmitEvent) -> None:
        """Emits one Event regarding the job; a failure is logged, never raised."""
        ...

    def read_statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Returns a StatefulSet, or None if it does not exist."""
        ...

    def list_statefulset_pods(self, statefulset: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Returns the Pods the StatefulSet's ``spec.selector.matchLabels`` select."""
        ...

    def delete_pod_if_unchanged(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        """Deletes a Pod only if it still has this uid and resourceVersion.

        Returns:
            False if the Pod changed since it was read, or is gone: nothing was deleted.
        """
        ...

    def emit_event(
        self,
        regarding: Mapping[str, str],
        *,
        action: str,
        reason: str,
        event_type: str,
        note: str,
    ) -> None:
        """Emits one Event regarding any object; a failure is logged, never raised.

        Args:
            regarding: The object reference (apiVersion, kind, namespace, name, uid).
            action: What the operator did, e.g. Reconcile.
            reason: The CamelCase reason.
            event_type: Normal or Warning.
            note: The human-readable message.
        """
        ...

    def list_jobs(self, namespace: str, *, cached: bool = False) -> list[dict[str, Any]]:
        """Returns every SnapshotJob in the namespace.

        Args:
            namespace: The namespace.
            cached: From the API server's watch cache: fast, possibly behind the latest
                writes. Only for a first look whose every action is decided again from a
                consistent list.
        """
        ...

    def list_exports(self, namespace: str, *, cached: bool = False) -> list[dict[str, Any]]:
        """Returns every SnapshotJobExport in the namespace (``cached`` as in :meth:`list_jobs`)."""
        ...

    def create_export(self, namespace: str, manifest: dict[str, Any]) -> str | None:
        """Creates a SnapshotJobExport; returns its uid, or None if one of that name exists.

        Raises:
            CreateFailed: If the API server did not create it.
        """
        ...

    def patch_export_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """Writes a SnapshotJobExport's status; False if the object is gone."""
        ...

    def delete_export(self, namespace: str, name: str, uid: str) -> bool:
        """Deletes a SnapshotJobExport if it still has this uid; False if nothing was deleted."""
        ...


class StoreGateway(Protocol):
    """The snapshot store (Hazelcast) operations the operator performs.

    A store is named by its members (``host:port``) and cluster name: a job may use its own
    cluster (``spec.hazelcast.address``) instead of the installation's. Every call blocks.
    """

    def read_health(self, members: Sequence[str], timeout: float) -> dict[str, Any] | None:
        """Returns the health document of the first member that answers, or None.

        Args:
            members: ``host:port`` of the members to ask, in turn.
            timeout: Seconds one member may take.
        """
        ...

    def copy_snapshot(
        self,
        members: Sequence[str],
        cluster_name: str,
        *,
        source_map: str,
        target_map: str,
        snapshot_id: int,
    ) -> CopiedSnapshot:
        """Copies a snapshot to another map and validates the copy.

        Raises:
            StoreOperationFailed: If the source or the copy fails validation
                (``SnapshotCorrupted``) or the store failed (``SnapshotStoreError``).
        """
        ...

    def destroy_maps(
        self, members: Sequence[str], cluster_name: str, map_names: Sequence[str]
    ) -> None:
        """Destroys maps with their data; a map that does not exist is no error.

        Raises:
            StoreOperationFailed: If the store failed (``SnapshotStoreError``).
        """
        ...


class DurableGateway(Protocol):
    """The installation's object storage for durable copies, as far as the operator touches it.

    Drivers write and read most copies; the operator copies the exports it makes itself (a
    suspended job's) and deletes the copies of exports disposed of.
    """

    @property
    def storage(self) -> DurableStorageSpec:
        """The installation's durable storage: the one bucket the operator has credentials for."""
        ...

    def copy_export(
        self, members: Sequence[str], cluster_name: str, map_name: str, snapshot_id: int
    ) -> str:
        """Copies an export from the store to object storage, verified; returns its location.

        Older copies of the same export are deleted once the new one validated.

        Raises:
            StoreOperationFailed: If the export or its copy failed validation, or a store failed.
        """
        ...

    def discard_job_copies(self, storage: DurableStorageSpec, map_name: str) -> list[int]:
        """Deletes every object under ``<storage.prefix>/<map_name>/``: a deleted job's
        periodic copies.

        Returns:
            The snapshot ids that had a complete copy (a validation record), ascending.

        Raises:
            StoreOperationFailed: ``NotOperatorBucket`` if ``storage`` names another bucket or
                endpoint than the operator's (it has no credentials there), or the object
                storage's error (``SnapshotStoreError``).
        """
        ...

    def discard(self, location: str) -> None:
        """Deletes the durable copy at ``s3://<bucket>/<prefix>/<map>/<snapshotId>``.

        Raises:
            StoreOperationFailed: If the location is not in the operator's bucket
                (``NotOperatorBucket``) or the object storage failed (``SnapshotStoreError``).
        """
        ...
