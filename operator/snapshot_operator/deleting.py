"""Deletes driver Pods and retired exports; an object that is already gone counts as deleted.

A driver Pod's deletion is preconditioned on nothing but the name: the decision already checked
which execution the Pod runs, and a Pod of that name can only be recreated by a later decision
of this same job. An export's is preconditioned on its uid: a user may have deleted the retired
export and created another of that name since the decision read it.
"""

from __future__ import annotations

from kubernetes import client

from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.resource import GROUP, VERSION


def delete_pod(api: client.ApiClient, namespace: str, name: str, *, at_once: bool = False) -> bool:
    """Deletes a Pod (its executors follow through owner references).

    Args:
        api: The API client.
        namespace: The Pod's namespace.
        name: The Pod's name.
        at_once: Without a grace period, so the API forgets the Pod without waiting for its
            node (a lost node never confirms).

    Returns:
        False if the Pod did not exist.
    """
    core = client.CoreV1Api(api)
    try:
        core.delete_namespaced_pod(
            name,
            namespace,
            propagation_policy="Background",
            grace_period_seconds=0 if at_once else None,
        )
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True


def delete_export(api: client.ApiClient, namespace: str, name: str, uid: str) -> bool:
    """Deletes a SnapshotJobExport if it is still the object of that uid.

    Returns:
        False if it is gone or is another object now (nothing deleted).
    """
    objects = client.CustomObjectsApi(api)
    try:
        objects.delete_namespaced_custom_object(
            GROUP,
            VERSION,
            namespace,
            EXPORT_PLURAL,
            name,
            body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=uid)),
        )
    except client.exceptions.ApiException as error:
        if error.status in (404, 409):
            return False
        raise
    return True
