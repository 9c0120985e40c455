"""A running execution that takes no snapshot: reported, then ended through the restart policy.

A driver can be alive and still make no progress: a sink call that never returns, an epoch
waiting for executors that are gone, a driver cut off from the API server (its snapshots
need the record, which lives in the status). Its Pod runs, so nothing else here would ever
notice; an on-call engineer would, from the age of the restore point. The decision does what
they would, in two steps, both measured from the later of the restore point's time and the
moment the execution's pipeline started (a new execution gets the whole bound, whatever the
age of the snapshot it restored):

1. Past the staleness bound (``stale_snapshot_intervals`` intervals plus the slack, the one
   ``SnapshotHealthy`` uses, or half the stall bound if that is sooner), the job is Degraded
   ``SnapshotStale`` with a Warning Event, so Argo CD and alerts show it while there is still
   time to look.
2. Past ``spec.stallDetection``'s bound, the driver Pod is deleted and the execution counted
   as a failure (``DriverStalled``): a restart from the last snapshot after the backoff, and
   FAILED after ``maxRestarts`` for a job that stalls every time. Ending an execution at any
   moment is safe: the next one restores the last snapshot (docs/concepts/protocol.md).

The driver bounds its own steps too (an epoch or a sink call past its timeout ends the
execution with exit 70); this is for what the driver cannot see of itself.
"""

from __future__ import annotations

from datetime import datetime

from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.exits import failed
from snapshot_operator.reconcile.observation import DriverPod, PodPhase
from snapshot_operator.reconcile.plan import Plan, Problem
from snapshotjob_contract import ConditionReason, ProcessingGuarantee, SnapshotJobSpec


def progress_since(plan: Plan) -> datetime | None:
    """When the running execution last showed progress: its last snapshot or its start.

    Returns:
        The later of the restore point's time and the pipeline's reported start (never
        before the execution's own start); None if the pipeline has not reported running.
    """
    status = plan.status
    execution = status.execution
    reported = status.pipeline_started
    if execution is None or reported is None or not status.pipeline_runs():
        return None
    started = max(reported.time, execution.started_at)
    taken = status.last_snapshot_time
    return started if taken is None else max(started, taken)


def snapshotted_since_start(plan: Plan) -> bool:
    """Whether the running execution has taken a snapshot of its own since its pipeline started.

    A long run resets the restart count only with this (or for a job without snapshots): a
    stalled execution runs for its whole bound, and would otherwise reset the count that ends
    a job which stalls every time.
    """
    plan.update_last_snapshot_time()
    status = plan.status
    reported = status.pipeline_started
    taken = status.last_snapshot_time
    return reported is not None and taken is not None and taken >= reported.time


def watch_for_stall(plan: Plan, spec: SnapshotJobSpec, pod: DriverPod) -> bool:
    """Reports a running execution whose snapshots stopped, and ends it past the bound.

    Args:
        plan: The decision; the current execution's pipeline runs and no request is pending.
        spec: The job's spec.
        pod: The current execution's driver Pod, neither terminal nor being deleted.

    Returns:
        Whether the execution was ended (counted as a failure): the caller does nothing more.
    """
    if spec.processing_guarantee is ProcessingGuarantee.NONE or pod.phase is not PodPhase.RUNNING:
        return False
    # The restore point as the record says now: _finish sets lastSnapshotTime from it later.
    plan.update_last_snapshot_time()
    since = progress_since(plan)
    if since is None:
        return False
    execution = plan.status.execution
    assert execution is not None
    age = (plan.now - since).total_seconds()
    stale_after = (
        spec.snapshot_interval_seconds * plan.settings.stale_snapshot_intervals
        + plan.settings.stale_snapshot_slack_seconds
    )
    stall = spec.stall_detection
    bound = stall.bound_seconds(spec.snapshot_interval_seconds)
    if stall.enabled:
        # A short bound is still reported before it ends the execution.
        stale_after = min(stale_after, bound // 2)
    since_text = since.strftime("%Y-%m-%dT%H:%M:%SZ")
    record = plan.status.record()
    if stall.enabled and age >= bound:
        message = (
            f"No snapshot for boundSeconds={bound} since={since_text} while the driver ran, "
            f"ended the execution executionId={execution.id} attempt={execution.attempt} "
            f"pod={pod.name} snapshotId={record.snapshot_id}; it restarts from the last "
            "snapshot (spec.stallDetection); see the driver's log for the step it was in"
        )
        plan.delete_pod(pod)
        plan.event(EventReason.DRIVER_STALLED, message)
        failed(plan, spec, ConditionReason.DRIVER_STALLED, message)
        return True
    if age >= stale_after:
        ending = (
            f"; the execution is ended at boundSeconds={bound} unless a snapshot completes"
            if stall.enabled
            else "; stallDetection is off, nothing ends it"
        )
        plan.stalled = Problem(
            ConditionReason.SNAPSHOT_STALE,
            f"No snapshot for staleAfterSeconds={stale_after} since={since_text} while the "
            f"driver runs executionId={execution.id} snapshotId={record.snapshot_id}{ending}",
        )
    due = [limit for limit in (stale_after, bound if stall.enabled else None) if limit]
    later = [limit - age for limit in due if limit > age]
    if later:
        plan.requeue(min(later))
    return False
