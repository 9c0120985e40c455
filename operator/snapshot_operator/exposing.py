"""Exposes the driver's Spark UI: lists, applies and deletes a job's UI Service and Ingress.

The verb-named module of :mod:`snapshot_operator.spark_ui_executing`'s HTTP calls. Objects
are applied server-side (``application/apply-patch+yaml``, field manager
:data:`FIELD_MANAGER`, forced): one call creates or updates, fields the operator no longer
sets are removed, and what the API server allocated (a Service's cluster IP, node ports) is
kept. An object already gone counts as deleted.
"""

from __future__ import annotations

import json
from typing import Any

from kubernetes import client

from snapshot_operator.reconcile.spark_ui import INGRESS, SERVICE, UI_COMPONENT
from snapshotjob_contract.pods import LABEL_COMPONENT, LABEL_JOB_UID

FIELD_MANAGER = "snapshotjob-operator"
_APPLY = "application/apply-patch+yaml"


def list_spark_ui_objects(
    api: client.ApiClient, namespace: str, job_uid: str
) -> list[dict[str, Any]]:
    """Returns the job's UI Services and Ingresses (labelled with its uid), camelCase, each
    with its ``kind`` (a list's items carry none)."""
    selector = f"{LABEL_JOB_UID}={job_uid},{LABEL_COMPONENT}={UI_COMPONENT}"
    core: Any = client.CoreV1Api(api)
    networking: Any = client.NetworkingV1Api(api)
    found: list[dict[str, Any]] = []
    for kind, listing in (
        (SERVICE, core.list_namespaced_service),
        (INGRESS, networking.list_namespaced_ingress),
    ):
        response = listing(namespace, label_selector=selector, _preload_content=False)
        found += [{**item, "kind": kind} for item in json.loads(response.data)["items"]]
    return found


def apply_spark_ui_object(api: client.ApiClient, manifest: dict[str, Any]) -> None:
    """Creates or updates a UI Service or Ingress by server-side apply."""
    metadata = manifest["metadata"]
    if manifest["kind"] == SERVICE:
        patch: Any = client.CoreV1Api(api).patch_namespaced_service
    else:
        patch = client.NetworkingV1Api(api).patch_namespaced_ingress
    patch(
        metadata["name"],
        metadata["namespace"],
        manifest,
        field_manager=FIELD_MANAGER,
        force=True,
        _content_type=_APPLY,
    )


def delete_spark_ui_object(api: client.ApiClient, namespace: str, kind: str, name: str) -> bool:
    """Deletes a UI Service or Ingress; returns False if it did not exist."""
    if kind == SERVICE:
        delete: Any = client.CoreV1Api(api).delete_namespaced_service
    else:
        delete = client.NetworkingV1Api(api).delete_namespaced_ingress
    try:
        delete(name, namespace)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
