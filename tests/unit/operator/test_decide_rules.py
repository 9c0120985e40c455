"""The decision's rules kept as data: condition reasons, the exit-code table, the phase changes.

The other ``test_decide*`` modules check what decisions do; these check that the data they are
made from is complete and that the decision cannot step outside it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from snapshot_operator.reconcile import (
    TRANSITIONS,
    DecisionSettings,
    IllegalPhaseChange,
    InvalidSpec,
    Observation,
    decide,
)
from snapshot_operator.reconcile.exits import EXITS, ExitOutcome, exit_handling
from snapshot_operator.reconcile.plan import Plan
from snapshotjob_contract import (
    ConditionReason,
    DriverExit,
    Phase,
    SnapshotJobStatus,
    TerminationMode,
    TerminationStatus,
)
from tests.unit.operator.world import JOB, NOW, observations, status_after

pytestmark = pytest.mark.filterwarnings("error")
many = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])


@many
@given(observations())
def test_every_condition_reason_comes_from_the_enum(observation: Observation) -> None:
    after = status_after(observation.status, decide(observation))

    for condition in after.conditions:
        assert condition.reason in set(ConditionReason), condition


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
        == {None, DriverExit.FAILED, DriverExit.FAILPOINT_CRASH, DriverExit.TRANSIENT_FAILURE}
    )
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


PHASE_CHANGES = [(before, after) for before in Phase for after in Phase if after is not before]


def plan_moving(before: Phase, after: Phase) -> Plan:
    observation = Observation(
        job=JOB,
        generation=1,
        spec=InvalidSpec("not needed to build a plan"),
        status=SnapshotJobStatus(phase=before),
        now=NOW,
    )
    plan = Plan(observation, DecisionSettings())
    plan.update(phase=after)
    return plan


@pytest.mark.parametrize(
    ("before", "after"),
    [(before, after) for before, after in PHASE_CHANGES if after not in TRANSITIONS[before]],
    ids=str,
)
def test_a_plan_refuses_a_phase_change_the_transitions_do_not_allow(
    before: Phase, after: Phase
) -> None:
    plan = plan_moving(before, after)

    with pytest.raises(IllegalPhaseChange, match=f"{before.value} -> {after.value}"):
        plan.actions()


@pytest.mark.parametrize(
    ("before", "after"),
    [(before, after) for before, after in PHASE_CHANGES if after in TRANSITIONS[before]],
    ids=str,
)
def test_a_plan_returns_a_phase_change_the_transitions_allow(before: Phase, after: Phase) -> None:
    actions = plan_moving(before, after).actions()

    assert actions, "at least the status patch and the requeue"
