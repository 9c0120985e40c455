"""The operator's decision function: observe -> validate -> reconcile, with no I/O.

One call looks at one :class:`Observation` (the SnapshotJob, its driver Pods, the store's
health, the clock) and returns the actions that move the job one step towards its spec, as
data (:mod:`snapshot_operator.reconcile.actions`). It is level-based, as the Flink operator's
reconcilers: it keeps no memory between calls, everything it needs is in the status, so a
restarted operator (or a retried, half-applied action list) decides the same thing again.

The rules, and why:

* Never two drivers. A driver Pod is created only when no Pod of the job may still run; a
  Pod being deleted keeps running until its containers stop, so the decision waits for that.
  Every execution gets a new id (the fencing token), written to the status before its Pod is
  created, so a driver of an older execution can no longer move the execution record.
* Restore points come from the execution record only, which never points at an export-only
  snapshot (docs/concepts/protocol.md, invariant I2). ``initialSnapshotName`` is used only while the
  job has no snapshot of its own: an explicit user choice, never an automatic one.
* Graceful termination modes are requests to the driver (``status.termination``); forceful
  modes need no driver, the operator deletes the Pod. A graceful request not served within a
  deadline is escalated to the forceful mode of the same action, with an Event.
* A driver that exits with :attr:`DriverExit.RESTART_FORCEFUL` (an indeterminate record
  write, docs/concepts/protocol.md, taking step 7a) restarts at once: not counted as a failure, and
  any pending graceful request is dropped, because the state may hold prepared transactions that
  only a restore resolves (docs/concepts/protocol.md, Termination modes). Until the new execution
  starts the status keeps a RESTART_FORCEFUL termination, so not even ``suspend`` skips that
  restore.
* A driver that exits with :attr:`DriverExit.INTERRUPTED` (SIGTERM: a node drain, an
  eviction, a deleted Pod) restarts at once from the last snapshot, in the same way: nothing
  is wrong with the job, so it is neither a failure nor subject to backoff.
* Those forced restarts are counted in a row (``status.forcedRestarts``) until a new
  snapshot, a completion or a long run shows progress: from 3 the job is Degraded
  ``RepeatedForcedRestarts``, and beyond 10 each counts as a failure, so they end.
* A driver that exits with :attr:`DriverExit.FENCED` saw a newer execution in the status
  than the one observed here. It is never a failure and never starts anything by itself (that
  could make two drivers); a fenced Pod of an older execution is simply ignored, a fenced
  current driver is reported (Degraded ``DriverFenced``) until the status moves on.
* Failures restart with exponential backoff up to ``maxRestarts``, then FAILED. With
  ``suspendOnFailure`` the job is suspended without a snapshot (SUSPEND_FORCEFUL) and held so
  until its spec changes; a FAILED or COMPLETED job also starts again only on a spec change.
  Exits that no restart can help (a corrupted restore point, a pipeline that cannot be run)
  fail the job at once.
* No execution starts while the store is not cluster-safe, has no more members than the job's
  backup count, or (split-brain protection) has fewer members than the record's quorum.
* Spec changes: ``suspend`` -> SUSPEND_GRACEFUL; a new ``exportSnapshot.name`` -> export-only
  snapshot, or CANCEL_GRACEFUL with a terminal exported snapshot (``cancelJob``), or a
  validated copy while suspended; any change of the execution fingerprint -> ``upgradeMode``.
  Only one request is pending at a time; others wait for it.
* A validated copy to an export that fails is retried with backoff a few times, then given
  up (back to SUSPENDED, Degraded ``ExportFailed``) until the export name changes; the
  executor records each failure in ``status.exportFailure`` so that this stays level-based.
* A spec the operator cannot apply (invalid, or an export that would overwrite the job's own
  restore point) is reported as the Degraded condition with an Event;
  the running execution is left alone.
* Condition messages hold nothing that changes with the clock alone, so a settled job's
  resyncs patch nothing.

This module holds the entry point only; each concern lives in a module of its own:
:mod:`~snapshot_operator.reconcile.plan` (the builder the parts write into and that orders the
actions), :mod:`~snapshot_operator.reconcile.phases` (the allowed phase changes),
:mod:`~snapshot_operator.reconcile.gates` (what a spec must pass first),
:mod:`~snapshot_operator.reconcile.live` (the running driver),
:mod:`~snapshot_operator.reconcile.exits` (how an execution ends),
:mod:`~snapshot_operator.reconcile.between` (suspend, export by copy, backoff),
:mod:`~snapshot_operator.reconcile.starting` (a new execution),
:mod:`~snapshot_operator.reconcile.conditions`, :mod:`~snapshot_operator.reconcile.deletion`,
and, ahead of them all, :mod:`~snapshot_operator.reconcile.lost_nodes` (drivers on lost nodes).
"""

from __future__ import annotations

from snapshot_operator.reconcile.actions import Action
from snapshot_operator.reconcile.between import between_executions
from snapshot_operator.reconcile.conditions import conditions
from snapshot_operator.reconcile.deletion import delete
from snapshot_operator.reconcile.exits import reset_forced_restarts
from snapshot_operator.reconcile.gates import export_problem, store_problem
from snapshot_operator.reconcile.live import supervise
from snapshot_operator.reconcile.lost_nodes import delete_drivers_on_lost_nodes
from snapshot_operator.reconcile.observation import DecisionSettings, InvalidSpec, Observation
from snapshot_operator.reconcile.phases import LIVE_PHASES
from snapshot_operator.reconcile.plan import Plan
from snapshot_operator.reconcile.upgrade_check import tidy_upgrade_checks
from snapshotjob_contract import SnapshotJobSpec


def decide(
    observation: Observation, settings: DecisionSettings | None = None
) -> tuple[Action, ...]:
    """Returns the actions that move the observed job one step towards its spec.

    Args:
        observation: The job, its driver Pods, the store's health and the time.
        settings: Operator-wide timings; the defaults if omitted.

    Returns:
        The actions in the order they must be performed. The status patch, if any, comes
        first; a ``Requeue`` comes last.
    """
    plan = Plan(observation, settings or DecisionSettings())
    plan.lost_drivers = delete_drivers_on_lost_nodes(plan)
    if observation.deleting:
        return delete(plan)
    spec = observation.spec
    if isinstance(spec, InvalidSpec):
        plan.invalid_spec = spec.message
        plan.requeue(plan.settings.resync_seconds)
        return _finish(plan, None)
    plan.store_problem = store_problem(spec, plan.status, observation.store)
    plan.export_problem = export_problem(spec, plan.status)
    if plan.status.phase in LIVE_PHASES:
        supervise(plan, spec)
    else:
        between_executions(plan, spec)
    return _finish(plan, spec)


def _finish(plan: Plan, spec: SnapshotJobSpec | None) -> tuple[Action, ...]:
    """Completes the status the decision arrived at, then returns the plan's actions.

    Args:
        plan: The decision.
        spec: The job's spec; None if it cannot be applied.
    """
    plan.update_last_snapshot_time()
    reset_forced_restarts(plan)
    tidy_upgrade_checks(plan, spec)
    plan.update(observed_generation=plan.obs.generation)
    # Last: the conditions describe the status as everything above left it.
    plan.update(conditions=conditions(plan, spec))
    return plan.actions()
