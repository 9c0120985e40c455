"""Deleting a SnapshotJob: keep its state as an export (``Export``, the default) or destroy it.

A deleted job holds a finalizer until this is done, and ``spec.deletionPolicy`` says what
becomes of its state. Either way the job's automatic snapshot maps and the periodic durable
copies of them are destroyed only once no driver may still write them, and exports taken
before (and their durable copies) outlive the job, as Flink's savepoints outlive its jobs.

``Destroy`` is the operator's behaviour before the policy existed: the driver is stopped
without a snapshot (CANCEL_FORCEFUL: nothing will restore it), then the maps go.

``Export`` first keeps the job's state as one more export, named :func:`deletion_export_name`
(``<job>-deleted-<uid prefix>``), with a SnapshotJobExport that has no owner reference, so it
outlives the job and a new job starts from it (``spec.initialSnapshotName``). Level-based, as
the rest of the decision: each step is read back from the status and the Pods.

1. A running pipeline is asked for a terminal exported snapshot, as ``exportSnapshot.cancelJob``
   asks (CANCEL_GRACEFUL with the export's name; with durable storage the driver copies it
   there before it reports it). A graceful request already pending (a suspend, an upgrade) is
   served first: the restore point it leaves is kept instead. A request not served within the
   graceful timeout is escalated: the driver is stopped without a snapshot.
2. Any other driver (starting, not reporting its pipeline, or not served in time) is stopped
   without a snapshot: it has no state newer than the restore point.
3. Once no driver may run: a job that lists the export keeps it (:class:`KeepExport`), then
   its maps are destroyed and the finalizer goes. A job without a snapshot has nothing to
   keep and is destroyed as with ``Destroy``, which an Event says. Otherwise the operator
   copies the restore point to the export (:class:`CopySnapshotToExport`, as a suspended
   job's ``exportSnapshot``; the copy gets a durable copy where the installation's durable
   storage is configured), and the next decision keeps it.
4. A copy that fails (the store is down) is retried with backoff, a bounded number of times;
   then the deletion is held, with ``lastFailure`` ``DeletionHeld`` and a Warning Event: the
   state is never destroyed silently. A spec change starts another round of attempts;
   ``spec.deletionPolicy: Destroy`` deletes the job without keeping its state (a job being
   deleted still takes spec changes, its finalizer holds it).

kopf's deletion handler is not woken by the driver's writes (it sleeps for the delay it was
given), so a deletion that waits for a driver looks again every ``store_retry_seconds``.
"""

from __future__ import annotations

import re
from datetime import timedelta

from snapshot_operator.reconcile.actions import (
    Action,
    CopySnapshotToExport,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    EmitEvent,
    EventReason,
    KeepExport,
    RemoveFinalizer,
    Requeue,
)
from snapshot_operator.reconcile.observation import DriverPod, JobRef, PodPhase
from snapshot_operator.reconcile.phases import LIVE_PHASES
from snapshot_operator.reconcile.plan import Plan
from snapshotjob_contract import (
    NO_SNAPSHOT,
    DeletionPolicy,
    ExecutionRecord,
    ExportedSnapshot,
    ExportFailureStatus,
    ProcessingGuarantee,
    SnapshotJobSpec,
    TerminationMode,
    all_snapshot_map_names,
    export_map_name,
)
from snapshotjob_contract.record import JobIdentity, durable_copy_map_name

DELETION_HELD = "DeletionHeld"
"""``lastFailure.reason`` of a deletion held because the job's state could not be exported."""

JOB_DELETED = "JobDeleted"
"""``termination.reason`` of the terminal export a deletion asks the driver for."""

_NAME_ROOM = 63 - len("-deleted-") - 8
"""Characters of the job's name a deletion export's name keeps (a DNS label: 63 at most)."""


def deletion_export_name(job: JobRef) -> str:
    """The export a deletion keeps the job's state in: ``<job>-deleted-<uid prefix>``.

    Fixed by the job alone, so every decision of the deletion names the same export, and a
    job re-created under the same name gets another one. A DNS label of at most 63 characters.
    """
    base = re.sub(r"[^a-z0-9-]", "-", job.name.lower())[:_NAME_ROOM].strip("-") or "job"
    short = re.sub(r"[^a-z0-9]", "", job.uid.lower())[:8] or "0"
    return f"{base}-deleted-{short}"


def delete(plan: Plan) -> tuple[Action, ...]:
    """The job is being deleted: what its ``deletionPolicy`` asks, one step at a time.

    A spec the models reject has an unknown policy: it gets the default, ``Export``, which
    never destroys state that ``Destroy`` would keep.
    """
    spec = plan.obs.spec
    policy = spec.deletion_policy if isinstance(spec, SnapshotJobSpec) else DeletionPolicy.EXPORT
    if policy is DeletionPolicy.DESTROY:
        return _destroy(plan, "deletionPolicy=Destroy: its state is destroyed")
    return _keep_state(plan, spec if isinstance(spec, SnapshotJobSpec) else None)


def _destroy(plan: Plan, why: str, keep: KeepExport | None = None) -> tuple[Action, ...]:
    """Stops every driver without a snapshot, then destroys the job's maps and copies.

    Args:
        plan: The decision.
        why: The policy and what it does, for the Events.
        keep: The export to keep before anything is destroyed; None for none.
    """
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
                    f"mode=CANCEL_FORCEFUL pod={pod.name} {why}",
                )
            )
    if running:
        return (*effects, *events, Requeue(plan.settings.store_retry_seconds))
    if keep is not None:
        # First: if it cannot be kept, nothing below happens and the finalizer stays.
        effects.append(keep)
    effects += [DeleteDriverPod(pod.name) for pod in plan.obs.pods if not pod.deleting]
    uid = plan.obs.job.uid
    # Every name the pair may have had: names carry the backup count, which may have changed.
    maps = all_snapshot_map_names(uid)
    effects.append(DeleteSnapshotMaps(maps))
    if keep is None:
        events.append(
            EmitEvent(
                EventReason.DELETION_POLICY_APPLIED,
                f"Job is being deleted {why}; exports taken before are kept",
            )
        )
    else:
        events.append(EmitEvent(EventReason.DELETION_EXPORT_KEPT, _kept_message(keep)))
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


def _kept_message(keep: KeepExport) -> str:
    exported = keep.exported
    return (
        f"Kept the job's state deletionPolicy=Export exportName={exported.name} "
        f"snapshotId={exported.snapshot_id} numBytes={exported.num_bytes} "
        f"terminal={str(exported.terminal).lower()} "
        f"durableLocation={exported.durable_location or 'none'}; start a new job from it "
        f"with spec.initialSnapshotName={exported.name}"
    )


def _keep_state(plan: Plan, spec: SnapshotJobSpec | None) -> tuple[Action, ...]:
    """``Export``: one step towards keeping the job's state, then destroys the rest."""
    name = deletion_export_name(plan.obs.job)
    status = plan.status
    kept = status.exported(name)
    driver = _serving_driver(plan)
    if driver is not None and _ask_or_wait(plan, spec, driver, name, asked=kept is not None):
        return plan.actions()
    running = plan.pods_that_may_run()
    if running:
        # No state newer than the restore point, or not served in time: stopped forcefully.
        snapshot_id = status.record().snapshot_id
        keeping = (
            f"keeping the restore point snapshotId={snapshot_id}"
            if snapshot_id != NO_SNAPSHOT
            else "the job has no snapshot to keep"
        )
        for pod in running:
            if not pod.deleting and pod.name not in plan.lost_drivers:
                plan.delete_pod(pod)
                plan.event(
                    EventReason.CANCELLED,
                    f"Job is being deleted, cancelling its execution without a snapshot "
                    f"mode=CANCEL_FORCEFUL pod={pod.name} deletionPolicy=Export, {keeping}",
                )
        plan.requeue(plan.settings.store_retry_seconds)
        return plan.actions()
    # As the export reconcile sets it on the objects it creates (the policy's default, true,
    # for a spec it cannot read): whichever of the two creates the object, it is the same.
    dispose = spec.export_policy.dispose_on_delete if spec is not None else True
    if kept is not None:
        return _destroy(plan, "deletionPolicy=Export", KeepExport(kept, dispose))
    record = status.record()
    if record.snapshot_id == NO_SNAPSHOT:
        return _destroy(
            plan,
            f"deletionPolicy=Export exportName={name}: nothing to keep, the job has no snapshot",
        )
    if record.exported_snapshot_name == name:
        # The driver took the terminal export but did not list it (reporting it failed):
        # the record only ever names a validated snapshot, so it is listed from the record.
        plan.update(exported_snapshots=[*status.exported_snapshots, _listed(plan, record, name)])
        plan.requeue(plan.settings.store_retry_seconds)
        return plan.actions()
    _copy_or_hold(plan, record, name)
    return plan.actions()


def _serving_driver(plan: Plan) -> DriverPod | None:
    """The current driver, if its pipeline runs: only it can take a terminal snapshot."""
    status = plan.status
    execution = status.execution
    if execution is None or status.phase not in LIVE_PHASES or not status.pipeline_runs():
        return None
    return next(
        (
            pod
            for pod in plan.obs.pods
            if pod.execution_id == execution.id
            and pod.phase is PodPhase.RUNNING
            and not pod.deleting
            and pod.name not in plan.lost_drivers
        ),
        None,
    )


def _ask_or_wait(
    plan: Plan, spec: SnapshotJobSpec | None, driver: DriverPod, name: str, *, asked: bool
) -> bool:
    """Asks the running driver for the terminal export, or waits for a graceful request.

    Args:
        plan: The decision.
        spec: The job's spec; None if it is invalid (then nothing is asked).
        driver: The current driver, whose pipeline runs.
        name: The deletion export's name.
        asked: Whether the job lists the export already (nothing more to ask).

    Returns:
        Whether the driver is left running (asked, or waited for); False when it is to be
        stopped forcefully.
    """
    termination = plan.status.termination
    if termination is None:
        if asked or spec is None or spec.processing_guarantee is ProcessingGuarantee.NONE:
            return False
        execution = plan.status.execution
        assert execution is not None
        mode = TerminationMode.CANCEL_GRACEFUL
        plan.ask_to_stop(mode, JOB_DELETED, name)
        plan.event(
            EventReason.DELETION_POLICY_APPLIED,
            f"Job is being deleted deletionPolicy=Export exportName={name}, asking the driver "
            f"for a terminal export mode={mode.name} executionId={execution.id}",
        )
        _delete_others(plan, driver)
        plan.requeue(plan.settings.store_retry_seconds)
        return True
    if not termination.mode.terminal_snapshot:
        return False
    deadline = termination.requested_at + timedelta(seconds=plan.settings.graceful_timeout_seconds)
    if plan.now < deadline:
        # Ours or one pending before the deletion (a suspend, an upgrade): served first.
        _delete_others(plan, driver)
        plan.requeue(min((deadline - plan.now).total_seconds(), plan.settings.store_retry_seconds))
        return True
    plan.event(
        EventReason.TERMINATION_ESCALATED,
        f"Driver did not stop within timeoutSeconds={plan.settings.graceful_timeout_seconds}, "
        f"stopping it without a snapshot requestedMode={termination.mode.name} "
        f"mode={termination.mode.without_terminal_snapshot().name} podName={driver.name}; "
        "the job is being deleted, its restore point is kept instead",
    )
    return False


def _delete_others(plan: Plan, driver: DriverPod) -> None:
    """Deletes the Pods of older executions that may still run, as while the job lives."""
    for pod in plan.pods_that_may_run():
        if pod.name != driver.name:
            plan.delete_pod(pod)


def _listed(plan: Plan, record: ExecutionRecord, name: str) -> ExportedSnapshot:
    stats = record.snapshot_stats
    size = stats.num_bytes if stats is not None and stats.snapshot_id == record.snapshot_id else 0
    return ExportedSnapshot(
        name=name,
        snapshot_id=record.snapshot_id,
        num_bytes=size,
        created_at=plan.now,
        terminal=True,
    )


def _copy_or_hold(plan: Plan, record: ExecutionRecord, name: str) -> None:
    """Copies the restore point to the export; after failures, again later, or holds."""
    failure = plan.status.export_failure
    if failure is not None and failure.name != name:
        failure = None  # Another export's: the executor counts attempts per name.
    limit = plan.settings.export_copy_attempts
    if failure is None:
        plan.event(
            EventReason.DELETION_POLICY_APPLIED,
            f"Job is being deleted deletionPolicy=Export exportName={name}, copying its "
            f"restore point snapshotId={record.snapshot_id}",
        )
    elif failure.attempts >= limit:
        if not _another_round(plan, failure, name):
            return
    else:
        due = failure.time + timedelta(
            seconds=plan.settings.export_retry_seconds * 2 ** (failure.attempts - 1)
        )
        if plan.now < due:
            plan.requeue((due - plan.now).total_seconds())
            return
        plan.event(
            EventReason.EXPORT_FAILED,
            f"Copy to the deletion's export failed, copying again name={name} "
            f"attempts={failure.attempts} maxAttempts={limit} error={failure.message}",
        )
    job = plan.obs.job
    identity = JobIdentity(uid=job.uid, namespace=job.namespace, backup_count=1)
    source = record.successful_snapshot_map_name(identity)
    assert source is not None  # The record has a snapshot.
    plan.effects.append(
        CopySnapshotToExport(
            source_map=source,
            snapshot_id=record.snapshot_id,
            export_name=name,
            export_map=export_map_name(job.namespace, name),
        )
    )
    plan.requeue(plan.settings.store_retry_seconds)


def _another_round(plan: Plan, failure: ExportFailureStatus, name: str) -> bool:
    """The copy failed ``export_copy_attempts`` times: hold, or start another round.

    The hold is announced once, with ``lastFailure`` (its time after the last failure's says
    it was) and ``observedGeneration``: a spec changed since then starts another round.
    """
    held = plan.status.last_failure
    announced = held is not None and held.reason == DELETION_HELD and held.time >= failure.time
    observed = plan.status.observed_generation or 0
    if announced and plan.obs.generation > observed:
        plan.update(export_failure=None, observed_generation=plan.obs.generation)
        plan.event(
            EventReason.DELETION_POLICY_APPLIED,
            f"Job is being deleted deletionPolicy=Export exportName={name}, the spec changed: "
            f"copying its restore point again snapshotId={plan.status.record().snapshot_id}",
        )
        return True
    if not announced:
        message = (
            f"Job deletion is held: its state could not be copied to exportName={name} "
            f"attempts={failure.attempts} error={failure.message}; make the store healthy, then "
            "change the job's spec to try again, or set spec.deletionPolicy: Destroy to delete "
            "the job without keeping its state"
        )
        plan.fail(DELETION_HELD, message)
        plan.update(observed_generation=plan.obs.generation)
        plan.event(EventReason.DELETION_HELD, message)
    plan.requeue(plan.settings.resync_seconds)
    return False
