"""How an execution ends (exits.py): the exit-code table, and where each kind of exit leads.

The table (:data:`EXITS`) is checked as data: every code has a row, only failures count and
back off, the codes that stop the job name their phase, every message is a template of the
known fields. Then the decisions on a driver that ended: a served termination is carried out,
input the driver cannot run and restore points that cannot be restored fail the job for good,
a transient failure goes through the restart policy, a fenced driver (a newer execution owns
the job) starts nothing, and a driver that lost the store's quorum restarts once the store has
one again. Restarts and their bounds are in ``test_decide_restarts.py``; what a failure
reports, in ``test_decide_failure_reports.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_operator.reconcile import (
    LIVE_PHASES,
    DeleteDriverPod,
    DriverPod,
    EventReason,
    PatchStatus,
    PodPhase,
    Requeue,
    StoreHealth,
    decide,
    driver_pod_name,
    execution_id,
)
from snapshot_operator.reconcile.exits import EXITS, ExitOutcome, exit_handling
from snapshotjob_contract import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    DriverExit,
    Phase,
    SnapshotJobSpec,
    TerminationMode,
    TerminationStatus,
)
from tests.unit.operator.decide_helpers import (
    HEALTHY,
    a_snapshot,
    condition,
    creates,
    decide_running,
    graceful,
    many,
    of_type,
    reasons,
    running_job,
    spec_of,
)
from tests.unit.operator.world import JOB, NOW, specs, status_after

pytestmark = pytest.mark.filterwarnings("error")


def test_the_exit_table_covers_every_exit_code_and_any_other() -> None:
    assert set(EXITS) == {*DriverExit, None}
    assert exit_handling(1, None) is EXITS[None]
    assert exit_handling(None, None) is EXITS[None]


@pytest.mark.parametrize("code", [DriverExit.RESTART_FORCEFUL, DriverExit.INTERRUPTED])
def test_restarts_at_once_are_neither_failures_nor_backed_off(code: DriverExit) -> None:
    handling = EXITS[code]

    assert handling.outcome is ExitOutcome.RESTART_AT_ONCE
    assert not handling.outcome.counts_as_failure and not handling.outcome.backoff
    assert handling.restart_reason is not None and handling.event is not None


def test_only_failures_and_outages_count_and_back_off() -> None:
    counted = {code for code, handling in EXITS.items() if handling.outcome.counts_as_failure}
    backed_off = {code for code, handling in EXITS.items() if handling.outcome.backoff}

    assert (
        counted
        == backed_off
        == {
            None,
            DriverExit.FAILED,
            DriverExit.FAILPOINT_CRASH,
            DriverExit.TRANSIENT_FAILURE,
            DriverExit.STALLED,
        }
    )
    assert EXITS[DriverExit.STALLED].failure is ConditionReason.DRIVER_STALLED
    assert EXITS[None].failure is ConditionReason.DRIVER_FAILED
    assert EXITS[DriverExit.TRANSIENT_FAILURE].failure is ConditionReason.TRANSIENT_FAILURE


def test_exits_that_stop_the_job_name_their_phase() -> None:
    stops = {code: h for code, h in EXITS.items() if h.outcome is ExitOutcome.STOP}

    assert {code: h.phase for code, h in stops.items()} == {
        DriverExit.COMPLETED: Phase.COMPLETED,
        DriverExit.BAD_INPUT: Phase.FAILED,
        DriverExit.SNAPSHOT_CORRUPTED: Phase.FAILED,
        DriverExit.SNAPSHOT_NOT_FOUND: Phase.FAILED,
        DriverExit.RESTORE_NEEDS_CONSENT: Phase.FAILED,
        DriverExit.SNAPSHOT_INCOMPATIBLE: Phase.FAILED,
        DriverExit.SOURCE_DATA_LOST: Phase.FAILED,
    }
    assert all((h.phase is Phase.FAILED) == (h.failure is not None) for h in stops.values())


def test_a_terminated_exit_nobody_asked_for_is_a_plain_failure() -> None:
    asked = TerminationStatus(
        mode=TerminationMode.SUSPEND_GRACEFUL,
        request_id="e/SUSPEND_GRACEFUL",
        requested_at=NOW,
        reason="SuspendRequested",
    )

    assert exit_handling(DriverExit.TERMINATED, asked).outcome is ExitOutcome.CARRY_OUT_TERMINATION
    assert exit_handling(DriverExit.TERMINATED, None) is EXITS[None]


@pytest.mark.parametrize("code", [*DriverExit, None], ids=str)
def test_every_exit_message_is_a_template_of_the_known_fields(code: DriverExit | None) -> None:
    message = EXITS[code].message.format(
        code=code, context="c", dropped="", snapshot_id=1, detail=""
    )

    assert "{" not in message


@given(specs(), st.sampled_from([m for m in TerminationMode if m.terminal_snapshot]))
def test_a_served_request_is_carried_out(spec: SnapshotJobSpec, mode: TerminationMode) -> None:
    spec = spec.model_copy(update={"export_snapshot": None})
    observation, actions = decide_running(
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


def test_a_driver_that_cannot_run_the_pipeline_fails_without_restarts() -> None:
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=2)

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.phase is Phase.FAILED
    assert after.last_failure is not None and after.last_failure.reason == "BadInput"
    assert after.restarts == 0
    assert creates(actions) == []


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


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (DriverExit.SNAPSHOT_NOT_FOUND, "SnapshotNotFound"),
        (DriverExit.SNAPSHOT_INCOMPATIBLE, "SnapshotIncompatible"),
    ],
)
def test_a_restore_that_cannot_succeed_fails_for_good(code: DriverExit, reason: str) -> None:
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=code, restarts=1)

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.phase is Phase.FAILED and creates(actions) == []
    assert after.restarts == 1, "no restart can help: not counted"
    assert after.last_failure is not None and after.last_failure.reason == reason
    assert EventReason(reason) in reasons(actions)
    assert condition(after, ConditionType.DEGRADED).reason == reason


def test_a_transient_failure_goes_through_the_restart_policy() -> None:
    spec = spec_of()
    policy = spec.restart_policy
    observation = running_job(
        spec, pod_phase=PodPhase.FAILED, exit_code=DriverExit.TRANSIENT_FAILURE, restarts=1
    )
    exhausted = running_job(
        spec,
        pod_phase=PodPhase.FAILED,
        exit_code=DriverExit.TRANSIENT_FAILURE,
        restarts=policy.max_restarts,
    )

    actions = decide(observation)
    ended = status_after(exhausted.status, decide(exhausted))

    after = status_after(observation.status, actions)
    assert after.phase is Phase.RESTARTING and after.restarts == 2
    assert creates(actions) == []
    assert after.last_failure is not None and after.last_failure.reason == "TransientFailure"
    [requeue] = of_type(actions, Requeue)
    assert requeue.after_seconds == policy.backoff(2)
    assert EventReason.EXECUTION_FAILED in reasons(actions)
    assert ended.phase is Phase.FAILED
    assert ended.last_failure is not None and ended.last_failure.reason == "TransientFailure"


@many
@given(specs(), st.sampled_from(sorted(LIVE_PHASES)), st.integers(0, 6))
def test_a_fenced_current_driver_is_not_a_failure_and_starts_nothing(
    spec: SnapshotJobSpec, phase: Phase, restarts: int
) -> None:
    observation = running_job(
        spec, phase=phase, pod_phase=PodPhase.FAILED, exit_code=DriverExit.FENCED, restarts=restarts
    )

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert creates(actions) == []
    assert of_type(actions, DeleteDriverPod) == []
    assert after.phase is phase
    assert after.restarts == restarts
    assert after.last_failure is None
    assert after.execution == observation.status.execution
    degraded = condition(after, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (ConditionStatus.TRUE, "DriverFenced")
    assert reasons(actions) == {EventReason.DRIVER_FENCED}

    again = decide(replace(observation, status=after))

    assert creates(again) == [] and reasons(again) == set(), "one Event, then waiting"
    assert of_type(again, PatchStatus) == [], "nothing changes while waiting"


def test_a_fenced_driver_of_an_older_execution_is_ignored() -> None:
    observation = running_job(spec_of(), record=a_snapshot())
    stale = DriverPod(
        driver_pod_name(JOB.name, 1),
        execution_id(JOB.uid, 1, NOW),
        PodPhase.FAILED,
        DriverExit.FENCED,
    )
    observation = replace(observation, pods=(*observation.pods, stale))

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.phase is Phase.RUNNING
    assert after.restarts == 0 and after.last_failure is None
    assert creates(actions) == [] and of_type(actions, DeleteDriverPod) == []
    assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.FALSE


def test_deleting_a_fenced_driver_starts_again() -> None:
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=DriverExit.FENCED)
    waiting = status_after(observation.status, decide(observation))

    actions = decide(replace(observation, status=waiting, pods=()))

    after = status_after(waiting, actions)
    assert after.last_failure is not None and after.last_failure.reason == "DriverPodLost"
    assert condition(after, ConditionType.DEGRADED).reason != "DriverFenced"


def test_a_lost_quorum_waits_for_the_store_then_restarts_at_once() -> None:
    spec = spec_of({"splitBrainProtection": True})
    record = replace(a_snapshot(), quorum_size=3)
    minority = StoreHealth(cluster_safe=True, member_count=2)
    lost = running_job(
        spec,
        pod_phase=PodPhase.FAILED,
        exit_code=DriverExit.QUORUM_LOST,
        record=record,
        store=minority,
    )

    held_actions = decide(lost)

    held = status_after(lost.status, held_actions)
    assert creates(held_actions) == [], "no execution below the quorum"
    assert held.phase is Phase.RESTARTING
    assert held.restarts == 0 and held.last_failure is None, "not a failure"
    assert EventReason.QUORUM_LOST in reasons(held_actions)
    degraded = condition(held, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (ConditionStatus.TRUE, "QuorumLost")
    store_ready = condition(held, ConditionType.STORE_READY)
    assert (store_ready.status, store_ready.reason) == (ConditionStatus.FALSE, "BelowQuorum")

    whole = replace(lost, status=held, store=HEALTHY)
    restarted = decide(whole)

    assert len(creates(restarted)) == 1, "restarted once the store has a quorum"
    after = status_after(held, restarted)
    assert after.restarts == 0
    assert condition(after, ConditionType.DEGRADED).reason != "QuorumLost"
