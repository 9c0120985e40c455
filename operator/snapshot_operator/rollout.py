"""Plans the restart of the snapshot store's members after their pod template changed.

The chart's Hazelcast StatefulSet uses ``updateStrategy: OnDelete``: Kubernetes' own rolling
update waits only for a replaced Pod to be Ready, not for the partitions to migrate back to it,
so two restarts in a row could take both copies of a partition (owner and its one backup)
down together and lose snapshot data. The operator therefore replaces members itself, one at a
time, and only when the store is whole again: every member Pod exists, is Ready and is not
terminating, and every member answers its health endpoint, ACTIVE and cluster-safe, with as
many members as the StatefulSet has replicas. Every member is asked, not just the first that
answers (as the start gate does): a hung member (SIGSTOP, a stalled JVM) is still counted in
the cluster and the others go on reporting it safe until its heartbeat times out, and
restarting a second member then could take both copies of a partition down.

This module is the pure part: it parses the raw StatefulSet and Pods (plain dictionaries in
the API's camelCase, as :mod:`snapshot_operator.reconcile.observe` does for driver Pods) and
returns one step as data (:class:`NoRestartNeeded`, :class:`WaitForHealthyStore` or
:class:`RestartMember`); the step that reads and acts is :mod:`snapshot_operator.store_restarts`.
The step is a function of what was read alone, so two operator replicas that read the same
state pick the same Pod, and the deletion is preconditioned on the Pod's version: the second
of them deletes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snapshot_operator.reconcile.observation import StoreHealth

REVISION_LABEL = "controller-revision-hash"
"""The label the StatefulSet controller puts on each Pod: the revision it was created from."""


@dataclass(frozen=True)
class StoreStatefulSet:
    """The store's StatefulSet as the planner sees it.

    Attributes:
        namespace: Its namespace.
        name: Its name; member Pods are named ``<name>-<ordinal>``.
        uid: Its uid (Events regard it).
        replicas: Desired members (``spec.replicas``).
        update_revision: The revision of the current pod template (``status.updateRevision``);
            None before the controller has reported it.
        current_revision: ``status.currentRevision`` (reported in logs only: with
            ``OnDelete`` it is not moved forward reliably).
        observed: The controller has seen the latest spec (``status.observedGeneration`` is
            ``metadata.generation``), so ``update_revision`` belongs to the current template.
    """

    namespace: str
    name: str
    uid: str
    replicas: int
    update_revision: str | None
    current_revision: str | None
    observed: bool


@dataclass(frozen=True)
class MemberPod:
    """One member Pod.

    Attributes:
        name: The Pod's name.
        uid: The Pod's uid (the deletion's precondition).
        resource_version: The version read (the deletion's precondition).
        ordinal: The ordinal from its name.
        revision: Its ``controller-revision-hash`` label; None if it has none.
        phase: ``status.phase``.
        ready: Its Ready condition is True.
        terminating: It has a deletion timestamp.
    """

    name: str
    uid: str
    resource_version: str
    ordinal: int
    revision: str | None
    phase: str
    ready: bool
    terminating: bool


@dataclass(frozen=True)
class NoRestartNeeded:
    """Every member Pod runs the current template: nothing to restart."""


@dataclass(frozen=True)
class WaitForHealthyStore:
    """Some member Pods are outdated, but restarting one now could lose data.

    Attributes:
        reason: Why not now, with key=value context.
    """

    reason: str


@dataclass(frozen=True)
class RestartMember:
    """Delete this outdated member Pod; the StatefulSet controller recreates it.

    Attributes:
        pod: The Pod to delete.
        update_revision: The revision its replacement will be created from.
    """

    pod: MemberPod
    update_revision: str


RolloutStep = NoRestartNeeded | WaitForHealthyStore | RestartMember
"""What to do next about the store's members."""


def confirms(step: RestartMember, previous: RolloutStep | None) -> bool:
    """Whether ``previous`` planned the same deletion, of the same unchanged Pod.

    A member that has just joined can look Ready and cluster-safe for a moment before
    Hazelcast starts migrating partitions back to it, so a deletion needs two plans in a row.
    """
    return (
        isinstance(previous, RestartMember)
        and previous.pod.uid == step.pod.uid
        and previous.pod.resource_version == step.pod.resource_version
        and previous.update_revision == step.update_revision
    )


def parse_statefulset(raw: Mapping[str, Any]) -> StoreStatefulSet:
    """Returns the StatefulSet as the planner sees it.

    Args:
        raw: The StatefulSet object (camelCase).

    Raises:
        KeyError: If it has no name, namespace or uid (not an object read from the API).
    """
    metadata = raw["metadata"]
    spec = raw.get("spec") or {}
    status = raw.get("status") or {}
    replicas = spec.get("replicas")
    generation = int(metadata.get("generation") or 0)
    return StoreStatefulSet(
        namespace=str(metadata["namespace"]),
        name=str(metadata["name"]),
        uid=str(metadata["uid"]),
        replicas=1 if replicas is None else int(replicas),
        update_revision=status.get("updateRevision") or None,
        current_revision=status.get("currentRevision") or None,
        observed=int(status.get("observedGeneration") or 0) >= generation,
    )


def parse_member_pod(raw: Mapping[str, Any], statefulset: str) -> MemberPod | None:
    """Returns a member Pod; None if the Pod is not named ``<statefulset>-<ordinal>``.

    Args:
        raw: The Pod object (camelCase).
        statefulset: The StatefulSet's name.
    """
    metadata = raw.get("metadata") or {}
    name = str(metadata.get("name") or "")
    prefix = f"{statefulset}-"
    suffix = name[len(prefix) :]
    if not name.startswith(prefix) or not suffix.isdigit():
        return None
    status = raw.get("status") or {}
    ready = any(
        condition.get("type") == "Ready" and condition.get("status") == "True"
        for condition in status.get("conditions") or ()
    )
    return MemberPod(
        name=name,
        uid=str(metadata.get("uid") or ""),
        resource_version=str(metadata.get("resourceVersion") or ""),
        ordinal=int(suffix),
        revision=(metadata.get("labels") or {}).get(REVISION_LABEL) or None,
        phase=str(status.get("phase") or "Pending"),
        ready=ready,
        terminating=metadata.get("deletionTimestamp") is not None,
    )


def plan(
    statefulset: StoreStatefulSet,
    pods: Sequence[MemberPod],
    store: Sequence[StoreHealth | None],
) -> RolloutStep:
    """Returns the next step of the store's rolling restart.

    A Pod is outdated when its revision is not the StatefulSet's update revision. With any
    outdated Pod, the one with the highest ordinal is deleted, but only when every member
    Pod (ordinals ``0 .. replicas-1``) exists, is Ready and is not terminating, no Pod beyond
    them is left over, and every store member answers cluster-safe with ``replicas``
    members. Anything less is a :class:`WaitForHealthyStore`: the previous restart has not
    healed yet, or the store is degraded for another reason and one more member down could
    lose a partition.

    Args:
        statefulset: The store's StatefulSet.
        pods: Its member Pods, read right after it.
        store: The health of each configured store member, read right after the Pods; None
            for a member that did not answer.
    """
    update = statefulset.update_revision
    if not statefulset.observed or update is None:
        return WaitForHealthyStore(
            f"StatefulSet status not current name={statefulset.name} updateRevision={update or '-'}"
        )
    outdated = sorted((pod for pod in pods if pod.revision != update), key=lambda pod: -pod.ordinal)
    if not outdated:
        return NoRestartNeeded()
    by_ordinal = {pod.ordinal: pod for pod in pods}
    for ordinal in range(statefulset.replicas):
        pod = by_ordinal.get(ordinal)
        if pod is None:
            return WaitForHealthyStore(f"Member pod missing pod={statefulset.name}-{ordinal}")
        if pod.terminating:
            return WaitForHealthyStore(f"Member pod terminating pod={pod.name}")
        if not pod.ready:
            return WaitForHealthyStore(f"Member pod not ready pod={pod.name} phase={pod.phase}")
    extra = sorted(pod.name for pod in pods if pod.ordinal >= statefulset.replicas)
    if extra:
        return WaitForHealthyStore(f"Member pods beyond the replicas pods={','.join(extra)}")
    if not store:
        return WaitForHealthyStore("No store members to ask")
    for index, health in enumerate(store):
        if health is None:
            return WaitForHealthyStore(f"Store member unreachable member={index}")
        if not health.cluster_safe:
            return WaitForHealthyStore(f"Store not cluster-safe member={index}")
        if health.member_count != statefulset.replicas:
            return WaitForHealthyStore(
                f"Store member count differs member={index} members={health.member_count} "
                f"replicas={statefulset.replicas}"
            )
    return RestartMember(pod=outdated[0], update_revision=update)
