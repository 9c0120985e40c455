"""One step of the store members' rolling restart: read, plan, delete at most one Pod.

Every step reads the StatefulSet, then its Pods, then every store member's health, all fresh
(each member is asked on its own, see :mod:`snapshot_operator.rollout`), and acts on
:func:`snapshot_operator.rollout.plan`. The health is read last so that a Pod seen Ready is
also a member the health already counts. The deletion is preconditioned on the Pod's uid and
resourceVersion (:meth:`~snapshot_operator.gateways.KubernetesGateway.delete_pod_if_unchanged`):
a Pod that changed since it was read is left alone and the next step decides again.

The Kubernetes API and the store come in as gateways (:mod:`snapshot_operator.gateways`), as
they do for the job's reconcile; the HTTP calls are in :mod:`snapshot_operator.restarting`.
"""

from __future__ import annotations

import logging

from snapshot_operator.gateways import KubernetesGateway, StoreGateway
from snapshot_operator.reconcile.observe import parse_store_health
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

log = logging.getLogger(__name__)

EVENT_REASON = "StoreMemberRestarted"


def _emit_event(
    kube: KubernetesGateway, statefulset: StoreStatefulSet, step: RestartMember
) -> None:
    kube.emit_event(
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
    )


def restart_step(
    kube: KubernetesGateway,
    store: StoreGateway,
    namespace: str,
    name: str,
    members: tuple[str, ...],
    health_timeout: float,
    previous: RolloutStep | None = None,
) -> RolloutStep | None:
    """Reads the store's StatefulSet, Pods and health; deletes one outdated Pod if safe.

    Blocking: the handler calls it from a worker thread.

    Args:
        kube: The Kubernetes API.
        store: The snapshot store (its health endpoint).
        namespace: The StatefulSet's namespace.
        name: The StatefulSet's name.
        members: ``host:port`` of the store's members (health endpoint); each is asked.
        health_timeout: Seconds one member may take to answer.
        previous: The step planned by the previous call. A deletion is carried out only when
            the previous step planned the same one (same Pod, unchanged): a member that has
            just joined can look Ready and cluster-safe for a moment before Hazelcast starts
            migrating partitions back to it, so one safe reading is not enough.

    Returns:
        The step planned (a :class:`~snapshot_operator.rollout.RestartMember` was carried
        out, or found obsolete by its precondition), or None if the StatefulSet does not
        exist.
    """
    raw = kube.read_statefulset(namespace, name)
    if raw is None:
        log.debug("Store StatefulSet not found namespace=%s name=%s", namespace, name)
        return None
    statefulset = parse_statefulset(raw)
    pods = (parse_member_pod(pod, statefulset.name) for pod in kube.list_statefulset_pods(raw))
    members_read = tuple(pod for pod in pods if pod is not None)
    health = [parse_store_health(store.read_health([member], health_timeout)) for member in members]
    step = plan(statefulset, members_read, health)
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
        deleted = kube.delete_pod_if_unchanged(
            statefulset.namespace,
            step.pod.name,
            uid=step.pod.uid,
            resource_version=step.pod.resource_version,
        )
        if deleted:
            _emit_event(kube, statefulset, step)
    return step
