"""Deleting a SnapshotJob: stop its driver, destroy its automatic snapshots, keep its exports.

A deleted job holds a finalizer until this is done. Its driver is stopped without a snapshot
(CANCEL_FORCEFUL: nothing will restore it), and the automatic snapshot maps and the periodic
durable copies of them are deleted only once no driver may still write them; exported
snapshots (and their durable copies) outlive the job on purpose, so a new job can start from
them. As with Flink's checkpoints and savepoints: what the job keeps for itself goes with it,
what was exported for people stays.
"""

from __future__ import annotations

from snapshot_operator.reconcile.actions import (
    Action,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    EmitEvent,
    EventReason,
    RemoveFinalizer,
    Requeue,
)
from snapshot_operator.reconcile.plan import Plan
from snapshotjob_contract import SnapshotJobSpec, all_snapshot_map_names
from snapshotjob_contract.record import durable_copy_map_name


def delete(plan: Plan) -> tuple[Action, ...]:
    """The job is being deleted: CANCEL_FORCEFUL, then destroy its automatic snapshot maps."""
    running = plan.pods_that_may_run()
    # Drivers on lost nodes are deleted at once already (lost_nodes): a graceful deletion of
    # them would never end.
    effects: list[Action] = list(plan.effects)
    events: list[Action] = list(plan.events)
    for pod in running:
        if not pod.deleting and pod.name not in plan.lost_drivers:
            effects.append(DeleteDriverPod(pod.name))
            events.append(
                EmitEvent(
                    EventReason.CANCELLED,
                    f"Job is being deleted, cancelling its execution without a snapshot "
                    f"mode=CANCEL_FORCEFUL pod={pod.name}",
                )
            )
    if running:
        return (*effects, *events, Requeue(plan.settings.store_retry_seconds))
    effects += [DeleteDriverPod(pod.name) for pod in plan.obs.pods if not pod.deleting]
    uid = plan.obs.job.uid
    # Every name the pair may have had: names carry the backup count, which may have changed.
    maps = all_snapshot_map_names(uid)
    effects.append(DeleteSnapshotMaps(maps))
    events.append(
        EmitEvent(
            EventReason.SNAPSHOT_MAPS_DELETED,
            f"Destroyed the job's automatic snapshot maps uid={uid} count={len(maps)}, "
            "exports are kept",
        )
    )
    spec = plan.obs.spec
    # Without a valid spec the job's own storage is unknown: only the installation's is tried.
    storage = spec.durable_storage if isinstance(spec, SnapshotJobSpec) else None
    effects.append(DeleteDurableCopies(durable_copy_map_name(uid), storage))
    return (*effects, *events, RemoveFinalizer())
