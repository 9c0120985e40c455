"""The Kubernetes calls of the store's rolling restart: read, list, delete one member Pod.

The step that uses them (:mod:`snapshot_operator.store_restarts`) reads the StatefulSet, then
its Pods, plans, and deletes at most one Pod. The deletion is preconditioned on the Pod's uid
and resourceVersion: a Pod that changed since it was read (became unready, was replaced, was
deleted by another operator replica) is left alone and the next step decides again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

from kubernetes import client

log = logging.getLogger(__name__)


def read_statefulset(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    """Returns the StatefulSet as a plain dictionary (camelCase), or None if it is gone."""
    apps: Any = client.AppsV1Api(api)
    try:
        response = apps.read_namespaced_stateful_set(name, namespace, _preload_content=False)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise
    statefulset: dict[str, Any] = json.loads(response.data)
    return statefulset


def list_statefulset_pods(
    api: client.ApiClient, statefulset: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Returns the Pods the StatefulSet's ``spec.selector.matchLabels`` select (camelCase)."""
    selector = ((statefulset.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    core: Any = client.CoreV1Api(api)
    response = core.list_namespaced_pod(
        statefulset["metadata"]["namespace"],
        label_selector=",".join(f"{key}={value}" for key, value in sorted(selector.items())),
        _preload_content=False,
    )
    pods: list[dict[str, Any]] = json.loads(response.data)["items"]
    return pods


def delete_pod_if_unchanged(
    api: client.ApiClient, namespace: str, name: str, *, uid: str, resource_version: str
) -> bool:
    """Deletes a Pod only if it still has this uid and resourceVersion.

    Returns:
        False if the Pod changed since it was read or is gone (409, 404): nothing deleted.
    """
    core = client.CoreV1Api(api)
    options = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(uid=uid, resource_version=resource_version)
    )
    try:
        core.delete_namespaced_pod(name, namespace, body=options)
    except client.exceptions.ApiException as error:
        if error.status in (404, 409):
            log.info("Store member changed before its restart pod=%s status=%s", name, error.status)
            return False
        raise
    return True
