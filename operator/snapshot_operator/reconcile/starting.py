"""Starting an execution: the fencing token, the driver Pod's name, and the last gate.

This is the only place that creates a driver Pod, so the "never two drivers" rule is kept
here: a Pod is created only when no Pod of the job may still run and the store allows a start,
and the new execution's id (the fencing token) goes into the same status patch that precedes
the Pod's creation, so a driver of an older execution can no longer move the record.

When the API server does not create the Pod (or its identity), the executor records that in
``status.startFailure`` and the same execution is created again, with its id, after a backoff:
its Pod never existed, so no driver ever held the id. A new id per attempt would be a status
write per attempt, and each write wakes the next reconcile: a loop without a bound.
"""

from __future__ import annotations

import hashlib
from datetime import datetime, timedelta

from snapshot_operator.reconcile.actions import CreateDriverPod, EventReason
from snapshot_operator.reconcile.plan import Plan
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionReason,
    ConditionType,
    ExecutionRecord,
    ExecutionRecordStatus,
    ExecutionStatus,
    Phase,
    SnapshotJobSpec,
    StartFailureStatus,
    TerminationMode,
    UpgradeMode,
    quorum_of,
)

_MAX_POD_NAME = 63


def driver_pod_name(job_name: str, attempt: int) -> str:
    """Returns the driver Pod's name of an execution; at most 63 characters, a DNS label.

    Spark names the driver's Service after the Pod, and Service names are DNS labels.
    """
    suffix = f"-driver-{attempt}"
    if len(job_name) + len(suffix) <= _MAX_POD_NAME:
        return job_name + suffix
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    keep = _MAX_POD_NAME - len(suffix) - len(digest) - 1
    return f"{job_name[:keep].rstrip('-')}-{digest}{suffix}"


def execution_id(job_uid: str, attempt: int, started_at: datetime) -> str:
    """Returns the fencing token of an execution (at most 63 characters, a label value).

    The job's uid and the attempt make it unique while the status keeps its attempt count;
    the start time keeps it unique even if the status was lost and attempts count from 1 again,
    so a driver of a forgotten execution can never pass for the current one.
    """
    millis = int(started_at.timestamp() * 1000)
    return f"{job_uid}-{attempt}-{millis:x}"


def start_or_wait(plan: Plan, spec: SnapshotJobSpec, *, restart_reason: str | None = None) -> None:
    """Starts a new execution if no driver may run and the store allows it, else waits.

    Args:
        plan: The decision.
        spec: The job's spec.
        restart_reason: For a restart at once after the driver's exit: the reason of the
            RESTART_FORCEFUL marker the status keeps while the restart waits, so that neither a
            backoff nor ``suspend`` can skip the restore. None for any other start, or when the
            status already holds the marker.
    """
    status = plan.status
    if plan.store_problem is not None or plan.pods_that_may_run():
        # NOT_RUNNING only until the first start; afterwards the job is between executions.
        waiting = Phase.NOT_RUNNING if status.phase is Phase.NOT_RUNNING else Phase.RESTARTING
        plan.update(phase=waiting)
        if restart_reason is not None and status.termination is None:
            plan.update(
                termination=plan.forceful_marker(TerminationMode.RESTART_FORCEFUL, restart_reason)
            )
        plan.requeue(plan.settings.store_retry_seconds)
        return
    _start(plan, spec)


def retry_start(plan: Plan, spec: SnapshotJobSpec, failure: StartFailureStatus) -> None:
    """Creates the starting execution's objects again after the backoff, or gives up.

    Args:
        plan: The decision; its status names the execution the failure is about.
        spec: The job's spec, whose fingerprint is the execution's.
        failure: What the API server answered to the last attempt.
    """
    execution = plan.status.execution
    assert execution is not None
    limit = plan.settings.start_attempts
    if failure.attempts >= limit:
        message = start_failure_message(failure, limit)
        plan.update(phase=Phase.FAILED)
        plan.fail(ConditionReason.CREATE_FAILED, message)
        plan.event(
            EventReason.RESTART_LIMIT_REACHED,
            f"{message}; giving up, change the spec to start again",
        )
        return
    reported = plan.obs.status.condition(ConditionType.DEGRADED)
    if reported is None or reported.reason != ConditionReason.CREATE_FAILED:
        # Report first: this decision's Events would be lost if the create failed again, and
        # the next decision would not emit them (Degraded would already say CreateFailed).
        # Degraded gives this reason precedence, so the next decision is past this point.
        plan.requeue(0)
        return
    due = failure.time + timedelta(seconds=spec.restart_policy.backoff(failure.attempts))
    if plan.now < due:
        plan.requeue((due - plan.now).total_seconds())
        return
    if plan.store_problem is not None or plan.pods_that_may_run():
        plan.requeue(plan.settings.store_retry_seconds)
        return
    record = plan.status.record()
    initial = spec.initial_snapshot_name if record.snapshot_id == NO_SNAPSHOT else None
    plan.effects.append(
        CreateDriverPod(execution.driver_pod, execution.id, execution.attempt, initial)
    )
    # Emitted only if the create succeeds: the executor stops at a failed one.
    plan.event(
        EventReason.EXECUTION_STARTED,
        f"Started an execution executionId={execution.id} attempt={execution.attempt} "
        f"pod={execution.driver_pod} failedAttempts={failure.attempts}",
    )


def start_failure_message(failure: StartFailureStatus, limit: int) -> str:
    """Returns what Degraded and ``lastFailure`` say about objects the API did not create."""
    return (
        f"API server did not create the driver's objects object={failure.object} "
        f"executionId={failure.execution_id} attempts={failure.attempts} maxAttempts={limit}: "
        f"{failure.message}"
    )


def _start(plan: Plan, spec: SnapshotJobSpec) -> None:
    obs = plan.obs
    status = plan.status
    previous = status.execution
    attempt = previous.attempt + 1 if previous is not None else 1
    new_id = execution_id(obs.job.uid, attempt, plan.now)
    fingerprint = spec.execution_fingerprint()
    stored = status.record()
    record = stored
    if (
        spec.upgrade_mode is UpgradeMode.STATELESS
        and previous is not None
        and previous.spec_hash != fingerprint
        and record.snapshot_id != NO_SNAPSHOT
    ):
        # A fresh start: drop the restore point, never reuse a snapshot id (protocol.md, I3).
        record = ExecutionRecord(
            ongoing_snapshot_id=record.ongoing_snapshot_id, quorum_size=record.quorum_size
        )
        plan.update(last_snapshot_time=None)
        plan.event(
            EventReason.UPGRADING,
            f"Spec changed with upgradeMode=stateless, starting without the job's state "
            f"droppedSnapshotId={stored.snapshot_id}",
        )
    if spec.split_brain_protection and obs.store is not None:
        record = record.with_quorum_size(quorum_of(obs.store.member_count))
    if record != stored:
        stamp = int(plan.now.timestamp() * 1000)
        plan.update(execution_record=ExecutionRecordStatus.of(record.stamped(stamp)))
    initial = spec.initial_snapshot_name if record.snapshot_id == NO_SNAPSHOT else None
    pod_name = driver_pod_name(obs.job.name, attempt)
    plan.update(
        phase=Phase.STARTING,
        execution=ExecutionStatus(
            id=new_id,
            driver_pod=pod_name,
            started_at=plan.now,
            attempt=attempt,
            spec_hash=fingerprint,
            state_partitions=spec.state_partitions,
        ),
        termination=None,
        export_request=None,
        start_failure=None,
    )
    kept = plan.kept_driver_pod()
    for pod in obs.pods:
        # The last failed driver stays, for its log (it has stopped: no second driver).
        if pod.may_run or pod.name != kept:
            plan.delete_pod(pod)
    plan.effects.append(CreateDriverPod(pod_name, new_id, attempt, initial))
    if initial is not None:
        restore = f"initialSnapshotName={initial}"
    elif record.snapshot_id != NO_SNAPSHOT:
        restore = f"snapshotId={record.snapshot_id}"
    else:
        restore = "emptyState"
    plan.event(
        EventReason.EXECUTION_STARTED,
        f"Started an execution executionId={new_id} attempt={attempt} pod={pod_name} "
        f"restoreFrom={restore}",
    )
