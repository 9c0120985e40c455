"""Properties of the decision function over every phase x spec change x Pod state x store.

Each test draws arbitrary observations (see ``world.py``), decides once, and checks what the
actions do. The safety rules are checked for every observation; the behaviour rules pick the
observations they are about with ``assume`` or build them directly.
"""

from __future__ import annotations

import re
from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from snapshot_operator.reconcile import (
    LIVE_PHASES,
    TRANSITIONS,
    Action,
    CopySnapshotToExport,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    DriverPod,
    EmitEvent,
    EventReason,
    InvalidSpec,
    Observation,
    PatchStatus,
    PodPhase,
    RemoveFinalizer,
    RequestExport,
    RequestTermination,
    Requeue,
    StoreHealth,
    decide,
    driver_pod_name,
    execution_id,
)
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionStatus,
    ConditionType,
    ExecutionRecord,
    ExportedSnapshot,
    ExportSnapshotSpec,
    Phase,
    ProcessingGuarantee,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
    TerminationMode,
    UpgradeMode,
    all_snapshot_map_names,
)
from snapshotjob_contract.record import durable_copy_map_name
from tests.unit.operator.decide_helpers import (
    HEALTHY,
    SETTINGS,
    a_snapshot,
    condition,
    creates,
    graceful,
    many,
    of_type,
    reasons,
    running_job,
    snapshot_at,
    spec_of,
    suspended_job,
)
from tests.unit.operator.world import (
    JOB,
    NOW,
    OTHER_HASH,
    ago,
    observations,
    specs,
    status_after,
)

EVENT_MESSAGE = re.compile(r"^[A-Z][^\n]*[^.\s]$")
CAMEL_CASE = re.compile(r"^[A-Z][A-Za-z0-9]*$")

pytestmark = pytest.mark.filterwarnings("error")


# Safety: for every observation.


@many
@given(observations())
def test_never_two_drivers(observation: Observation) -> None:
    actions = decide(observation)

    created = creates(actions)
    assert len(created) <= 1
    if created:
        assert not [pod for pod in observation.pods if pod.may_run], "a driver may still run"
        after = status_after(observation.status, actions)
        assert after.execution is not None
        assert after.execution.id == created[0].execution_id, "fenced before the Pod exists"
        previous = observation.status.execution
        assert previous is None or after.execution.attempt > previous.attempt
        assert actions.index(of_type(actions, PatchStatus)[0]) < actions.index(created[0])


@many
@given(observations())
def test_no_execution_starts_unless_the_store_allows_it(observation: Observation) -> None:
    spec = observation.spec
    assert isinstance(spec, SnapshotJobSpec)

    actions = decide(observation)

    if creates(actions):
        store = observation.store
        assert store is not None and store.cluster_safe
        assert store.member_count > spec.hazelcast.backup_count
        quorum = observation.status.record().quorum_size
        assert not spec.split_brain_protection or store.member_count >= quorum


@many
@given(observations())
def test_never_restores_an_export_only_snapshot_automatically(observation: Observation) -> None:
    spec = observation.spec
    assert isinstance(spec, SnapshotJobSpec)

    actions = decide(observation)

    after = status_after(observation.status, actions).record()
    for created in creates(actions):
        if created.initial_snapshot_name is not None:
            assert created.initial_snapshot_name == spec.initial_snapshot_name, "only by request"
            assert after.snapshot_id == NO_SNAPSHOT, "the job's own snapshot comes first"
    before = observation.status.record()
    assert after.exported_snapshot_name in (None, before.exported_snapshot_name)
    assert after.snapshot_id in (NO_SNAPSHOT, before.snapshot_id)
    assert after.ongoing_snapshot_id == before.ongoing_snapshot_id, "ids are never reused"


@many
@given(observations())
def test_phase_changes_follow_the_transition_table(observation: Observation) -> None:
    actions = decide(observation)

    before = observation.status.phase
    after = status_after(observation.status, actions).phase
    assert after == before or after in TRANSITIONS[before], f"{before} -> {after}"


@many
@given(observations())
def test_the_status_reports_all_conditions_for_the_observed_generation(
    observation: Observation,
) -> None:
    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.observed_generation == observation.generation
    assert {c.type for c in after.conditions} == set(ConditionType)
    for reported in after.conditions:
        assert CAMEL_CASE.match(reported.reason), reported
        assert reported.observed_generation == observation.generation
        old = observation.status.condition(reported.type)
        if old is not None and old.status is reported.status:
            assert reported.last_transition_time == old.last_transition_time


@many
@given(observations())
def test_events_use_fixed_reasons_and_kubernetes_style_messages(observation: Observation) -> None:
    for action in decide(observation):
        if isinstance(action, EmitEvent):
            assert action.reason in set(EventReason)
            assert EVENT_MESSAGE.match(action.message), action.message


@many
@given(observations())
def test_the_actions_end_with_exactly_one_requeue(observation: Observation) -> None:
    actions = decide(observation)

    assert isinstance(actions[-1], Requeue)
    assert len(of_type(actions, Requeue)) == 1
    assert actions[-1].after_seconds >= 1


@settings(suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(observations())
def test_deciding_again_on_the_result_starts_nothing_new(observation: Observation) -> None:
    observation = replace(
        observation, store=StoreHealth(cluster_safe=True, member_count=3), pods=()
    )
    actions = decide(observation)
    created = creates(actions)
    assume(created)
    pod = DriverPod(created[0].pod_name, created[0].execution_id, PodPhase.PENDING)
    again = replace(
        observation,
        status=status_after(observation.status, actions),
        pods=(pod,),
        generation=observation.generation,
    )

    assert creates(decide(again)) == []


# Deletion and invalid specs.


@many
@given(observations())
def test_deletion_cancels_forcefully_then_cleans_up(observation: Observation) -> None:
    deleting = replace(observation, deleting=True)

    actions = decide(deleting)

    assert creates(actions) == []
    assert of_type(actions, PatchStatus) == []
    may_run = [pod for pod in observation.pods if pod.may_run]
    deleted = {action.pod_name for action in of_type(actions, DeleteDriverPod)}
    assert {pod.name for pod in may_run if not pod.deleting} <= deleted
    if may_run:
        assert of_type(actions, RemoveFinalizer) == []
        assert of_type(actions, DeleteDurableCopies) == [], "a driver may still copy"
    else:
        maps = of_type(actions, DeleteSnapshotMaps)
        assert maps == [DeleteSnapshotMaps(all_snapshot_map_names(JOB.uid))]
        spec = observation.spec
        storage = spec.durable_storage if isinstance(spec, SnapshotJobSpec) else None
        copies = of_type(actions, DeleteDurableCopies)
        assert copies == [DeleteDurableCopies(durable_copy_map_name(JOB.uid), storage)]
        assert actions.index(copies[0]) < actions.index(RemoveFinalizer())
        assert actions[-1] == RemoveFinalizer()


@many
@given(observations())
def test_an_invalid_spec_is_reported_without_touching_the_execution(
    observation: Observation,
) -> None:
    invalid = replace(observation, spec=InvalidSpec("restartPolicy.maxBackoffSeconds too low"))

    actions = decide(invalid)

    assert {type(action) for action in actions} <= {PatchStatus, EmitEvent, Requeue}
    after = status_after(observation.status, actions)
    assert after.phase is observation.status.phase
    assert after.execution == observation.status.execution
    degraded = after.condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.reason == "InvalidSpec"
    old = observation.status.condition(ConditionType.DEGRADED)
    if old is None or old.reason != "InvalidSpec":
        assert EventReason.INVALID_SPEC in reasons(actions)


# Forced restarts, failures and backoff.


@many
@given(specs(), st.sampled_from([None, *TerminationMode]), st.sampled_from(sorted(LIVE_PHASES)))
def test_a_forceful_restart_overrides_a_pending_graceful_request(
    spec: SnapshotJobSpec, mode: TerminationMode | None, phase: Phase
) -> None:
    pending = graceful(mode) if mode is not None else None
    observation = running_job(
        spec, phase=phase, pod_phase=PodPhase.FAILED, exit_code=75, termination=pending, restarts=3
    )

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.restarts == 3, "not counted as a failure"
    assert of_type(actions, RequestTermination) == []
    assert after.phase is Phase.STARTING, "restarts at once, whatever the spec asks"
    assert after.termination is None
    assert EventReason.FORCED_RESTART in reasons(actions)
    assert len(creates(actions)) == 1


@given(specs())
def test_a_forceful_restart_waits_for_the_store_and_still_skips_suspend(
    spec: SnapshotJobSpec,
) -> None:
    unsafe = StoreHealth(cluster_safe=False, member_count=3)
    first = running_job(
        spec,
        pod_phase=PodPhase.FAILED,
        exit_code=75,
        store=unsafe,
        termination=graceful(TerminationMode.SUSPEND_GRACEFUL),
    )
    actions = decide(first)
    waiting = status_after(first.status, actions)
    assert waiting.phase is Phase.RESTARTING
    assert waiting.termination is not None
    assert waiting.termination.mode is TerminationMode.RESTART_FORCEFUL

    later = replace(
        first, status=waiting, store=HEALTHY, spec=spec.model_copy(update={"suspend": True})
    )
    started = decide(later)

    assert len(creates(started)) == 1, "the restore that resolves transactions comes first"
    assert status_after(waiting, started).termination is None


@many
@given(specs(), st.sampled_from([1, 3, 137, None]), st.integers(0, 6))
def test_a_failed_execution_restarts_after_backoff_suspends_or_fails(
    spec: SnapshotJobSpec, exit_code: int | None, restarts: int
) -> None:
    observation = running_job(
        spec, pod_phase=PodPhase.FAILED, exit_code=exit_code, restarts=restarts
    )

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert creates(actions) == []
    assert after.last_failure is not None and after.last_failure.reason == "DriverFailed"
    if spec.suspend_on_failure:
        assert after.phase is Phase.SUSPENDED
        assert EventReason.SUSPENDED_ON_FAILURE in reasons(actions)
        assert of_type(actions, RequestTermination) == [], "SUSPEND_FORCEFUL: no snapshot"
    elif restarts >= spec.restart_policy.max_restarts:
        assert after.phase is Phase.FAILED
        assert EventReason.RESTART_LIMIT_REACHED in reasons(actions)
        assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.TRUE
    else:
        assert after.phase is Phase.RESTARTING
        assert after.restarts == restarts + 1
        backoff = spec.restart_policy.backoff(restarts + 1)
        assert actions[-1] == Requeue(min(backoff, SETTINGS.resync_seconds))


@given(specs(), st.integers(1, 5), st.integers(0, 400))
def test_a_restart_waits_for_its_backoff(spec: SnapshotJobSpec, restarts: int, waited: int) -> None:
    policy = spec.restart_policy.model_copy(update={"max_restarts": 10})
    spec = spec.model_copy(
        update={"suspend": False, "suspend_on_failure": False, "restart_policy": policy}
    )
    observation = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1, restarts=restarts - 1)
    failed = status_after(observation.status, decide(observation))
    assert failed.phase is Phase.RESTARTING
    later = replace(observation, status=failed, pods=(), now=NOW + timedelta(seconds=waited))

    actions = decide(later)

    due = waited >= spec.restart_policy.backoff(restarts)
    assert bool(creates(actions)) == due


def test_restarts_reset_once_an_execution_ran_for_the_maximum_backoff() -> None:
    spec = spec_of({"restartPolicy": {"maxBackoffSeconds": 20}})
    observation = running_job(spec, restarts=4)

    after = status_after(observation.status, decide(observation))

    assert after.restarts == 0


def test_a_corrupted_restore_point_fails_permanently_naming_the_snapshot() -> None:
    spec = spec_of()
    observation = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=65, record=a_snapshot())

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.phase is Phase.FAILED
    assert after.last_failure is not None
    assert "snapshotId=0" in after.last_failure.message
    assert "initialSnapshotName" in after.last_failure.message
    assert creates(actions) == []


def test_kstatus_reads_a_failed_job_as_stalled_and_a_restart_as_reconciling() -> None:
    spec = spec_of()
    corrupted = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=65, record=a_snapshot())
    failed = status_after(corrupted.status, decide(corrupted))
    stalled = condition(failed, ConditionType.STALLED)
    assert stalled.status is ConditionStatus.TRUE
    assert failed.last_failure is not None
    assert (stalled.reason, stalled.message) == (
        failed.last_failure.reason,
        failed.last_failure.message,
    )
    assert condition(failed, ConditionType.RECONCILING).status is ConditionStatus.FALSE

    crashed = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1)
    restarting = status_after(crashed.status, decide(crashed))
    assert restarting.phase is Phase.RESTARTING
    assert condition(restarting, ConditionType.STALLED).status is ConditionStatus.FALSE
    reconciling = condition(restarting, ConditionType.RECONCILING)
    progressing = condition(restarting, ConditionType.PROGRESSING)
    assert reconciling.status is ConditionStatus.TRUE
    assert (reconciling.reason, reconciling.message) == (progressing.reason, progressing.message)


# Spec changes of a live execution -> termination modes.


def _live_and_idle(spec: SnapshotJobSpec, **kwargs: Any) -> tuple[Observation, tuple[Action, ...]]:
    observation = running_job(spec, **kwargs)
    return observation, decide(observation)


@given(specs())
def test_suspend_asks_for_a_terminal_snapshot(spec: SnapshotJobSpec) -> None:
    observation, actions = _live_and_idle(spec.model_copy(update={"suspend": True}))

    after = status_after(observation.status, actions)
    if spec.processing_guarantee is ProcessingGuarantee.NONE:
        assert of_type(actions, DeleteDriverPod) and after.phase is Phase.SUSPENDED
    else:
        [request] = of_type(actions, RequestTermination)
        assert request.mode is TerminationMode.SUSPEND_GRACEFUL
        assert after.phase is Phase.COMPLETING
        assert of_type(actions, DeleteDriverPod) == []


@given(specs(), st.sampled_from(["new-export"]), st.booleans())
def test_a_new_export_name_exports_or_cancels_with_a_terminal_export(
    spec: SnapshotJobSpec, name: str, cancel: bool
) -> None:
    assume(not spec.suspend and spec.processing_guarantee is not ProcessingGuarantee.NONE)
    changed = spec.model_copy(
        update={"export_snapshot": ExportSnapshotSpec(name=name, cancel_job=cancel)}
    )

    _, actions = _live_and_idle(changed)

    if cancel:
        [request] = of_type(actions, RequestTermination)
        assert (request.mode, request.export_name) == (TerminationMode.CANCEL_GRACEFUL, name)
    else:
        assert of_type(actions, RequestExport)[0].name == name
        assert of_type(actions, RequestTermination) == []
    assert of_type(actions, DeleteDriverPod) == []


@given(specs())
def test_an_upgrade_rolls_out_by_upgrade_mode(spec: SnapshotJobSpec) -> None:
    assume(not spec.suspend and spec.export_snapshot is None)

    observation, actions = _live_and_idle(spec, spec_hash=OTHER_HASH)

    assert EventReason.UPGRADING in reasons(actions)
    after = status_after(observation.status, actions)
    if spec.upgrade_mode is UpgradeMode.SNAPSHOT:
        [request] = of_type(actions, RequestTermination)
        assert request.mode is TerminationMode.RESTART_GRACEFUL
    else:
        assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(driver_pod_name(JOB.name, 2))]
        assert after.phase is Phase.RESTARTING


def test_a_stateless_upgrade_starts_without_the_jobs_state() -> None:
    spec = spec_of({"upgradeMode": "stateless"})
    observation = running_job(spec, spec_hash=OTHER_HASH, record=a_snapshot())
    stopped = status_after(observation.status, decide(observation))
    later = replace(observation, status=stopped, pods=())

    actions = decide(later)

    [created] = creates(actions)
    record = status_after(stopped, actions).record()
    assert record.snapshot_id == NO_SNAPSHOT
    assert record.ongoing_snapshot_id == 0, "snapshot ids are never reused"
    assert created.initial_snapshot_name is None


@given(specs())
def test_only_one_request_is_pending_at_a_time(spec: SnapshotJobSpec) -> None:
    changed = spec.model_copy(update={"suspend": True})
    pending = graceful(TerminationMode.RESTART_GRACEFUL)

    observation, actions = _live_and_idle(
        changed, phase=Phase.COMPLETING, termination=pending, spec_hash=OTHER_HASH
    )

    assert of_type(actions, RequestTermination) == []
    assert status_after(observation.status, actions).termination == pending


@given(specs(), st.sampled_from([m for m in TerminationMode if m.terminal_snapshot]))
def test_a_graceful_request_not_served_in_time_becomes_forceful(
    spec: SnapshotJobSpec, mode: TerminationMode
) -> None:
    late = graceful(mode, seconds_ago=SETTINGS.graceful_timeout_seconds + 1)

    observation, actions = _live_and_idle(spec, phase=Phase.COMPLETING, termination=late)

    assert EventReason.TERMINATION_ESCALATED in reasons(actions)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(driver_pod_name(JOB.name, 2))]
    after = status_after(observation.status, actions)
    expected = {"RESTART": Phase.RESTARTING, "SUSPEND": Phase.SUSPENDED, "CANCEL": Phase.FAILED}
    assert after.phase is expected[mode.action_after.value]
    assert after.termination is None


@given(specs(), st.sampled_from([m for m in TerminationMode if m.terminal_snapshot]))
def test_a_served_request_is_carried_out(spec: SnapshotJobSpec, mode: TerminationMode) -> None:
    spec = spec.model_copy(update={"export_snapshot": None})
    observation, actions = _live_and_idle(
        spec,
        phase=Phase.COMPLETING,
        termination=graceful(mode),
        pod_phase=PodPhase.FAILED,
        exit_code=64,
    )

    after = status_after(observation.status, actions)
    assert after.restarts == 0
    if mode.action_after.value == "SUSPEND":
        assert after.phase is Phase.SUSPENDED
    elif mode.action_after.value == "CANCEL":
        assert after.phase is Phase.FAILED and after.last_failure is not None
        assert after.last_failure.reason == "Cancelled"
        assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    elif spec.suspend:
        assert after.phase is Phase.SUSPENDED, "the terminal snapshot already left it clean"
    else:
        assert after.phase is Phase.STARTING and len(creates(actions)) == 1


# Between executions: suspend, resume, export by copy, store gating.


def test_resume_restores_the_last_good_snapshot() -> None:
    spec = spec_of({"initialSnapshotName": "seed"})

    actions = decide(suspended_job(spec, a_snapshot(SnapshotKind.TERMINAL)))

    [created] = creates(actions)
    assert created.initial_snapshot_name is None, "the job's own snapshot wins"
    assert created.execution_id == execution_id(JOB.uid, 3, NOW)


def test_a_first_start_uses_the_initial_snapshot() -> None:
    spec = spec_of({"initialSnapshotName": "seed"})
    observation = Observation(JOB, 1, spec, SnapshotJobStatus(), NOW, (), HEALTHY)

    [created] = creates(decide(observation))

    assert created.initial_snapshot_name == "seed"
    assert created.attempt == 1


def test_an_export_only_restore_point_is_never_in_the_record() -> None:
    export_only = a_snapshot(SnapshotKind.EXPORT_ONLY, "nightly")
    spec = spec_of()

    [created] = creates(decide(suspended_job(spec, export_only)))

    assert export_only.snapshot_id == NO_SNAPSHOT
    assert created.initial_snapshot_name is None


@pytest.mark.parametrize(
    ("kind", "name", "source"),
    [
        (SnapshotKind.TERMINAL, None, f"__sj.b1.snapshot.{JOB.uid}.0"),
        (SnapshotKind.TERMINAL_EXPORTED, "final", "__sj.export.default.final"),
    ],
)
def test_an_export_while_suspended_copies_the_restore_point(
    kind: SnapshotKind, name: str | None, source: str
) -> None:
    spec = spec_of({"suspend": True, "exportSnapshot": {"name": "nightly"}})
    observation = suspended_job(spec, a_snapshot(kind, name))

    actions = decide(observation)

    assert of_type(actions, CopySnapshotToExport) == [
        CopySnapshotToExport(source, 0, "nightly", "__sj.export.default.nightly")
    ]
    copying = status_after(observation.status, actions)
    assert copying.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    exported = {"name": "nightly", "snapshotId": 0, "numBytes": 10, "terminal": False}
    done = SnapshotJobStatus.model_validate(
        {
            **copying.model_dump(mode="json"),
            "exportedSnapshots": [{**exported, "createdAt": NOW.isoformat()}],
        }
    )

    finished = decide(replace(observation, status=done))

    assert status_after(done, finished).phase is Phase.SUSPENDED
    assert EventReason.SNAPSHOT_EXPORTED in reasons(finished)


def test_an_export_over_the_restore_point_is_rejected_without_touching_the_execution() -> None:
    spec = spec_of({"exportSnapshot": {"name": "final", "cancelJob": True}})
    observation = running_job(spec, record=a_snapshot(SnapshotKind.TERMINAL_EXPORTED, "final"))

    actions = decide(observation)

    assert {type(a) for a in actions} <= {PatchStatus, EmitEvent, Requeue}
    assert EventReason.EXPORT_REJECTED in reasons(actions)
    degraded = status_after(observation.status, actions).condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.reason == "ExportRejected"


@pytest.mark.parametrize(
    ("store", "quorum", "reason"),
    [
        (None, 0, "StoreUnreachable"),
        (StoreHealth(cluster_safe=False, member_count=3), 0, "NotClusterSafe"),
        (StoreHealth(cluster_safe=True, member_count=1), 0, "TooFewMembers"),
        (StoreHealth(cluster_safe=True, member_count=2), 3, "BelowQuorum"),
    ],
)
def test_no_execution_starts_while_the_store_is_not_ready(
    store: StoreHealth | None, quorum: int, reason: str
) -> None:
    spec = spec_of({"splitBrainProtection": True})
    record = ExecutionRecord().with_quorum_size(quorum)
    observation = replace(suspended_job(spec, record), store=store)

    actions = decide(observation)

    assert creates(actions) == []
    after = status_after(observation.status, actions)
    assert after.phase is Phase.RESTARTING
    store_ready = after.condition(ConditionType.STORE_READY)
    assert store_ready is not None and store_ready.reason == reason
    assert EventReason.STORE_NOT_READY in reasons(actions)


def test_split_brain_protection_raises_the_quorum_when_an_execution_starts() -> None:
    spec = spec_of({"splitBrainProtection": True})
    observation = replace(suspended_job(spec, ExecutionRecord()), store=StoreHealth(True, 5))

    actions = decide(observation)

    assert creates(actions)
    assert status_after(observation.status, actions).record().quorum_size == 3


@given(observations(), st.sampled_from([Phase.FAILED, Phase.COMPLETED]))
def test_a_failed_or_completed_job_stays_until_its_spec_changes(
    observation: Observation, phase: Phase
) -> None:
    status = observation.status.model_copy(
        update={"phase": phase, "observed_generation": observation.generation}
    )
    stopped = tuple(pod for pod in observation.pods if not pod.may_run)
    unchanged = replace(observation, status=status, pods=stopped)

    actions = decide(unchanged)
    changed = decide(replace(unchanged, generation=observation.generation + 1))

    assert creates(actions) == []
    assert status_after(status, actions).phase is phase
    assert status_after(status, changed).phase is not phase


def test_a_stale_driver_of_an_older_execution_is_deleted() -> None:
    spec = spec_of()
    observation = running_job(spec)
    stale = DriverPod(driver_pod_name(JOB.name, 1), execution_id(JOB.uid, 1, NOW), PodPhase.RUNNING)

    actions = decide(replace(observation, pods=(*observation.pods, stale)))

    assert DeleteDriverPod(stale.name) in actions
    assert EventReason.STALE_DRIVER_DELETED in reasons(actions)
    assert DeleteDriverPod(driver_pod_name(JOB.name, 2)) not in actions


def test_a_long_pod_name_is_cut_to_a_dns_label() -> None:
    name = driver_pod_name("a" * 70, 12)

    assert len(name) <= 63
    assert name.endswith("-driver-12")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert name != driver_pod_name("a" * 69 + "b", 12)


def test_suspend_on_failure_holds_the_job_until_its_spec_changes() -> None:
    spec = spec_of({"suspendOnFailure": True})
    observation = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1)
    held = status_after(observation.status, decide(observation))
    assert held.phase is Phase.SUSPENDED
    assert condition(held, ConditionType.DEGRADED).reason == "SuspendedOnFailure"

    later = replace(observation, status=held, pods=(), now=NOW + timedelta(hours=1))
    unchanged = decide(later)
    changed = decide(replace(later, generation=2, spec=spec_of({"image": "fixed"})))

    assert creates(unchanged) == []
    assert status_after(held, unchanged).phase is Phase.SUSPENDED
    assert len(creates(changed)) == 1


def test_a_driver_that_cannot_run_the_pipeline_fails_without_restarts() -> None:
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=2)

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.phase is Phase.FAILED
    assert after.last_failure is not None and after.last_failure.reason == "BadInput"
    assert after.restarts == 0
    assert creates(actions) == []


@pytest.mark.parametrize(
    ("age", "failure", "status", "reason"),
    [
        (5, None, ConditionStatus.TRUE, "SnapshotRecent"),
        (10 * 3 + 61, None, ConditionStatus.FALSE, "SnapshotStale"),
        (5, "Chunk write indeterminate", ConditionStatus.FALSE, "SnapshotFailed"),
    ],
)
def test_snapshot_health_reports_the_recovery_point(
    age: int, failure: str | None, status: ConditionStatus, reason: str
) -> None:
    observation = running_job(spec_of(), record=snapshot_at(ago(age), failure))

    after = status_after(observation.status, decide(observation))

    healthy = condition(after, ConditionType.SNAPSHOT_HEALTHY)
    assert (healthy.status, healthy.reason) == (status, reason)
    # The record keeps figures of the last attempt only: after a failed one, the restore
    # point's time is what the operator saw before, here nothing.
    expected = ago(age) if failure is None else None
    assert after.last_snapshot_time == expected


def test_a_job_without_a_snapshot_has_unknown_snapshot_health() -> None:
    observation = running_job(spec_of())

    after = status_after(observation.status, decide(observation))

    assert condition(after, ConditionType.SNAPSHOT_HEALTHY).status is ConditionStatus.UNKNOWN
    assert after.last_snapshot_time is None


def test_an_export_only_request_is_cleared_once_the_driver_exported() -> None:
    observation = running_job(spec_of({"exportSnapshot": {"name": "nightly"}}))
    requested = status_after(observation.status, decide(observation))
    assert requested.export_request is not None
    exported = requested.model_copy(
        update={
            "exported_snapshots": [
                ExportedSnapshot(
                    name="nightly", snapshot_id=4, num_bytes=10, created_at=NOW, terminal=False
                )
            ]
        }
    )

    actions = decide(replace(observation, status=exported))

    assert status_after(exported, actions).export_request is None
    assert EventReason.SNAPSHOT_EXPORTED in reasons(actions)
    assert of_type(actions, RequestExport) == []


def test_an_export_only_request_not_served_in_time_is_asked_again() -> None:
    observation = running_job(spec_of({"exportSnapshot": {"name": "nightly"}}))
    requested = status_after(observation.status, decide(observation))
    late = replace(
        observation,
        status=requested,
        now=NOW + timedelta(seconds=SETTINGS.graceful_timeout_seconds),
    )

    actions = decide(late)

    assert EventReason.EXPORT_TIMED_OUT in reasons(actions)
    [again] = of_type(actions, RequestExport)
    assert again.name == "nightly"
    assert requested.export_request is not None
    assert again.request_id != requested.export_request.request_id


def test_cancel_with_export_while_suspended_copies_then_cancels() -> None:
    spec = spec_of({"suspend": True, "exportSnapshot": {"name": "final", "cancelJob": True}})
    observation = suspended_job(spec, a_snapshot(SnapshotKind.TERMINAL))
    copying = status_after(observation.status, decide(observation))
    assert copying.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    exported = copying.model_copy(
        update={
            "exported_snapshots": [
                ExportedSnapshot(
                    name="final", snapshot_id=0, num_bytes=10, created_at=NOW, terminal=False
                )
            ]
        }
    )

    actions = decide(replace(observation, status=exported))

    after = status_after(exported, actions)
    assert after.phase is Phase.FAILED
    assert after.last_failure is not None and after.last_failure.reason == "Cancelled"
    assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    assert {EventReason.SNAPSHOT_EXPORTED, EventReason.CANCELLED} <= reasons(actions)
