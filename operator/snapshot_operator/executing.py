"""One reconcile: read, decide, and perform the decided actions in order.

This is the only place that joins the pure decision (:func:`snapshot_operator.reconcile.decide`)
to the world, and it adds no judgement of its own: it reads the job, its driver Pods and the
store's health, lets ``observe`` and ``decide`` turn them into actions, and performs those in
the order given, stopping at the first error. Everything it writes to the status is guarded
by the ``resourceVersion`` of the read (then of its own previous write), so a half-performed
list is harmless: the next reconcile reads again and decides the same, or better.

Blocking by design (the Kubernetes and Hazelcast clients are synchronous); the kopf handlers
run it in a worker thread.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from snapshot_operator import creating, deleting, eventing, fetching, patching, store_health
from snapshot_operator.api import ExportedSnapshot, ExportFailureStatus, SnapshotJobSpec
from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.reconcile import (
    Action,
    CopySnapshotToExport,
    CreateDriverPod,
    DeleteDriverPod,
    DeleteSnapshotMaps,
    EmitEvent,
    Observation,
    PatchStatus,
    RemoveFinalizer,
    RequestExport,
    RequestTermination,
    Requeue,
    decide,
    observe,
    read_spec,
)
from snapshot_operator.settings import OperatorSettings
from snapshot_operator.snapshot_maps import SnapshotMaps
from spark_runtime.protocol import SnapshotCorrupted, SnapshotStoreError

log = logging.getLogger(__name__)

RETRY_STALE_SECONDS = 0.05
"""How soon to decide again after a write lost the optimistic lock: at once, the job moved."""


@dataclass(frozen=True)
class Runtime:
    """What a reconcile needs besides the job: clients and settings, one per operator.

    Attributes:
        api: Kubernetes API client.
        settings: The operator's settings.
        maps: The Hazelcast snapshot map operations.
    """

    api: client.ApiClient
    settings: OperatorSettings
    maps: SnapshotMaps


@dataclass(frozen=True)
class Outcome:
    """How a reconcile ended.

    Attributes:
        requeue_after: Decide again after this many seconds even if nothing changes.
        finalizer_removable: The job is being deleted and its cleanup is done.
        gone: The job no longer exists.
    """

    requeue_after: float
    finalizer_removable: bool = False
    gone: bool = False


def store_of(runtime: Runtime, spec: SnapshotJobSpec | None) -> tuple[tuple[str, ...], str]:
    """Returns the members and cluster name of the store a job uses."""
    settings = runtime.settings
    if spec is not None and spec.hazelcast.address is not None:
        members = tuple(part.strip() for part in spec.hazelcast.address.split(",") if part)
        return members, spec.hazelcast.cluster_name or settings.store_cluster_name
    return settings.store_members, settings.store_cluster_name


def reconcile(runtime: Runtime, namespace: str, name: str) -> Outcome:
    """Reads the job and its world, decides, and performs the actions.

    Returns:
        When to look again; whether the finalizer may go.

    Raises:
        kubernetes.client.exceptions.ApiException: On API errors other than conflicts.
        spark_runtime.protocol.errors.ProtocolError: If a store operation failed.
    """
    started = time.perf_counter()
    raw = fetching.read_job(runtime.api, namespace, name)
    if raw is None:
        return Outcome(requeue_after=0, gone=True)
    uid = str(raw["metadata"]["uid"])
    pods = fetching.list_driver_pods(runtime.api, namespace, uid)
    spec = read_spec(raw.get("spec"))
    members, _ = store_of(runtime, spec if isinstance(spec, SnapshotJobSpec) else None)
    health = store_health.read_health(members, runtime.settings.health_timeout_seconds)
    read = time.perf_counter()
    observation = observe(raw, pods, health, datetime.now(UTC))
    actions = decide(observation, runtime.settings.decision)
    decided = time.perf_counter()
    try:
        outcome = _perform(runtime, observation, raw, actions)
    except patching.StaleObservation as stale:
        log.info("Deciding again %s", stale)
        return Outcome(requeue_after=RETRY_STALE_SECONDS)
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
    return outcome


def _perform(
    runtime: Runtime,
    observation: Observation,
    raw: dict[str, Any],
    actions: Sequence[Action],
) -> Outcome:
    job = observation.job
    api = runtime.api
    version = str(raw["metadata"]["resourceVersion"])
    # The status as this decision's writes leave it, for writes that extend a list.
    status: dict[str, Any] = dict(raw.get("status") or {})
    requeue: float = runtime.settings.decision.resync_seconds
    removable = False
    context = f"namespace={job.namespace} name={job.name}"
    for action in actions:
        match action:
            case PatchStatus(patch=patch):
                version = patching.patch_status(api, job.namespace, job.name, version, patch)
                status.update(patch)
                log.info("Patched status %s fields=%s", context, ",".join(sorted(patch)))
            case RequestTermination() | RequestExport():
                patch = action.status_patch(datetime.now(UTC))
                version = patching.patch_status(api, job.namespace, job.name, version, patch)
                status.update(patch)
                log.info("Requested from the driver %s request=%s", context, action)
            case CreateDriverPod():
                spec = observation.spec
                if not isinstance(spec, SnapshotJobSpec):
                    raise TypeError(f"Decision created a driver for an invalid spec {context}")
                members, cluster = store_of(runtime, None)
                creating.ensure_driver_identity(api, job)
                pod = build_driver_pod(
                    job,
                    spec,
                    action,
                    store_address=",".join(members) or None,
                    store_cluster_name=cluster,
                )
                created = creating.create_pod(api, pod)
                log.info(
                    "Created driver pod %s pod=%s executionId=%s new=%s",
                    context,
                    action.pod_name,
                    action.execution_id,
                    created,
                )
            case DeleteDriverPod(pod_name=pod_name):
                existed = deleting.delete_pod(api, job.namespace, pod_name)
                log.info("Deleted driver pod %s pod=%s existed=%s", context, pod_name, existed)
            case CopySnapshotToExport():
                version = _copy(runtime, observation, version, status, action)
            case DeleteSnapshotMaps(map_names=map_names):
                spec = observation.spec
                members, cluster = store_of(
                    runtime, spec if isinstance(spec, SnapshotJobSpec) else None
                )
                runtime.maps.destroy(members, cluster, map_names)
                log.info("Destroyed snapshot maps %s maps=%s", context, ",".join(map_names))
            case EmitEvent():
                eventing.emit_event(api, job, action, runtime.settings.instance)
            case RemoveFinalizer():
                removable = True
            case Requeue(after_seconds=after):
                requeue = after
    return Outcome(requeue_after=requeue, finalizer_removable=removable)


def _copy(
    runtime: Runtime,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CopySnapshotToExport,
) -> str:
    """Copies the restore point to the export, then records the export in the status.

    A copy the store failed or that did not validate is recorded in ``status.exportFailure``
    (attempts counted per export name) instead of raised: the decision retries it with backoff
    and gives up after a few attempts, which it can only do if it sees the outcome.
    """
    job = observation.job
    spec = observation.spec
    members, cluster = store_of(runtime, spec if isinstance(spec, SnapshotJobSpec) else None)
    try:
        copied = runtime.maps.copy(
            members,
            cluster,
            source_map=action.source_map,
            target_map=action.export_map,
            snapshot_id=action.snapshot_id,
        )
    except (SnapshotStoreError, SnapshotCorrupted) as error:
        return _copy_failed(runtime, observation, version, status, action, error)
    exported = ExportedSnapshot(
        name=action.export_name,
        snapshot_id=copied.snapshot_id,
        num_bytes=copied.num_bytes,
        created_at=datetime.now(UTC),
        terminal=False,
    )
    kept = [
        entry
        for entry in status.get("exportedSnapshots") or ()
        if entry.get("name") != action.export_name
    ]
    patch = {"exportedSnapshots": [*kept, exported.to_json()]}
    version = patching.patch_status(runtime.api, job.namespace, job.name, version, patch)
    status.update(patch)
    log.info(
        "Copied snapshot to export namespace=%s name=%s export=%s snapshotId=%s numBytes=%s",
        job.namespace,
        job.name,
        action.export_name,
        copied.snapshot_id,
        copied.num_bytes,
    )
    return version


def _copy_failed(
    runtime: Runtime,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CopySnapshotToExport,
    error: Exception,
) -> str:
    """Records a failed copy in ``status.exportFailure``, counting attempts per export."""
    job = observation.job
    previous = status.get("exportFailure") or {}
    attempts = (
        int(previous.get("attempts", 0)) + 1 if previous.get("name") == action.export_name else 1
    )
    failure = ExportFailureStatus(
        name=action.export_name,
        attempts=attempts,
        message=f"{type(error).__name__}: {error}",
        time=datetime.now(UTC),
    )
    patch = {"exportFailure": failure.to_json()}
    version = patching.patch_status(runtime.api, job.namespace, job.name, version, patch)
    status.update(patch)
    log.warning(
        "Copy to export failed namespace=%s name=%s export=%s attempts=%d error=%s",
        job.namespace,
        job.name,
        action.export_name,
        attempts,
        error,
    )
    return version
