"""Deleting a SnapshotJob: stop its driver, destroy its automatic snapshots, keep its exports.

A deleted job holds a finalizer until this is done. Its driver is stopped without a snapshot
(CANCEL_FORCEFUL: nothing will restore it), and the automatic snapshot maps are destroyed only
once no driver may still write them; exported snapshots outlive the job on purpose, so a new
job can start from them.
"""

from __future__ import annotations

from snapshot_operator.reconcile.actions import (
    Action,
    DeleteDriverPod,
    DeleteSnapshotMaps,
    EmitEvent,
    EventReason,
    RemoveFinalizer,
    Requeue,
)
from snapshot_operator.reconcile.plan import Plan
from snapshotjob_contract import all_snapshot_map_names


def delete(plan: Plan) -> tuple[Action, ...]:
    """The job is being deleted: CANCEL_FORCEFUL, then destroy its automatic snapshot maps."""
    running = plan.pods_that_may_run()
    actions: list[Action] = []
    for pod in running:
        if not pod.deleting:
            actions.append(DeleteDriverPod(pod.name))
            actions.append(
                EmitEvent(
                    EventReason.CANCELLED,
                    f"Job is being deleted, cancelling its execution without a snapshot "
                    f"mode=CANCEL_FORCEFUL pod={pod.name}",
                )
            )
    if running:
        actions.append(Requeue(plan.settings.store_retry_seconds))
        return tuple(actions)
    actions += [DeleteDriverPod(pod.name) for pod in plan.obs.pods if not pod.deleting]
    uid = plan.obs.job.uid
    # Every name the pair may have had: names carry the backup count, which may have changed.
    maps = all_snapshot_map_names(uid)
    actions.append(DeleteSnapshotMaps(maps))
    actions.append(
        EmitEvent(
            EventReason.SNAPSHOT_MAPS_DELETED,
            f"Destroyed the job's automatic snapshot maps uid={uid} count={len(maps)}, "
            "exports are kept",
        )
    )
    actions.append(RemoveFinalizer())
    return tuple(actions)
