"""The simulated world the decision function runs in, for the state machine tests.

Shared by ``test_decide_machine.py`` (the world as it is) and
``test_decide_deletion_machine.py`` (a world whose job is deleted early, from a snapshot).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

from hypothesis import event
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, precondition, rule

from snapshot_operator.reconcile import (
    TRANSITIONS,
    Action,
    CopySnapshotToExport,
    CreateDriverPod,
    DecisionSettings,
    DeleteDriverPod,
    DeleteSnapshotMaps,
    DriverPod,
    ExecutorPod,
    Observation,
    PodPhase,
    PodProblem,
    RemoveFinalizer,
    RequestTermination,
    StoreHealth,
    decide,
)
from snapshot_operator.reconcile.actions import (
    CreateUpgradeCheckPod,
    DeleteUpgradeCheckPod,
    KeepExport,
)
from snapshot_operator.reconcile.deletion import DELETION_HELD, deletion_export_name
from snapshot_operator.reconcile.observation import UpgradeCheckPod
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionReason,
    DeletionPolicy,
    ExecutionRecord,
    ExecutionRecordStatus,
    ExportedSnapshot,
    ExportFailureStatus,
    ExportSnapshotSpec,
    JobIdentity,
    Phase,
    PipelineStartedStatus,
    ProcessingGuarantee,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
    TerminationMode,
    UpgradeMode,
)
from snapshotjob_contract.exits import ENDED_AS_ASKED_PREFIX
from tests.unit.operator.world import EXPORT_NAMES, IMAGES, JOB, NOW, specs, status_after


def then_reconcile(step: Callable[..., None]) -> Callable[..., None]:
    """The operator watches the job and its Pods: every change is followed by a reconcile."""

    @functools.wraps(step)
    def step_then_reconcile(self: JobWorld, *args: Any, **kwargs: Any) -> None:
        step(self, *args, **kwargs)
        self._reconcile()

    return step_then_reconcile


LIFE_BEFORE_DELETION = 30
IDENTITY = JobIdentity(uid=JOB.uid, namespace=JOB.namespace, backup_count=1)


class JobWorld(RuleBasedStateMachine):
    """One SnapshotJob, its driver Pods, the store and the clock."""

    def __init__(self) -> None:
        super().__init__()
        self.spec: SnapshotJobSpec
        self.status = SnapshotJobStatus()
        self.pods: dict[str, DriverPod] = {}
        # Executor Pods that cannot start, by the driver Pod that owns them.
        self.stuck_executors: dict[str, ExecutorPod] = {}
        self.store = StoreHealth(cluster_safe=True, member_count=3)
        self.now: datetime = NOW
        self.generation = 1
        self.forced_restart_pending = False
        # Forced exits (75, 79, 143) since the restore point last moved or the job completed: the
        # most the operator may count in status.forcedRestarts.
        self.forced_in_a_row = 0
        self.forced_snapshot = NO_SNAPSHOT
        self.fenced_pod: str | None = None
        self.deleting = False
        self.deleted = False
        # The store fails the operator's copies to an export (the executor records each).
        self.copies_fail = False
        # Exports a deletion kept, as the SnapshotJobExport objects it made sure of.
        self.kept: dict[str, ExportedSnapshot] = {}
        # The upgrade checks' Pods, and the fingerprints whose check the kubelet saw fail.
        self.checks: dict[str, UpgradeCheckPod] = {}
        self.refused: set[str] = set()
        self.reconciles = 0
        self._reconciled_since_time_passed = False

    # Jobs start unsuspended (the users' rules suspend them), so runs reach RUNNING often.
    @initialize(spec=specs().map(lambda spec: spec.model_copy(update={"suspend": False})))
    def create_job(self, spec: SnapshotJobSpec) -> None:
        self.spec = spec

    # The operator.

    @rule()
    def requeue_fires(self) -> None:
        self._reconcile()

    def _reconcile(self) -> None:
        if self.deleted:
            return
        self.reconciles += 1
        self._reconciled_since_time_passed = True
        observation = Observation(
            JOB,
            self.generation,
            self.spec,
            self.status,
            self.now,
            tuple(self.pods.values()),
            self.store,
            deleting=self.deleting,
            executors=tuple(
                executor for owner, executor in self.stuck_executors.items() if owner in self.pods
            ),
            checks=tuple(self.checks.values()),
        )
        actions = decide(observation)
        before = self.status
        self.status = status_after(before, actions, self.now)
        phase = self.status.phase
        # Shown by --hypothesis-show-statistics: which phase changes the runs reached.
        event(f"{before.phase.value} -> {phase.value}")
        if any(isinstance(action, RemoveFinalizer) for action in actions):
            event("deleted")
        assert phase == before.phase or phase in TRANSITIONS[before.phase]
        forced = self.status.forced_restarts
        assert forced is None or forced.count <= self.forced_in_a_row, "counted too many"
        if self.deleting:
            pass  # Nothing restarts; a held deletion writes lastFailure (DeletionHeld).
        elif self.forced_restart_pending and self.status.last_failure != before.last_failure:
            # Counted as a failure, through the restart policy: only beyond the bound.
            limit = DecisionSettings().forced_restart_limit
            assert self.forced_in_a_row > limit, "a failure too early"
            assert self.status.last_failure is not None
            assert self.status.last_failure.reason == ConditionReason.REPEATED_FORCED_RESTARTS
            self.forced_restart_pending = False
        elif self.forced_restart_pending:
            assert phase in (Phase.STARTING, Phase.RESTARTING), "forced restart skipped"
            assert not any(isinstance(a, RequestTermination) for a in actions)
            assert self.status.restarts == before.restarts, "a forced restart is not a failure"
        fenced = self.pods.get(self.fenced_pod) if self.fenced_pod is not None else None
        current = before.execution.id if before.execution is not None else None
        self._check_a_held_deletion(before, actions)
        self._no_rollout_of_a_refused_spec(before, actions)
        if fenced is not None and not self.deleting and fenced.execution_id == current:
            assert not any(isinstance(a, CreateDriverPod) for a in actions), "fenced restart"
            assert self.status.restarts == before.restarts, "fenced is not a failure"
            assert self.status.last_failure == before.last_failure
        for action in actions:
            if isinstance(action, CreateDriverPod):
                self._create(action)
            elif isinstance(action, DeleteDriverPod) and action.at_once:
                self._delete_at_once(action.pod_name)
            elif isinstance(action, DeleteDriverPod) and action.pod_name in self.pods:
                self.pods[action.pod_name] = replace(self.pods[action.pod_name], deleting=True)
            elif isinstance(action, CreateUpgradeCheckPod):
                assert not self.deleting, "an upgrade check while deleting"
                event("upgrade check started")
                self.checks[action.pod_name] = UpgradeCheckPod(
                    action.pod_name, action.spec_hash, PodPhase.PENDING
                )
            elif isinstance(action, DeleteUpgradeCheckPod):
                self.checks.pop(action.pod_name, None)
            elif isinstance(action, CopySnapshotToExport):
                self._copy(action)
            elif isinstance(action, KeepExport):
                assert self.deleting
                assert action.exported == self.status.exported(action.exported.name)
                self.kept[action.exported.name] = action.exported
            elif isinstance(action, RemoveFinalizer):
                assert self.deleting
                assert not [pod for pod in self.pods.values() if pod.may_run], "a driver runs"
                self._state_kept_unless_destroyed(actions)
                self.deleted = True

    def _no_rollout_of_a_refused_spec(
        self, before: SnapshotJobStatus, actions: tuple[Action, ...]
    ) -> None:
        """A spec whose upgrade check failed is never rolled out: the execution runs on."""
        fingerprint = self.spec.execution_fingerprint()
        if fingerprint not in self.refused or self.deleting:
            return
        execution = before.execution
        if execution is None or execution.spec_hash == fingerprint:
            return
        asked = [a for a in actions if isinstance(a, RequestTermination)]
        assert not [a for a in asked if a.request_id.endswith("RESTART_GRACEFUL")], "rolled out"
        if before.phase is Phase.RUNNING and self.status.phase is Phase.RUNNING:
            event("upgrade refused, execution kept")

    def _check_a_held_deletion(
        self, before: SnapshotJobStatus, actions: tuple[Action, ...]
    ) -> None:
        """Copies to the deletion's export that failed the bound hold it, and say so."""
        failure = before.export_failure
        if not (
            self.deleting
            and self.spec.deletion_policy is DeletionPolicy.EXPORT
            and failure is not None
            and failure.name == deletion_export_name(JOB)
            and failure.attempts >= DecisionSettings().export_copy_attempts
        ):
            return
        assert not any(isinstance(a, RemoveFinalizer | DeleteSnapshotMaps) for a in actions)
        if self.status.export_failure is None:
            assert self.generation > (before.observed_generation or 0), "a round unasked for"
            event("deletion: another round after a spec change")
            return
        assert not any(isinstance(a, CopySnapshotToExport) for a in actions), "beyond the bound"
        last = self.status.last_failure
        assert last is not None and last.reason == DELETION_HELD, "held without saying so"
        event("deletion held")

    def _state_kept_unless_destroyed(self, actions: tuple[Action, ...]) -> None:
        """Under Export the job goes only with its restore point kept, unless it has none."""
        if self.spec.deletion_policy is DeletionPolicy.DESTROY:
            assert not any(isinstance(a, KeepExport) for a in actions), "Destroy keeps nothing"
            return
        record = self.status.record()
        kept = self.kept.get(deletion_export_name(JOB))
        if record.snapshot_id == NO_SNAPSHOT:
            event("deleted: nothing to keep")
            return
        assert kept is not None, "the job's state was destroyed without being kept"
        assert kept.snapshot_id == record.snapshot_id, "kept something else than its state"
        event(f"deleted: kept terminal={kept.terminal}")

    def _delete_at_once(self, name: str) -> None:
        # Without a grace period the API forgets the Pod; its driver may go on as a zombie,
        # which fencing stops (tests/integration/test_zombie_fencing.py), not this world.
        pod = self.pods.pop(name, None)
        assert pod is not None and pod.node_lost_since is not None, "deleted a Pod at once"
        lost_for = (self.now - pod.node_lost_since).total_seconds()
        assert lost_for >= DecisionSettings().driver_lost_seconds, "deleted a lost Pod too early"

    def _create(self, action: CreateDriverPod) -> None:
        assert not self.deleting, "started an execution of a job being deleted"
        assert not [pod for pod in self.pods.values() if pod.may_run], "two drivers"
        assert action.pod_name not in self.pods
        if action.initial_snapshot_name is not None:
            assert action.initial_snapshot_name == self.spec.initial_snapshot_name
            assert self.status.record().snapshot_id == NO_SNAPSHOT
        self.pods[action.pod_name] = DriverPod(
            action.pod_name, action.execution_id, PodPhase.PENDING
        )
        self.forced_restart_pending = False

    def _copy(self, action: CopySnapshotToExport) -> None:
        record = self.status.record()
        assert action.source_map == record.successful_snapshot_map_name(IDENTITY)
        assert action.snapshot_id == record.snapshot_id
        if self.deleting:
            failure = self.status.export_failure
            limit = DecisionSettings().export_copy_attempts
            assert (
                failure is None or failure.name != action.export_name or (failure.attempts < limit)
            ), "copied beyond the bound"
        if self.copies_fail:
            # As the executor records it: attempts counted per export name.
            previous = self.status.export_failure
            attempts = (
                previous.attempts + 1
                if previous is not None and previous.name == action.export_name
                else 1
            )
            failure = ExportFailureStatus(
                name=action.export_name, attempts=attempts, message="down", time=self.now
            )
            self.status = self.status.model_copy(update={"export_failure": failure})
            return
        self._exported(action.export_name, record.snapshot_id, terminal=False)

    # The current driver.

    def _current(self) -> DriverPod | None:
        """The current execution's Pod, unless its node stopped reporting: nothing is heard
        from a driver there (its exit, its snapshots) while the node is lost."""
        execution = self.status.execution
        return next(
            (
                pod
                for pod in self.pods.values()
                if execution is not None
                and pod.execution_id == execution.id
                and pod.may_run
                and pod.node_lost_since is None
            ),
            None,
        )

    def _running_driver(self) -> DriverPod | None:
        pod = self._current()
        if pod is None or pod.phase is not PodPhase.RUNNING or pod.deleting:
            return None
        return pod

    def _pipeline_driver(self) -> DriverPod | None:
        """The running driver, if it reported its pipeline running (it snapshots only then)."""
        pod = self._running_driver()
        return pod if pod is not None and self.status.pipeline_runs() else None

    def _record(self, record: ExecutionRecord) -> None:
        self.status = self.status.model_copy(
            update={"execution_record": ExecutionRecordStatus.of(record)}
        )

    def _exported(self, name: str, snapshot_id: int, *, terminal: bool) -> None:
        snapshot = ExportedSnapshot(
            name=name,
            snapshot_id=snapshot_id,
            num_bytes=10,
            created_at=self.now,
            terminal=terminal,
        )
        kept = [s for s in self.status.exported_snapshots if s.name != name]
        self.status = self.status.model_copy(update={"exported_snapshots": [*kept, snapshot]})

    def _snapshot(self, kind: SnapshotKind, name: str | None) -> None:
        record = self.status.record().start_new_snapshot(now=1)
        record = record.snapshot_done(
            kind,
            export_name=name,
            num_bytes=10,
            num_keys=1,
            num_chunks=1,
            failure=None,
            now=2,
            backup_count=2,
        )
        self._record(record)
        if name is not None:
            self._exported(name, record.ongoing_snapshot_id, terminal=kind.is_terminal)

    def _exit(self, pod: DriverPod, code: int) -> None:
        phase = PodPhase.SUCCEEDED if code == 0 else PodPhase.FAILED
        self.pods[pod.name] = replace(pod, phase=phase, exit_code=code)

    @rule()
    @then_reconcile
    def driver_starts_running(self) -> None:
        pod = self._current()
        if pod is not None and pod.phase is PodPhase.PENDING:
            self.pods[pod.name] = replace(pod, phase=PodPhase.RUNNING)

    @rule()
    @then_reconcile
    def driver_reports_its_pipeline_running(self) -> None:
        pod = self._running_driver()
        execution = self.status.execution
        if pod is not None and execution is not None and pod.name not in self.stuck_executors:
            report = PipelineStartedStatus(execution_id=pod.execution_id, time=self.now)
            self.status = self.status.model_copy(update={"pipeline_started": report})

    @rule(scheduling=st.booleans())
    @then_reconcile
    def executors_cannot_start(self, scheduling: bool) -> None:
        pod = self._running_driver()
        if pod is not None and not self.status.pipeline_runs():
            problem = PodProblem(
                "Unschedulable" if scheduling else "ErrImagePull",
                "0/3 nodes are available: 3 Insufficient cpu.",
                scheduling=scheduling,
            )
            self.stuck_executors[pod.name] = ExecutorPod(f"{pod.name}-exec-1", pod.name, problem)

    @rule()
    @then_reconcile
    def driver_takes_an_automatic_snapshot(self) -> None:
        if (
            self._pipeline_driver()
            and self.spec.processing_guarantee is not ProcessingGuarantee.NONE
        ):
            self._snapshot(SnapshotKind.AUTOMATIC, None)

    @rule(earlier_release=st.booleans())
    @then_reconcile
    def driver_serves_the_termination_request(self, earlier_release: bool) -> None:
        pod = self._running_driver()
        termination = self.status.termination
        if pod is None or termination is None or not termination.mode.terminal_snapshot:
            return
        self._snapshot(SnapshotKind.terminal(termination.export_name), termination.export_name)
        if earlier_release:
            self._exit(pod, 64)
        else:
            # Exits 0, saying in its termination message that it ended as asked.
            self._exit(pod, 0)
            message = f"{ENDED_AS_ASKED_PREFIX}mode={termination.mode.value}"
            self.pods[pod.name] = replace(self.pods[pod.name], termination_message=message)

    @rule()
    @then_reconcile
    def driver_serves_the_export_request(self) -> None:
        request = self.status.export_request
        if self._pipeline_driver() and request is not None:
            self._snapshot(SnapshotKind.EXPORT_ONLY, request.name)

    @rule(code=st.sampled_from([0, 1, 65, 137]))
    @then_reconcile
    def driver_exits(self, code: int) -> None:
        pod = self._current()
        if pod is not None and not pod.deleting:
            self._exit(pod, code)

    @rule()
    @then_reconcile
    def driver_exits_after_an_indeterminate_record_write(self) -> None:
        pod = self._current()
        if pod is not None and not pod.deleting:
            self._exit(pod, 75)
            self._forced_exit()

    @rule()
    @then_reconcile
    def driver_is_interrupted(self) -> None:
        pod = self._current()
        if pod is not None and not pod.deleting:
            self._exit(pod, 143)
            self._forced_exit()

    @rule()
    @then_reconcile
    def driver_loses_the_quorum(self) -> None:
        pod = self._current()
        if pod is not None and not pod.deleting:
            self._exit(pod, 79)
            self._forced_exit()

    def _forced_exit(self) -> None:
        snapshot = self.status.record().snapshot_id
        if snapshot != self.forced_snapshot:
            self.forced_in_a_row = 0
        self.forced_in_a_row += 1
        self.forced_snapshot = snapshot
        self.forced_restart_pending = True

    @rule()
    @then_reconcile
    def driver_finds_itself_fenced(self) -> None:
        pod = self._current()
        if pod is not None and not pod.deleting:
            self._exit(pod, 77)
            self.fenced_pod = pod.name

    # Kubernetes.

    @rule()
    @then_reconcile
    def someone_removes_stopped_pods(self) -> None:
        for name, pod in list(self.pods.items()):
            if not pod.may_run:
                del self.pods[name]

    @rule()
    @then_reconcile
    def kubelet_stops_deleted_pods(self) -> None:
        for name, pod in list(self.pods.items()):
            if pod.deleting and pod.node_lost_since is None:
                del self.pods[name]

    @rule()
    @then_reconcile
    def drivers_node_stops_reporting(self) -> None:
        # The node controller marks its Pods not Ready; they stay Running in the API, and a
        # graceful deletion of one never ends, since only the node's kubelet could confirm it.
        for name, pod in list(self.pods.items()):
            if pod.phase is PodPhase.RUNNING and pod.node_lost_since is None:
                self.pods[name] = replace(pod, node_lost_since=self.now)

    @rule()
    @then_reconcile
    def lost_node_reports_again(self) -> None:
        for name, pod in list(self.pods.items()):
            if pod.node_lost_since is not None:
                self.pods[name] = replace(pod, node_lost_since=None)

    @rule()
    @then_reconcile
    def node_is_lost_with_its_pods(self) -> None:
        for name, pod in list(self.pods.items()):
            if pod.may_run and not pod.deleting:
                del self.pods[name]
                if self.forced_restart_pending:
                    self.forced_restart_pending = False

    @rule(compatible=st.booleans())
    @then_reconcile
    def upgrade_check_answers(self, compatible: bool) -> None:
        waiting = [pod for pod in self.checks.values() if pod.exit_code is None]
        if not waiting:
            return
        pod = waiting[0]
        event(f"upgrade check answered compatible={compatible}")
        if not compatible:
            self.refused.add(pod.spec_hash)
        phase = PodPhase.SUCCEEDED if compatible else PodPhase.FAILED
        self.checks[pod.name] = replace(
            pod, phase=phase, exit_code=0 if compatible else 78, message="operators differ"
        )

    @rule(fail=st.booleans())
    @then_reconcile
    def store_fails_copies(self, fail: bool) -> None:
        self.copies_fail = fail

    @precondition(lambda self: self.store.cluster_safe)
    @rule(members=st.integers(0, 3))
    @then_reconcile
    def store_loses_safety(self, members: int) -> None:
        self.store = StoreHealth(cluster_safe=False, member_count=members)

    @rule()
    @then_reconcile
    def store_recovers(self) -> None:
        self.store = StoreHealth(cluster_safe=True, member_count=3)

    @rule(seconds=st.integers(1, 400))
    def time_passes(self, seconds: int) -> None:
        self.now += timedelta(seconds=seconds)
        self._reconciled_since_time_passed = False

    # The user.

    def _change(self, **fields: object) -> None:
        self.spec = SnapshotJobSpec.model_validate(
            {**self.spec.model_dump(by_alias=False), **fields}
        )
        self.generation += 1

    @rule(suspend=st.booleans())
    @then_reconcile
    def user_sets_suspend(self, suspend: bool) -> None:
        self._change(suspend=suspend)

    @rule(name=st.sampled_from(EXPORT_NAMES), cancel=st.booleans())
    @then_reconcile
    def user_asks_for_an_export(self, name: str, cancel: bool) -> None:
        self._change(export_snapshot=ExportSnapshotSpec(name=name, cancel_job=cancel))

    @rule(image=st.sampled_from(IMAGES), mode=st.sampled_from(UpgradeMode))
    @then_reconcile
    def user_upgrades(self, image: str, mode: UpgradeMode) -> None:
        if self.spec.processing_guarantee is ProcessingGuarantee.NONE:
            mode = UpgradeMode.STATELESS
        self._change(image=image, upgrade_mode=mode)

    # Late in a run, so that most runs first go through the job's life.
    @precondition(lambda self: self.reconciles >= LIFE_BEFORE_DELETION)
    @rule()
    @then_reconcile
    def user_deletes_the_job(self) -> None:
        self.deleting = True

    # The way out of a held deletion, and the way into one.
    @precondition(lambda self: self.deleting)
    @rule(policy=st.sampled_from(DeletionPolicy))
    @then_reconcile
    def user_sets_the_deletion_policy(self, policy: DeletionPolicy) -> None:
        self._change(deletion_policy=policy)

    # Invariants over the whole world.

    @invariant()
    def at_most_one_driver_may_run(self) -> None:
        assert len([pod for pod in self.pods.values() if pod.may_run]) <= 1

    @invariant()
    def a_pod_on_a_node_lost_too_long_is_gone_after_a_reconcile(self) -> None:
        if not self._reconciled_since_time_passed:
            return
        limit = DecisionSettings().driver_lost_seconds
        for pod in self.pods.values():
            since = pod.node_lost_since
            if since is not None:
                assert (self.now - since).total_seconds() < limit, f"kept {pod}"

    @invariant()
    def running_means_the_driver_reported_its_pipeline(self) -> None:
        if self.status.phase is Phase.RUNNING:
            assert self.status.pipeline_runs()

    @invariant()
    def an_execution_never_waits_for_its_pipeline_beyond_the_timeout(self) -> None:
        execution = self.status.execution
        if self.deleted or self.reconciles == 0 or execution is None:
            return
        timeout = DecisionSettings().pipeline_start_timeout_seconds
        waited = (self.now - execution.started_at).total_seconds()
        pod = self._current()
        if (
            self.status.phase is Phase.STARTING
            and not self.status.pipeline_runs()
            and waited >= timeout
            and self.status.start_failure is None
        ):
            # Ended: its Pod is being deleted (or gone), or the next reconcile ends it.
            assert pod is None or pod.deleting or not self._reconciled_since_time_passed

    @invariant()
    def a_kept_failed_driver_pod_never_runs(self) -> None:
        failure = self.status.last_failure
        kept = self.pods.get(failure.driver_pod or "") if failure is not None else None
        assert kept is None or not kept.may_run or kept.deleting

    @invariant()
    def the_restore_point_is_never_an_export_only_snapshot(self) -> None:
        name = self.status.record().exported_snapshot_name
        if name is not None:
            exported = self.status.exported(name)
            assert exported is not None and exported.terminal

    @invariant()
    def a_forceful_termination_stays_only_as_a_marker(self) -> None:
        termination = self.status.termination
        if termination is not None and not termination.mode.terminal_snapshot:
            markers = {
                TerminationMode.RESTART_FORCEFUL: {Phase.RESTARTING, Phase.NOT_RUNNING},
                TerminationMode.SUSPEND_FORCEFUL: {
                    Phase.SUSPENDED,
                    Phase.SUSPENDED_EXPORTING_SNAPSHOT,
                },
            }
            assert self.status.phase in markers[termination.mode]
