"""Reads what one decision is based on: the SnapshotJob and its driver Pods, fresh.

Decisions are made on objects read right before (or on the job as the watch delivered it,
once the watch has caught up with the operator's own last write, see
:mod:`snapshot_operator.reconcile.freshness`), and the status patch that follows carries the
``resourceVersion`` of that view as its optimistic lock. Pods are listed by the job's uid label
(not its name), so a Pod left over from a deleted job of the same name is never taken for
this job's driver.
"""

from __future__ import annotations

import json
from typing import Any, cast

from kubernetes import client

from snapshotjob_contract.pods import LABEL_JOB_UID
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION


def read_job(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """Returns the SnapshotJob as a plain dictionary, or None if it is gone."""
    objects = client.CustomObjectsApi(api)
    try:
        job = cast(
            dict[str, Any],
            objects.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name),
        )
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise
    return job


def list_driver_pods(
    api: client.ApiClient, namespace: str, job_uid: str, *, cached: bool = False
) -> list[dict[str, Any]]:
    """Returns every Pod labelled with the job's uid, as plain dictionaries (camelCase).

    Args:
        api: The API client.
        namespace: The job's namespace.
        job_uid: The job's uid.
        cached: Served from the API server's watch cache (``resourceVersion=0``), as
            :func:`list_objects` explains.
    """
    # The raw answer: the decision reads the API's own shape, not the client's models.
    core: Any = client.CoreV1Api(api)
    extra = {"resource_version": "0"} if cached else {}
    response = core.list_namespaced_pod(
        namespace, label_selector=f"{LABEL_JOB_UID}={job_uid}", _preload_content=False, **extra
    )
    pods: list[dict[str, Any]] = json.loads(response.data)["items"]
    return pods


def read_pod(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """Returns one Pod as a plain dictionary (camelCase), or None if it does not exist.

    A GET is read from etcd: consistent, without the wait of a consistent list.
    """
    core: Any = client.CoreV1Api(api)
    try:
        response = core.read_namespaced_pod(name, namespace, _preload_content=False)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise
    pod: dict[str, Any] = json.loads(response.data)
    return pod


def list_objects(
    api: client.ApiClient, namespace: str, plural: str, *, cached: bool = False
) -> list[dict[str, Any]]:
    """Returns every object of one of the operator's resources in a namespace (camelCase).

    Args:
        api: The API client.
        namespace: The namespace.
        plural: ``snapshotjobs`` or ``snapshotjobexports``.
        cached: Served from the API server's watch cache (``resourceVersion=0``): no wait for
            the cache to catch up with etcd, which a consistent list makes (tens of ms on a
            busy server), but possibly behind the latest writes.
    """
    objects: Any = client.CustomObjectsApi(api)
    extra = {"resource_version": "0"} if cached else {}
    listed = objects.list_namespaced_custom_object(GROUP, VERSION, namespace, plural, **extra)
    items: list[dict[str, Any]] = listed["items"]
    return items
