"""A reconcile's reads: the job, its driver Pods and the store's health, at once where it can.

The first look is made on a cheap view (the current driver read by name, the other Pods from
the API server's watch cache, reads started early on what the previous reconcile saw); the
second look, for a decision that acts beyond the status, reads the job again and lists its
Pods consistently. Nothing here judges what it reads: it hands the decision
(:func:`snapshot_operator.reconcile.observe`) what the world looks like.
"""

from __future__ import annotations

from collections.abc import Mapping
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from snapshot_operator.reconcile import parse_spec
from snapshot_operator.reconcile.exports import with_requested_export
from snapshot_operator.services import Seen, Services, store_of
from snapshotjob_contract import SnapshotJobSpec
from snapshotjob_contract.pods import LABEL_JOB_UID

READS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="reconcile-read")
"""Where a reconcile makes its independent reads at once. Shared by the jobs' reconciles,
which run in the event loop's default threads (one at a time per job): a reconcile has at
most four reads here at a time (the export list, the Pods' list, the current driver, the
store's health; the job is read in its own thread), so 32 threads serve eight jobs
reconciling at the same moment before any read queues; none of these reads waits for
another."""


class EarlyReads:
    """A reconcile's reads that need the job, started before the job is read.

    The Pods' list needs the job's uid, the current driver's read its name in the status, the
    store's health the members its spec names: read after the job, each waited for the job's
    read first (5 to 8 ms for the driver, ``bench/reconcile_latency.py``). Started on what
    the job's previous reconcile saw, they run at the same time as the job's read (and the
    export objects'); the reconcile takes each only if the job, once read, names the same
    uid, driver and members, and reads it again otherwise.

    A driver Pod read a moment before the status it is judged against, not after, is a view
    the executor already handles: the Pod may change right after any read, its change wakes
    the loop again (the daemon clears its wake before the reconcile reads anything), and the
    status writes are locked on the job's ``resourceVersion``. Its name is never reused by a
    later execution (job name and attempt), and the Pods the operator creates or deletes
    are created or deleted by an earlier reconcile of the same loop, before both reads.

    The driver Pod as the watch delivered it stands for its read when the job's loop hands it
    (:mod:`snapshot_operator.reconcile.freshness` says when it may): the view is then no
    older than the one the previous decision was made on, the same guarantee a read gives.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        seen: What the job's previous reconcile saw.
        driver: The driver Pod named in ``seen`` as the watch delivered it, or None.
    """

    def __init__(
        self,
        services: Services,
        namespace: str,
        seen: Seen,
        driver: dict[str, Any] | None = None,
    ) -> None:
        kube = services.kube
        self.seen = seen
        self.driver: Future[dict[str, Any] | None] | None = None
        if seen.driver_pod is not None and _named(driver) == seen.driver_pod:
            self.driver = Future()
            self.driver.set_result(driver)
        elif seen.driver_pod is not None:
            # Submitted slowest first: the threads start their requests one after the other
            # (each holds the interpreter lock to build its request), and a Pod's GET, read
            # from etcd, takes longer than a list from the API server's cache.
            self.driver = READS.submit(kube.read_pod, namespace, seen.driver_pod)
        self.health = READS.submit(
            services.store.read_health, seen.members, services.settings.health_timeout_seconds
        )
        self.pods = READS.submit(kube.list_driver_pods, namespace, seen.uid, cached=True)


def _named(pod: Mapping[str, Any] | None) -> str | None:
    name = ((pod or {}).get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None


def read_early(
    services: Services,
    namespace: str,
    seen: Seen | None,
    driver: dict[str, Any] | None = None,
) -> EarlyReads | None:
    """Starts the reads of a job's next reconcile that the previous one lets it guess.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        seen: What the job's previous reconcile saw.
        driver: The driver Pod ``seen`` names, as the watch delivered it, taken instead of
            its read; None to read it.

    Returns:
        The reads under way, for :func:`snapshot_operator.executing.reconcile_once`; None
        without a previous reconcile.
    """
    return EarlyReads(services, namespace, seen, driver) if seen is not None else None


@dataclass(frozen=True)
class Look:
    """What one look at a job's world read, for its observation.

    Attributes:
        raw: The job as its decision takes it (with the requested export).
        uid: The job's uid.
        members: The members of the store the job uses.
        cluster: That store's cluster name.
        pods: The job's Pods.
        health: The store members' health.
    """

    raw: dict[str, Any]
    uid: str
    members: tuple[str, ...]
    cluster: str
    pods: list[dict[str, Any]]
    health: dict[str, Any] | None


def first_look(
    services: Services,
    namespace: str,
    raw: dict[str, Any],
    requested_export: str | None,
    early: EarlyReads | None,
) -> Look:
    """Reads the world of the job ``raw`` for a first decision, independent reads at once."""
    raw, uid, members, cluster = _taken(services, raw, requested_export)
    # Independent reads, made at once: the slowest one sets the time, not their sum.
    health_read = (
        early.health
        if early is not None and early.seen.members == members
        else READS.submit(
            services.store.read_health, members, services.settings.health_timeout_seconds
        )
    )
    pods = _first_look_pods(services, namespace, uid, raw, early)
    health = health_read.result()
    return Look(raw, uid, members, cluster, pods, health)


def second_look(
    services: Services,
    namespace: str,
    name: str,
    requested_export: str | None,
    first: Look,
) -> Look | None:
    """Reads the job again and lists its Pods consistently, for a decision that acts on them.

    The job is read again first: the Pods' writes are not locked on its version, so a view of
    it that missed a write (the watch's, or one made before the export reconcile wrote) must
    not lead. The store's health is read again only if the job now names other members.

    Returns:
        The new look; None if the job no longer exists.
    """
    fresh = services.kube.read_job(namespace, name)
    if fresh is None:
        return None
    raw, uid, members, cluster = _taken(services, fresh, requested_export)
    health = first.health
    if members != first.members:
        health = services.store.read_health(members, services.settings.health_timeout_seconds)
    pods = services.kube.list_driver_pods(namespace, uid)
    return Look(raw, uid, members, cluster, pods, health)


def _taken(
    services: Services, raw: dict[str, Any], requested_export: str | None
) -> tuple[dict[str, Any], str, tuple[str, ...], str]:
    """The job as its decision takes it (with the requested export), its uid and store."""
    if requested_export is not None:
        raw = {
            **raw,
            "spec": with_requested_export(raw.get("spec"), raw.get("status"), requested_export),
        }
    spec = parse_spec(raw.get("spec"))
    members, cluster = store_of(services, spec if isinstance(spec, SnapshotJobSpec) else None)
    return raw, str(raw["metadata"]["uid"]), members, cluster


def _first_look_pods(
    services: Services,
    namespace: str,
    uid: str,
    raw: Mapping[str, Any],
    early: EarlyReads | None,
) -> list[dict[str, Any]]:
    """The job's Pods for a first decision: the current driver as it is, the others cached.

    A consistent list is answered from the API server's watch cache once that cache has
    caught up with etcd (``ConsistentListFromCache``, GA in Kubernetes 1.34), which it learns
    from a progress request sent every 100 ms while a list waits: 0 to 100 ms per list, most
    of the 98 ms between a suspend and its termination request (``bench/reconcile_latency.py``).
    The current driver Pod is read by name instead (a GET is consistent and quick), and the
    others come from the watch cache: a decision on this view is performed only if it writes
    no more than the status (see
    :func:`snapshot_operator.reconcile.actions.acts_beyond_the_status`), which the other Pods
    cannot make wrong: they only hold back a start or ask for a deletion, which are decided
    again. Both reads are taken from ``early`` where it guessed the job's uid and driver right.
    """
    kube = services.kube
    listed = (
        early.pods
        if early is not None and early.seen.uid == uid
        else READS.submit(kube.list_driver_pods, namespace, uid, cached=True)
    )
    current = ((raw.get("status") or {}).get("execution") or {}).get("driverPod")
    if not isinstance(current, str):
        pod = None
    elif early is not None and early.driver is not None and early.seen.driver_pod == current:
        pod = early.driver.result()
    else:
        pod = kube.read_pod(namespace, current)
    cached = listed.result()
    if not isinstance(current, str):
        return cached
    others = [other for other in cached if other["metadata"]["name"] != current]
    if pod is not None and (pod["metadata"].get("labels") or {}).get(LABEL_JOB_UID) == uid:
        others.append(pod)
    return others
