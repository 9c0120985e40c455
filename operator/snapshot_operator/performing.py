"""Performs a decision's actions in order, stopping at the first error.

Consecutive status writes go in one request locked on the job's ``resourceVersion`` (then on
its own previous write's); each other action is handed to its performer: the Pods'
(:mod:`snapshot_operator.launching`), the export copy's (:mod:`snapshot_operator.copying`),
a kept export's (:mod:`snapshot_operator.exports_executing`), or done here when it is one
gateway call. Nothing here decides: the actions say what, and in which order.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from snapshot_operator.copying import copy_to_export
from snapshot_operator.job_copies import delete_job_copies
from snapshot_operator.launching import create_driver, create_upgrade_check
from snapshot_operator.reconcile import (
    Action,
    CopySnapshotToExport,
    CreateDriverPod,
    CreateUpgradeCheckPod,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    DeleteUpgradeCheckPod,
    EmitEvent,
    Observation,
    PatchStatus,
    RemoveFinalizer,
    Requeue,
)
from snapshot_operator.reconcile.actions import KeepExport, status_writes
from snapshot_operator.services import RETRY_STALE_SECONDS, Outcome, Services, store_of
from snapshotjob_contract import SnapshotJobSpec

log = logging.getLogger(__name__)


def perform(
    services: Services,
    observation: Observation,
    raw: dict[str, Any],
    status: dict[str, Any],
    actions: Sequence[Action],
) -> Outcome:
    """Performs the actions in order; ``status`` follows the writes (for writes that extend
    a list, and for the caller)."""
    job = observation.job
    kube = services.kube
    version = str(raw["metadata"]["resourceVersion"])
    requeue: float = services.settings.decision.resync_seconds
    removable = False
    context = f"namespace={job.namespace} name={job.name}"
    index = 0
    while index < len(actions):
        writes = status_writes(actions, index, services.clock())
        if writes:
            # Consecutive status writes that touch different fields go in one request (one
            # round trip less on the way to a termination request), applied as one.
            patch = {key: value for _, part in writes for key, value in part.items()}
            version = kube.patch_status(job.namespace, job.name, version, patch)
            status.update(patch)
            for written, part in writes:
                if isinstance(written, PatchStatus):
                    log.info("Patched status %s fields=%s", context, ",".join(sorted(part)))
                else:
                    log.info("Requested from the driver %s request=%s", context, written)
            index += len(writes)
            continue
        action = actions[index]
        index += 1
        match action:
            case CreateDriverPod():
                if not create_driver(services, observation, version, status, action):
                    # The rest (the start's Events) did not happen; the decision reports it.
                    # The failure was written to the status: its version is not kept here.
                    return Outcome(requeue_after=RETRY_STALE_SECONDS)
            case DeleteDriverPod(pod_name=pod_name, at_once=at_once):
                existed = kube.delete_pod(job.namespace, pod_name, at_once=at_once)
                log.info(
                    "Deleted driver pod %s pod=%s existed=%s atOnce=%s",
                    context,
                    pod_name,
                    existed,
                    at_once,
                )
            case CreateUpgradeCheckPod():
                create_upgrade_check(services, observation, action)
            case DeleteUpgradeCheckPod(pod_name=pod_name):
                existed = kube.delete_pod(job.namespace, pod_name)
                log.info(
                    "Deleted upgrade check pod %s pod=%s existed=%s", context, pod_name, existed
                )
            case CopySnapshotToExport():
                version = copy_to_export(services, observation, version, status, action)
            case DeleteSnapshotMaps(map_names=map_names):
                spec = observation.spec
                members, cluster = store_of(
                    services, spec if isinstance(spec, SnapshotJobSpec) else None
                )
                services.store.destroy_maps(members, cluster, map_names)
                log.info("Destroyed snapshot maps %s maps=%s", context, ",".join(map_names))
            case DeleteDurableCopies():
                event = delete_job_copies(
                    services.durable, services.settings.durable_storage, action
                )
                log.info(
                    "Disposed of a deleted job's durable copies %s map=%s outcome=%s",
                    context,
                    action.map_name,
                    event.reason if event else "none",
                )
                if event is not None:
                    kube.emit_job_event(job, event)
            case EmitEvent():
                kube.emit_job_event(job, action)
            case KeepExport():
                # Imported here: exports_executing imports executing, which imports this.
                from snapshot_operator.exports_executing import keep_export

                keep_export(services, job, action)
            case RemoveFinalizer():
                removable = True
            case Requeue(after_seconds=after):
                requeue = after
    return Outcome(requeue_after=requeue, finalizer_removable=removable, resource_version=version)
