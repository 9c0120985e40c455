"""One reconcile: read, decide, and perform the decided actions in order.

This is the only place that joins the pure decision (:func:`snapshot_operator.reconcile.decide`)
to the world, and it adds no judgement of its own: it reads the job, its driver Pods and the
store's health (:mod:`snapshot_operator.observing`), lets ``observe`` and ``decide`` turn them
into actions, and performs those in the order given, stopping at the first error
(:mod:`snapshot_operator.performing`). Everything it writes to the status is guarded by the
``resourceVersion`` of the read (then of its own previous write), so a half-performed list is
harmless: the next reconcile reads again and decides the same, or better.

The Kubernetes API and the store arrive as gateways (:mod:`snapshot_operator.gateways`) in
:class:`Services` (:mod:`snapshot_operator.services`), built once by ``__main__``: this module
imports no client, and its unit tests give it in-memory gateways. Blocking by design (the
Kubernetes and Hazelcast clients are synchronous); the kopf handlers run it in a worker thread.
"""

from __future__ import annotations

__all__ = [
    "READS",
    "RETRY_STALE_SECONDS",
    "EarlyReads",
    "Outcome",
    "Seen",
    "Services",
    "read_early",
    "reconcile_once",
    "store_of",
]

import dataclasses
import logging
import time
from collections.abc import Mapping, Sequence
from typing import Any

from snapshot_operator.gateways import StaleObservation
from snapshot_operator.observing import READS, EarlyReads, first_look, read_early, second_look
from snapshot_operator.performing import perform as _perform
from snapshot_operator.reconcile import Action, CreateDriverPod, DeleteDriverPod, decide, observe
from snapshot_operator.reconcile.actions import acts_beyond_the_status
from snapshot_operator.services import RETRY_STALE_SECONDS, Outcome, Seen, Services, store_of
from snapshot_operator.spark_ui_executing import reconcile_spark_ui

log = logging.getLogger(__name__)


def reconcile_once(
    services: Services,
    namespace: str,
    name: str,
    requested_export: str | None = None,
    *,
    job: dict[str, Any] | None = None,
    early: EarlyReads | None = None,
) -> Outcome:
    """Reads the job and its world, decides, and performs the actions.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        name: The job's name.
        requested_export: The export a SnapshotJobExport object asks the job for, taken as if
            the spec asked for it unless the spec asks for an export of its own
            (:func:`snapshot_operator.reconcile.exports.with_requested_export`).
        job: The job as just read (by the export reconcile, after its export objects and
            with nothing written since), or as the watch delivered it once the watch has
            caught up with the last reconcile (:mod:`snapshot_operator.reconcile.freshness`);
            read here if None. A decision that acts beyond the status is made again on a
            fresh read either way.
        early: Reads started with the job's (:func:`read_early`), taken where the job names
            what they guessed.

    Returns:
        When to look again; whether the finalizer may go; what the reconcile saw.

    Raises:
        kubernetes.client.exceptions.ApiException: On API errors other than conflicts.
        snapshot_operator.gateways.StoreOperationFailed: If the store failed.
    """
    started = time.perf_counter()
    try:
        return _reconcile_once(services, namespace, name, requested_export, job, early, started)
    except Exception:
        services.metrics.reconcile_failed(time.perf_counter() - started)
        raise


def _reconcile_once(
    services: Services,
    namespace: str,
    name: str,
    requested_export: str | None,
    job: dict[str, Any] | None,
    early: EarlyReads | None,
    started: float,
) -> Outcome:
    metrics = services.metrics
    raw = job if job is not None else services.kube.read_job(namespace, name)
    if raw is None:
        metrics.job_gone(namespace, name)
        return Outcome(requeue_after=0, gone=True)
    look = first_look(services, namespace, raw, requested_export, early)
    read = time.perf_counter()
    observation = observe(look.raw, look.pods, look.health, services.clock())
    metrics.store_health(look.cluster, observation.store)
    actions = decide(observation, services.settings.decision)
    if acts_beyond_the_status(actions):
        # Starting, deleting or releasing acts on the other Pods too: decided again from a
        # consistent list of them, and only that decision is performed.
        again = second_look(services, namespace, name, requested_export, look)
        if again is None:
            metrics.job_gone(namespace, name)
            return Outcome(requeue_after=0, gone=True)
        look = again
        observation = observe(look.raw, look.pods, look.health, services.clock())
        actions = decide(observation, services.settings.decision)
    decided = time.perf_counter()
    raw, uid, members, pods = look.raw, look.uid, look.members, look.pods
    previous_phase = (raw.get("status") or {}).get("phase")
    # The status as this decision's writes leave it: what the next reconcile guesses from.
    status: dict[str, Any] = dict(raw.get("status") or {})
    try:
        outcome = _perform(services, observation, raw, status, actions)
    except StaleObservation as stale:
        log.info("Deciding again %s", stale)
        # Nothing the decision wanted was written: only the time is recorded.
        metrics.reconciled(
            namespace,
            name,
            seconds=time.perf_counter() - started,
            previous_phase=previous_phase,
            actions=(),
            observation=observation,
        )
        # The job's version is not known: the next reconcile reads it.
        return Outcome(requeue_after=RETRY_STALE_SECONDS, seen=_seen(uid, status, members, None))
    metrics.reconciled(
        namespace,
        name,
        seconds=time.perf_counter() - started,
        previous_phase=previous_phase,
        actions=actions,
        observation=observation,
    )
    if len(actions) > 1:
        # Only reconciles that did something: the timings say where a slow reaction went.
        log.info(
            "Reconciled namespace=%s name=%s actions=%d readMs=%.1f decideMs=%.1f performMs=%.1f",
            namespace,
            name,
            len(actions),
            (read - started) * 1000,
            (decided - read) * 1000,
            (time.perf_counter() - decided) * 1000,
        )
    if services.spark_ui is not None:
        version = reconcile_spark_ui(
            services.spark_ui, services.kube, observation, status, outcome.resource_version
        )
        outcome = dataclasses.replace(outcome, resource_version=version)
    seen = _seen(uid, status, members, outcome.resource_version)
    if seen.driver_pod is not None and not _acts_on_pods(actions):
        seen = dataclasses.replace(seen, driver_pod_version=_pod_version(pods, seen.driver_pod))
    return dataclasses.replace(outcome, seen=seen)


def _acts_on_pods(actions: Sequence[Action]) -> bool:
    return any(isinstance(action, CreateDriverPod | DeleteDriverPod) for action in actions)


def _pod_version(pods: Sequence[Mapping[str, Any]], name: str) -> str | None:
    """The version of the named Pod in the list the decision was made on, if it is there."""
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("name") == name:
            version = metadata.get("resourceVersion")
            return version if isinstance(version, str) else None
    return None


def _seen(uid: str, status: Mapping[str, Any], members: Sequence[str], version: str | None) -> Seen:
    driver = (status.get("execution") or {}).get("driverPod")
    return Seen(uid, driver if isinstance(driver, str) else None, tuple(members), version)
