"""Creates the driver Pod of an execution, and the identity it runs as, idempotently.

A retried action list, a restarted operator or a second replica may ask for the same Pod
again. The Pod's name is deterministic (job name and attempt) and its execution id was
written to the status before, so "already exists" means the Pod is there: the create is
treated as done, never repeated under another name, and there is never a second driver.
Any other error is raised as :class:`~snapshot_operator.gateways.CreateFailed`, naming the
object and carrying the API server's message, for the executor to record in the status.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client

from snapshot_operator.gateways import CreateFailed
from snapshot_operator.manifests import build_role, build_role_binding, build_service_account
from snapshot_operator.reconcile import JobRef
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.resource import GROUP, VERSION

log = logging.getLogger(__name__)


def _created_or_exists(error: client.exceptions.ApiException) -> bool:
    """Whether a failed create still leaves the object there: 409, it already exists."""
    return bool(error.status == 409)


def create_failed(error: client.exceptions.ApiException, manifest: dict[str, Any]) -> CreateFailed:
    """Returns the gateway's error for a create the API server did not do.

    Args:
        error: The client's error.
        manifest: The object that was to be created.
    """
    message = ""
    try:
        message = str(json.loads(error.body or "{}").get("message") or "")
    except (TypeError, ValueError, AttributeError):
        message = str(error.body or "")
    reason = str(error.reason or "")
    return CreateFailed(
        str(manifest["kind"]),
        str(manifest["metadata"]["name"]),
        int(error.status or 0),
        f"{reason}: {message}" if message else reason,
    )


def ensure_driver_identity(api: client.ApiClient, job: JobRef) -> None:
    """Creates the job's driver ServiceAccount, Role and RoleBinding unless they exist."""
    # Manifests are plain dictionaries, which the client sends as they are.
    core: Any = client.CoreV1Api(api)
    rbac: Any = client.RbacAuthorizationV1Api(api)
    creates = (
        (core.create_namespaced_service_account, build_service_account(job)),
        (rbac.create_namespaced_role, build_role(job)),
        (rbac.create_namespaced_role_binding, build_role_binding(job)),
    )
    for create, manifest in creates:
        try:
            create(job.namespace, manifest)
        except client.exceptions.ApiException as error:
            if not _created_or_exists(error):
                raise create_failed(error, manifest) from error


def create_pod(api: client.ApiClient, pod: dict[str, Any]) -> bool:
    """Creates a Pod; returns False if a Pod of that name already exists.

    An existing Pod of another execution is left for the next decision, which deletes
    drivers of older executions; it is logged because it means the status was rolled back.
    """
    core: Any = client.CoreV1Api(api)
    metadata = pod["metadata"]
    try:
        core.create_namespaced_pod(metadata["namespace"], pod)
    except client.exceptions.ApiException as error:
        if not _created_or_exists(error):
            raise create_failed(error, pod) from error
        existing = core.read_namespaced_pod(metadata["name"], metadata["namespace"])
        labels = existing.metadata.labels or {}
        # An upgrade check's Pod has no execution: one of its name is the same check's.
        wanted = metadata["labels"].get(LABEL_EXECUTION_ID)
        if wanted is not None and labels.get(LABEL_EXECUTION_ID) != wanted:
            log.warning(
                "Driver Pod exists for another execution pod=%s executionId=%s wanted=%s",
                metadata["name"],
                labels.get(LABEL_EXECUTION_ID),
                wanted,
            )
        return False
    return True


def create_export(api: client.ApiClient, namespace: str, manifest: dict[str, Any]) -> str | None:
    """Creates a SnapshotJobExport; returns its uid, or None if one of that name exists.

    Raises:
        CreateFailed: If the API server refused it for another reason.
    """
    objects: Any = client.CustomObjectsApi(api)
    try:
        created = objects.create_namespaced_custom_object(
            GROUP, VERSION, namespace, EXPORT_PLURAL, manifest
        )
    except client.exceptions.ApiException as error:
        if _created_or_exists(error):
            return None
        raise create_failed(error, manifest) from error
    return str(created["metadata"]["uid"])
