"""Upgrade pre-flight: a changed spec's pipeline must restore the restore point before a rollout.

Without it, a spec whose new pipeline cannot restore the job's snapshot (an operator renamed,
a state schema changed) is found out by the new driver only after the old execution stopped:
the job goes FAILED (exit 78) and only a person brings it back. So before the running
execution is asked to stop for a spec change that carries its state over (``upgradeMode``
snapshot or last-snapshot), the operator runs the new image's own check in a short-lived Pod
of the job (``python -m spark_runtime snapshot validate --pipeline``, with the new pipeline's
module and arguments, against the current restore point):

* passed (exit 0): the rollout goes on as before, the Pod is deleted;
* failed (78: incompatible, naming both sides; or any other answer, or none within the
  operator's upgrade check timeout): the rollout is refused, Degraded ``UpgradeRefused``
  with a Warning Event naming what differs, and the old execution keeps running and
  snapshotting. The user's spec stays as written; changing it again checks again, and
  reverting it leaves nothing to roll out.

The check is recorded in ``status.upgradeCheck`` by the fingerprint of the spec it checked, so
it runs once per spec and a restarted operator neither runs it twice nor forgets its answer.
A job without a restore point, or one upgraded stateless, has nothing to check.
"""

from __future__ import annotations

import hashlib

from snapshot_operator.reconcile.actions import (
    CreateUpgradeCheckPod,
    DeleteUpgradeCheckPod,
    EventReason,
)
from snapshot_operator.reconcile.phases import LIVE_PHASES
from snapshot_operator.reconcile.plan import Plan, Problem
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionReason,
    ProcessingGuarantee,
    SnapshotJobSpec,
    UpgradeMode,
)
from snapshotjob_contract.base import DNS_LABEL_MAX_LENGTH
from snapshotjob_contract.record import CHAIN_MAP_INDEX, JobIdentity, snapshot_map_name
from snapshotjob_contract.status import UpgradeCheckStatus

CHECK_POLL_SECONDS = 5
"""How soon to look again at a running check (its Pod's events wake the job sooner)."""
CHECK_RECREATE_AFTER_SECONDS = 30
"""A check Pod missing this long after its creation was deleted by someone: created again."""


def upgrade_check_pod_name(job_name: str, spec_hash: str) -> str:
    """The check Pod's name: the job's, a marker and the spec's fingerprint, a DNS label."""
    suffix = f"-check-{spec_hash[:10]}"
    head = job_name[: DNS_LABEL_MAX_LENGTH - len(suffix)].rstrip("-.")
    if head != job_name:
        # Two long names that share their start must not share a Pod.
        head = head[:-6].rstrip("-.") + hashlib.sha256(job_name.encode()).hexdigest()[:6]
    return head + suffix


def upgrade_checked(plan: Plan, spec: SnapshotJobSpec) -> bool:
    """Whether the running execution may be asked to stop for the spec change now.

    Starts the check of the spec if it has none, follows it while it runs, and reports a
    refusal; old checks' Pods are deleted.

    Args:
        plan: The decision; a live execution runs a spec other than ``spec``.
        spec: The job's spec.

    Returns:
        True if the change may be rolled out (checked, or nothing to check).
    """
    fingerprint = spec.execution_fingerprint()
    record = plan.status.record()
    job = plan.obs.job
    identity = JobIdentity(
        job.uid, job.namespace, spec.hazelcast.backup_count, spec.incremental_snapshots
    )
    restore_point = record.successful_snapshot_map_name(identity)
    if (
        spec.upgrade_mode is UpgradeMode.STATELESS
        or spec.processing_guarantee is ProcessingGuarantee.NONE
        or record.snapshot_id == NO_SNAPSHOT
        or restore_point is None
    ):
        return True
    maps = _snapshot_maps(restore_point, job.uid, spec)
    check = plan.status.upgrade_check
    if check is None or check.spec_hash != fingerprint:
        name = upgrade_check_pod_name(job.name, fingerprint)
        plan.update(
            upgrade_check=UpgradeCheckStatus(
                spec_hash=fingerprint,
                pod_name=name,
                snapshot_id=record.snapshot_id,
                started_at=plan.now,
            )
        )
        plan.effects.append(CreateUpgradeCheckPod(name, fingerprint, maps))
        plan.event(
            EventReason.UPGRADE_CHECK_STARTED,
            f"Spec changed, checking that its pipeline can restore the restore point before "
            f"rolling it out pod={name} image={spec.image} module={spec.pipeline.module} "
            f"snapshotId={record.snapshot_id}",
        )
        plan.checking_upgrade = True
        plan.requeue(CHECK_POLL_SECONDS)
        return False
    if check.passed is not None:
        _delete_check_pod(plan, check.pod_name)
        if not check.passed:
            plan.upgrade_refused = Problem(ConditionReason.UPGRADE_REFUSED, _refusal(check))
        return check.passed
    pod = next((p for p in plan.obs.checks if p.name == check.pod_name), None)
    waited = (plan.now - check.started_at).total_seconds()
    timeout = plan.settings.upgrade_check_timeout_seconds
    if pod is not None and pod.exit_code is not None and pod.phase.is_terminal:
        passed = pod.exit_code == 0
        answer = pod.message or "the check printed nothing; see the Pod's log"
        message = None if passed else f"exitCode={pod.exit_code}: {answer}"
        return _answered(plan, check, passed, message)
    if waited >= timeout:
        return _answered(
            plan,
            check,
            False,
            f"the check did not answer within timeoutSeconds={timeout} (its Pod "
            f"{'phase=' + pod.phase.value if pod is not None else 'is missing'}); see "
            "`kubectl describe pod` of it",
        )
    if pod is None and waited >= CHECK_RECREATE_AFTER_SECONDS:
        plan.effects.append(CreateUpgradeCheckPod(check.pod_name, fingerprint, maps))
    plan.checking_upgrade = True
    plan.requeue(min(CHECK_POLL_SECONDS, max(timeout - waited, 1)))
    return False


def _snapshot_maps(restore_point: str, uid: str, spec: SnapshotJobSpec) -> tuple[str, ...]:
    """The restore point's map, then the maps the running execution's snapshots go to."""
    backups = spec.hazelcast.backup_count
    indexes = (CHAIN_MAP_INDEX,) if spec.incremental_snapshots else (0, 1)
    names = [restore_point, *(snapshot_map_name(uid, index, backups) for index in indexes)]
    return tuple(dict.fromkeys(names))


def tidy_upgrade_checks(plan: Plan, spec: SnapshotJobSpec | None) -> None:
    """Deletes the Pods of checks no rollout waits for, and forgets a check nothing waits for.

    A rollout waits for the check of the spec while a live execution runs another one; every
    other check (an older spec's, or one whose rollout was done, reverted or overtaken by a
    stop) is gone once its Pod is.
    """
    execution = plan.status.execution
    pending = (
        spec.execution_fingerprint()
        if spec is not None
        and plan.status.phase in LIVE_PHASES
        and execution is not None
        and execution.spec_hash != spec.execution_fingerprint()
        else None
    )
    for pod in plan.obs.checks:
        if pod.spec_hash != pending:
            _delete_check_pod(plan, pod.name)
    check = plan.status.upgrade_check
    if check is not None and check.spec_hash != pending:
        plan.update(upgrade_check=None)


def _answered(plan: Plan, check: UpgradeCheckStatus, passed: bool, message: str | None) -> bool:
    """Records the check's answer (the Pod goes); a refusal is reported."""
    answered = check.model_copy(update={"passed": passed, "message": message})
    plan.update(upgrade_check=answered)
    _delete_check_pod(plan, check.pod_name)
    if not passed:
        refusal = _refusal(answered)
        plan.upgrade_refused = Problem(ConditionReason.UPGRADE_REFUSED, refusal)
        plan.event(EventReason.UPGRADE_REFUSED, refusal)
    return passed


def _refusal(check: UpgradeCheckStatus) -> str:
    """Degraded's and the Event's message of a refused rollout."""
    return (
        f"Spec change not rolled out: its pipeline cannot restore the restore point "
        f"snapshotId={check.snapshot_id} ({check.message}); the running execution keeps "
        "running. Fix spec.pipeline or spec.image (a new change is checked again), revert the "
        "change, or use upgradeMode stateless to start without the state"
    )


def _delete_check_pod(plan: Plan, name: str) -> None:
    if any(pod.name == name and not pod.deleting for pod in plan.obs.checks):
        action = DeleteUpgradeCheckPod(name)
        if action not in plan.effects:
            plan.effects.append(action)
