"""The Kubernetes gateway over the ``kubernetes`` client: one ApiClient, the verb modules' calls.

Each method is one call of a verb-named module (``fetching``, ``patching``, ``creating``,
``deleting``, ``eventing``, ``restarting``), which keep the HTTP details and the status codes
they absorb; this class only holds what every call needs, the ApiClient and the replica's
name for the Events' ``reportingInstance``, so that the executor and the store restart step
never see either. Tested against a real control plane by
``tests/integration/test_operator.py`` and ``tests/integration/test_store_rollout.py``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kubernetes import client

from snapshot_operator import creating, deleting, eventing, fetching, patching, restarting
from snapshot_operator.reconcile import EmitEvent, JobRef
from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.resource import PLURAL


class ClientKubernetesGateway:
    """:class:`snapshot_operator.gateways.KubernetesGateway` over one ``ApiClient``.

    Args:
        api: The API client (see :func:`snapshot_operator.connecting.connect`).
        instance: This operator replica's name, reported as the Events' reportingInstance.
    """

    def __init__(self, api: client.ApiClient, instance: str) -> None:
        self._api = api
        self._instance = instance

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.read_job`."""
        return fetching.read_job(self._api, namespace, name)

    def list_driver_pods(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_driver_pods`."""
        return fetching.list_driver_pods(self._api, namespace, job_uid)

    def patch_status(
        self, namespace: str, name: str, resource_version: str, patch: Mapping[str, Any]
    ) -> str:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.patch_status`."""
        return patching.patch_status(self._api, namespace, name, resource_version, patch)

    def list_jobs(self, namespace: str) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_jobs`."""
        return fetching.list_objects(self._api, namespace, PLURAL)

    def list_exports(self, namespace: str) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_exports`."""
        return fetching.list_objects(self._api, namespace, EXPORT_PLURAL)

    def create_export(self, namespace: str, manifest: dict[str, Any]) -> str | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.create_export`."""
        return creating.create_export(self._api, namespace, manifest)

    def patch_export_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.patch_export_status`."""
        return patching.patch_export_status(self._api, namespace, name, status)

    def delete_export(self, namespace: str, name: str, uid: str) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.delete_export`."""
        return deleting.delete_export(self._api, namespace, name, uid)

    def ensure_driver_identity(self, job: JobRef) -> None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.ensure_driver_identity`."""
        creating.ensure_driver_identity(self._api, job)

    def create_pod(self, pod: dict[str, Any]) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.create_pod`."""
        return creating.create_pod(self._api, pod)

    def delete_pod(self, namespace: str, name: str, *, at_once: bool = False) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.delete_pod`."""
        return deleting.delete_pod(self._api, namespace, name, at_once=at_once)

    def emit_job_event(self, job: JobRef, event: EmitEvent) -> None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.emit_job_event`."""
        eventing.emit_event(self._api, job, event, self._instance)

    def read_statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.read_statefulset`."""
        return restarting.read_statefulset(self._api, namespace, name)

    def list_statefulset_pods(self, statefulset: Mapping[str, Any]) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_statefulset_pods`."""
        return restarting.list_statefulset_pods(self._api, statefulset)

    def delete_pod_if_unchanged(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.delete_pod_if_unchanged`."""
        return restarting.delete_pod_if_unchanged(
            self._api, namespace, name, uid=uid, resource_version=resource_version
        )

    def emit_event(
        self,
        regarding: Mapping[str, str],
        *,
        action: str,
        reason: str,
        event_type: str,
        note: str,
    ) -> None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.emit_event`."""
        eventing.create_event(
            self._api,
            dict(regarding),
            action=action,
            reason=reason,
            event_type=event_type,
            note=note,
            instance=self._instance,
        )
