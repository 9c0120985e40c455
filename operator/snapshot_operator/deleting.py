"""Deletes driver Pods; a Pod that is already gone counts as deleted.

The deletion is preconditioned on nothing but the name: the decision already checked which
execution the Pod runs, and a Pod of that name can only be recreated by a later decision of
this same job.
"""

from __future__ import annotations

from kubernetes import client


def delete_pod(api: client.ApiClient, namespace: str, name: str) -> bool:
    """Deletes a Pod (its executors follow through owner references).

    Returns:
        False if the Pod did not exist.
    """
    core = client.CoreV1Api(api)
    try:
        core.delete_namespaced_pod(name, namespace, propagation_policy="Background")
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return False
        raise
    return True
