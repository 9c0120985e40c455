"""The Kubernetes gateway over the ``kubernetes`` client: one ApiClient, the verb modules' calls.

Each method is one call of a verb-named module (``fetching``, ``patching``, ``creating``,
``deleting``, ``eventing``, ``restarting``), which keep the HTTP details and the status codes
they absorb; this class only holds what every call needs, the ApiClient and the replica's
name for the Events' ``reportingInstance``, so that the executor and the store restart step
never see either. Tested against a real control plane by
``tests/integration/test_operator.py`` and ``tests/integration/test_store_rollout.py``.

Every call passes through :meth:`ClientKubernetesGateway._call`, the one place that sees all
API errors the verb modules do not absorb; it reports them (for the operator's
``snapshotjob_operator_kubernetes_api_errors_total``) and raises them on unchanged.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import urllib3
from kubernetes import client

from snapshot_operator import (
    creating,
    deleting,
    eventing,
    exposing,
    fetching,
    patching,
    restarting,
)
from snapshot_operator.gateways import CreateFailed
from snapshot_operator.reconcile import EmitEvent, JobRef
from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.resource import PLURAL

_T = TypeVar("_T")

ApiErrorListener = Callable[[str, int], None]
"""Told of each failed call: the gateway method's name and the HTTP status (0: no response)."""


class ClientKubernetesGateway:
    """:class:`snapshot_operator.gateways.KubernetesGateway` over one ``ApiClient``.

    Args:
        api: The API client (see :func:`snapshot_operator.connecting.connect`).
        instance: This operator replica's name, reported as the Events' reportingInstance.
        on_api_error: Told of every call that failed, before the error is raised on.
    """

    def __init__(
        self,
        api: client.ApiClient,
        instance: str,
        on_api_error: ApiErrorListener | None = None,
    ) -> None:
        self._api = api
        self._instance = instance
        self._on_api_error = on_api_error

    def _call(self, operation: str, call: Callable[..., _T], *args: Any, **kwargs: Any) -> _T:
        """Makes one verb module call, reporting an error that escapes it."""
        try:
            return call(self._api, *args, **kwargs)
        except client.ApiException as error:
            self._report(operation, int(error.status or 0))
            raise
        except CreateFailed as error:
            self._report(operation, error.code)
            raise
        except (urllib3.exceptions.HTTPError, OSError):
            self._report(operation, 0)
            raise

    def _report(self, operation: str, code: int) -> None:
        if self._on_api_error is not None:
            self._on_api_error(operation, code)

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.read_job`."""
        return self._call("read_job", fetching.read_job, namespace, name)

    def list_driver_pods(
        self, namespace: str, job_uid: str, *, cached: bool = False
    ) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_driver_pods`."""
        return self._call(
            "list_driver_pods", fetching.list_driver_pods, namespace, job_uid, cached=cached
        )

    def list_spark_ui_objects(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        """See :class:`snapshot_operator.spark_ui_executing.SparkUiGateway`."""
        return self._call(
            "list_spark_ui_objects", exposing.list_spark_ui_objects, namespace, job_uid
        )

    def apply_spark_ui_object(self, manifest: dict[str, Any]) -> None:
        """See :class:`snapshot_operator.spark_ui_executing.SparkUiGateway`."""
        self._call("apply_spark_ui_object", exposing.apply_spark_ui_object, manifest)

    def delete_spark_ui_object(self, namespace: str, kind: str, name: str) -> bool:
        """See :class:`snapshot_operator.spark_ui_executing.SparkUiGateway`."""
        return self._call(
            "delete_spark_ui_object", exposing.delete_spark_ui_object, namespace, kind, name
        )

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.read_pod`."""
        return self._call("read_pod", fetching.read_pod, namespace, name)

    def patch_status(
        self, namespace: str, name: str, resource_version: str, patch: Mapping[str, Any]
    ) -> str:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.patch_status`."""
        return self._call(
            "patch_status", patching.patch_status, namespace, name, resource_version, patch
        )

    def list_jobs(self, namespace: str, *, cached: bool = False) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_jobs`."""
        return self._call("list_jobs", fetching.list_objects, namespace, PLURAL, cached=cached)

    def list_exports(self, namespace: str, *, cached: bool = False) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_exports`."""
        return self._call(
            "list_exports", fetching.list_objects, namespace, EXPORT_PLURAL, cached=cached
        )

    def create_export(self, namespace: str, manifest: dict[str, Any]) -> str | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.create_export`."""
        return self._call("create_export", creating.create_export, namespace, manifest)

    def patch_export_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.patch_export_status`."""
        return self._call(
            "patch_export_status", patching.patch_export_status, namespace, name, status
        )

    def delete_export(self, namespace: str, name: str, uid: str) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.delete_export`."""
        return self._call("delete_export", deleting.delete_export, namespace, name, uid)

    def ensure_driver_identity(self, job: JobRef) -> None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.ensure_driver_identity`."""
        self._call("ensure_driver_identity", creating.ensure_driver_identity, job)

    def create_pod(self, pod: dict[str, Any]) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.create_pod`."""
        return self._call("create_pod", creating.create_pod, pod)

    def delete_pod(self, namespace: str, name: str, *, at_once: bool = False) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.delete_pod`."""
        return self._call("delete_pod", deleting.delete_pod, namespace, name, at_once=at_once)

    def emit_job_event(self, job: JobRef, event: EmitEvent) -> None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.emit_job_event`."""
        self._call("emit_job_event", eventing.emit_event, job, event, self._instance)

    def read_statefulset(self, namespace: str, name: str) -> dict[str, Any] | None:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.read_statefulset`."""
        return self._call("read_statefulset", restarting.read_statefulset, namespace, name)

    def list_statefulset_pods(self, statefulset: Mapping[str, Any]) -> list[dict[str, Any]]:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.list_statefulset_pods`."""
        return self._call("list_statefulset_pods", restarting.list_statefulset_pods, statefulset)

    def delete_pod_if_unchanged(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        """See :meth:`snapshot_operator.gateways.KubernetesGateway.delete_pod_if_unchanged`."""
        return self._call(
            "delete_pod_if_unchanged",
            restarting.delete_pod_if_unchanged,
            namespace,
            name,
            uid=uid,
            resource_version=resource_version,
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
        self._call(
            "create_event",
            eventing.create_event,
            dict(regarding),
            action=action,
            reason=reason,
            event_type=event_type,
            note=note,
            instance=self._instance,
        )
