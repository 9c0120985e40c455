"""Deletes driver Pods; a Pod that is already gone counts as deleted.

The deletion is preconditioned on nothing but the name: the decision already checked which
execution the Pod runs, and a Pod of that name can only be recreated by a later decision of
this same job.
"""

from __future__ import annotations

from kubernetes import client


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
