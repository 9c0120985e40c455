"""Restarts the snapshot store's members one at a time: reads, plans, deletes one Pod.

Every step reads the StatefulSet, then its Pods, then every store member's health, all fresh
(each member is asked on its own, see :mod:`snapshot_operator.rollout`), and acts
on :func:`snapshot_operator.rollout.plan`. The health is read last so that a Pod seen Ready is
also a member the health already counts. The deletion is preconditioned on the Pod's uid and
resourceVersion: a Pod that changed since it was read (became unready, was replaced, was
deleted by another operator replica) is left alone and the next step decides again.
"""

from __future__ import annotations

import json
import logging
from typing import Any

from kubernetes import client

from snapshot_operator.eventing import create_event
from snapshot_operator.reconcile.observe import read_store_health
from snapshot_operator.rollout import (
    RestartMember,
    RolloutStep,
    StoreStatefulSet,
    WaitForHealthyStore,
    confirms,
    parse_member_pod,
    parse_statefulset,
    plan,
)
from snapshot_operator.store_health import read_health

log = logging.getLogger(__name__)

EVENT_REASON = "StoreMemberRestarted"


def _read_statefulset(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any] | None:
    apps: Any = client.AppsV1Api(api)
    try:
        response = apps.read_namespaced_stateful_set(name, namespace, _preload_content=False)
    except client.exceptions.ApiException as error:
        if error.status == 404:
            return None
        raise
    statefulset: dict[str, Any] = json.loads(response.data)
    return statefulset


def _list_pods(api: client.ApiClient, raw: dict[str, Any]) -> list[dict[str, Any]]:
    selector = ((raw.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    core: Any = client.CoreV1Api(api)
    response = core.list_namespaced_pod(
        raw["metadata"]["namespace"],
        label_selector=",".join(f"{key}={value}" for key, value in sorted(selector.items())),
        _preload_content=False,
    )
    pods: list[dict[str, Any]] = json.loads(response.data)["items"]
    return pods


def _delete(api: client.ApiClient, statefulset: StoreStatefulSet, step: RestartMember) -> bool:
    core = client.CoreV1Api(api)
    options = client.V1DeleteOptions(
        preconditions=client.V1Preconditions(
            uid=step.pod.uid, resource_version=step.pod.resource_version
        )
    )
    try:
        core.delete_namespaced_pod(step.pod.name, statefulset.namespace, body=options)
    except client.exceptions.ApiException as error:
        if error.status in (404, 409):
            log.info(
                "Store member changed before its restart pod=%s status=%s",
                step.pod.name,
                error.status,
            )
            return False
        raise
    return True


def _emit_event(
    api: client.ApiClient, statefulset: StoreStatefulSet, step: RestartMember, instance: str
) -> None:
    create_event(
        api,
        {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "namespace": statefulset.namespace,
            "name": statefulset.name,
            "uid": statefulset.uid,
        },
        action="RestartStoreMember",
        reason=EVENT_REASON,
        event_type="Normal",
        note=(
            f"Restarted store member pod={step.pod.name} revision={step.pod.revision} "
            f"updateRevision={step.update_revision}"
        ),
        instance=instance,
    )


def restart_step(
    api: client.ApiClient,
    namespace: str,
    name: str,
    members: tuple[str, ...],
    health_timeout: float,
    instance: str,
    previous: RolloutStep | None = None,
) -> RolloutStep | None:
    """Reads the store's StatefulSet, Pods and health; deletes one outdated Pod if safe.

    Blocking: the handler calls it from a worker thread.

    Args:
        api: Kubernetes API client.
        namespace: The StatefulSet's namespace.
        name: The StatefulSet's name.
        members: ``host:port`` of the store's members (health endpoint); each is asked.
        health_timeout: Seconds one member may take to answer.
        instance: This replica's name, reported in the Event.
        previous: The step planned by the previous call. A deletion is carried out only when
            the previous step planned the same one (same Pod, unchanged): a member that has
            just joined can look Ready and cluster-safe for a moment before Hazelcast starts
            migrating partitions back to it, so one safe reading is not enough.

    Returns:
        The step planned (a :class:`RestartMember` was carried out, or found obsolete by its
        precondition), or None if the StatefulSet does not exist.
    """
    raw = _read_statefulset(api, namespace, name)
    if raw is None:
        log.debug("Store StatefulSet not found namespace=%s name=%s", namespace, name)
        return None
    statefulset = parse_statefulset(raw)
    pods = (parse_member_pod(pod, statefulset.name) for pod in _list_pods(api, raw))
    members_read = tuple(pod for pod in pods if pod is not None)
    store = [read_store_health(read_health([member], health_timeout)) for member in members]
    step = plan(statefulset, members_read, store)
    if isinstance(step, WaitForHealthyStore):
        log.debug(
            "Store restart waits namespace=%s name=%s reason=%s", namespace, name, step.reason
        )
    elif isinstance(step, RestartMember) and not confirms(step, previous):
        log.info(
            "Store member restart planned, confirming on the next look pod=%s updateRevision=%s",
            step.pod.name,
            step.update_revision,
        )
    elif isinstance(step, RestartMember):
        log.info(
            "Restarting store member pod=%s revision=%s updateRevision=%s currentRevision=%s",
            step.pod.name,
            step.pod.revision,
            step.update_revision,
            statefulset.current_revision,
        )
        if _delete(api, statefulset, step):
            _emit_event(api, statefulset, step, instance)
    return step
