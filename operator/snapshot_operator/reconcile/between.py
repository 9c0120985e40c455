"""Between executions: suspend, copy the restore point to an export, back off, or start.

No execution should run in these phases, so any Pod that may still run is deleted, and the
next execution starts only once none may run. A suspended job's export is a validated copy of
its restore point made by the operator (there is no driver to ask); a failed copy is retried
with backoff a few times and then given up until the export name changes. The executor records
each failure in ``status.exportFailure``, so this stays level-based.
"""

from __future__ import annotations

from datetime import timedelta

from snapshot_operator.reconcile.actions import CopySnapshotToExport, EventReason
from snapshot_operator.reconcile.exits import cancelled, suspended
from snapshot_operator.reconcile.gates import export_to_take
from snapshot_operator.reconcile.phases import suspended_on_failure
from snapshot_operator.reconcile.plan import Plan, Problem
from snapshot_operator.reconcile.starting import start_or_wait
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionReason,
    ExecutionRecord,
    ExportFailureStatus,
    Phase,
    SnapshotJobSpec,
    TerminationMode,
    export_map_name,
    snapshot_map_name,
)


def between_executions(plan: Plan, spec: SnapshotJobSpec) -> None:
    """No execution should run: suspend, export by copy, wait for a backoff, or start one."""
    status = plan.status
    running = plan.pods_that_may_run()
    for pod in running:
        plan.delete_pod(pod)
    termination = status.termination
    forced = termination is not None and termination.mode is TerminationMode.RESTART_FORCEFUL
    phase = status.phase
    if phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT:
        _continue_copy(plan, spec, blocked=bool(running))
        return
    spec_changed = (
        status.observed_generation is not None and plan.obs.generation > status.observed_generation
    )
    if phase in (Phase.FAILED, Phase.COMPLETED) and not spec_changed:
        return
    held = suspended_on_failure(status)
    if held and spec_changed:
        plan.update(termination=None)
        held = False
    if (spec.suspend or held) and not forced:
        if phase is not Phase.SUSPENDED:
            plan.update(termination=None)
            suspended(
                plan, f"Suspended while no execution ran snapshotId={status.record().snapshot_id}"
            )
            # An export, if asked for, is copied by the next decision, from SUSPENDED.
            plan.requeue(plan.settings.store_retry_seconds)
        else:
            _export_while_suspended(plan, spec, blocked=bool(running))
        return
    if phase in (Phase.SUSPENDED, Phase.FAILED, Phase.COMPLETED):
        # The user resumed or changed the job: failures before that do not count.
        plan.update(restarts=0, forced_restarts=None)
    failure = status.last_failure
    if phase is Phase.RESTARTING and not forced and plan.status.restarts and failure is not None:
        due = failure.time + timedelta(seconds=spec.restart_policy.backoff(plan.status.restarts))
        if plan.now < due:
            plan.requeue((due - plan.now).total_seconds())
            return
    # A forced restart's marker is in the status already: it stays until the start.
    start_or_wait(plan, spec)


def _export_while_suspended(plan: Plan, spec: SnapshotJobSpec, *, blocked: bool) -> None:
    """A suspended job asked for an export: start copying its restore point, if it may."""
    name = export_to_take(plan, spec)
    if name is None:
        return
    record = plan.status.record()
    if record.snapshot_id == NO_SNAPSHOT:
        plan.export_problem = Problem(
            ConditionReason.EXPORT_REJECTED,
            f"Export cannot be copied name={name}: the job has no snapshot",
        )
        return
    if blocked:
        # A driver may still be stopping and move the restore point: copy once it has stopped.
        plan.requeue(plan.settings.store_retry_seconds)
        return
    failure = plan.status.export_failure
    if failure is not None and failure.name == name:
        if failure.attempts >= plan.settings.export_copy_attempts:
            return  # Given up until the name changes; Degraded says so.
    elif failure is not None:
        plan.update(export_failure=None)
    plan.update(phase=Phase.SUSPENDED_EXPORTING_SNAPSHOT)
    plan.event(
        EventReason.EXPORT_COPY_STARTED,
        f"Copying the restore point to an export name={name} snapshotId={record.snapshot_id}",
    )
    _copy(plan, record, name)


def _copy(plan: Plan, record: ExecutionRecord, name: str) -> None:
    """Copies the restore point to the export (again, over a partial copy, if need be)."""
    job = plan.obs.job
    if record.exported_snapshot_name is not None:
        source = export_map_name(job.namespace, record.exported_snapshot_name)
    else:
        source = snapshot_map_name(job.uid, record.data_map_index, record.data_map_backup_count)
    plan.effects.append(
        CopySnapshotToExport(
            source_map=source,
            snapshot_id=record.snapshot_id,
            export_name=name,
            export_map=export_map_name(job.namespace, name),
        )
    )
    plan.requeue(plan.settings.store_retry_seconds)


def _continue_copy(plan: Plan, spec: SnapshotJobSpec, *, blocked: bool) -> None:
    """SUSPENDED_EXPORTING_SNAPSHOT: finish once the export exists, else copy (again)."""
    export = spec.export_snapshot
    done = export.name if export is not None and export.name is not None else None
    exported = plan.status.exported(done) if done is not None else None
    if exported is not None and export is not None:
        if plan.status.export_failure is not None:
            plan.update(export_failure=None)
        plan.event(
            EventReason.SNAPSHOT_EXPORTED,
            f"Exported snapshot name={exported.name} snapshotId={exported.snapshot_id} "
            f"numBytes={exported.num_bytes} terminal=false",
        )
        if export.cancel_job:
            cancelled(plan, f"Cancelled after exporting exportName={exported.name}")
        else:
            plan.update(phase=Phase.SUSPENDED)
        return
    name = export_to_take(plan, spec)
    record = plan.status.record()
    if name is None or record.snapshot_id == NO_SNAPSHOT or blocked:
        plan.update(phase=Phase.SUSPENDED)
        return
    failure = plan.status.export_failure
    if failure is not None and failure.name == name and not _retry_copy(plan, failure):
        return
    _copy(plan, record, name)


def _retry_copy(plan: Plan, failure: ExportFailureStatus) -> bool:
    """After a failed copy: whether to copy again now (else it waits, or gives up)."""
    limit = plan.settings.export_copy_attempts
    context = f"name={failure.name} attempts={failure.attempts} maxAttempts={limit}"
    if failure.attempts >= limit:
        plan.update(phase=Phase.SUSPENDED)
        plan.event(
            EventReason.EXPORT_FAILED,
            f"Copy to the export failed, giving up until exportSnapshot.name changes {context} "
            f"error={failure.message}",
        )
        return False
    delay = plan.settings.export_retry_seconds * 2 ** (failure.attempts - 1)
    due = failure.time + timedelta(seconds=delay)
    if plan.now < due:
        plan.requeue((due - plan.now).total_seconds())
        return False
    plan.event(
        EventReason.EXPORT_FAILED,
        f"Copy to the export failed, copying again {context} error={failure.message}",
    )
    return True
