"""Writes the SnapshotJob's status, always under an optimistic lock.

The driver writes the execution record into the same status; a patch the operator computed
from an older view must not overwrite it. Every patch therefore carries the
``resourceVersion`` the decision was based on, the API server answers 409 if anything changed
since, and the caller decides again from a fresh read (:class:`StaleObservation`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from kubernetes import client

from snapshot_operator.gateways import StaleObservation
from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION


def patch_status(
    api: client.ApiClient,
    namespace: str,
    name: str,
    resource_version: str,
    patch: Mapping[str, Any],
) -> str:
    """Merge-patches the status subresource if the job is still at ``resource_version``.

    Args:
        api: The API client.
        namespace: The job's namespace.
        name: The job's name.
        resource_version: The version the patch was computed from.
        patch: Top-level status fields (camelCase); None deletes a field.

    Returns:
        The job's new ``resourceVersion``, the lock for the next write of the same decision.

    Raises:
        StaleObservation: If the job changed (409) or is gone (404).
    """
    objects = client.CustomObjectsApi(api)
    body = {"metadata": {"resourceVersion": resource_version}, "status": dict(patch)}
    try:
        updated = objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, PLURAL, name, body
        )
    except client.exceptions.ApiException as error:
        if error.status in (404, 409):
            raise StaleObservation(
                f"SnapshotJob changed since it was read namespace={namespace} name={name} "
                f"resourceVersion={resource_version} status={error.status}"
            ) from error
        raise
    return str(cast(dict[str, Any], updated)["metadata"]["resourceVersion"])


def patch_export_status(
    api: client.ApiClient, namespace: str, name: str, status: Mapping[str, Any]
) -> bool:
    """Replaces a SnapshotJobExport's status fields; False if the object is gone.

    No optimistic lock: the operator is the status' only writer, and each write carries the
    whole status derived from a fresh read of the job.
    """
    objects = client.CustomObjectsApi(api)
    try:
        objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, namespace, EXPORT_PLURAL, name, {"status": dict(status)}
        )
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
