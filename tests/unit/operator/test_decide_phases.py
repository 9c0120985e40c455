"""The phase rules (phases.py, plan.py): a decision changes the phase only as the table allows.

The transitions are data (:data:`TRANSITIONS`), and :class:`Plan` checks every phase change it
returns against them, so no branch of the decision is trusted to stay within them. Both ends
are checked: the plan against every pair of phases, and decisions on arbitrary observations
against the table.
"""

from __future__ import annotations

import pytest
from hypothesis import given

from snapshot_operator.reconcile import (
    TRANSITIONS,
    DecisionSettings,
    IllegalPhaseChange,
    InvalidSpec,
    Observation,
    decide,
)
from snapshot_operator.reconcile.plan import Plan
from snapshotjob_contract import Phase, SnapshotJobStatus
from tests.unit.operator.decide_helpers import many
from tests.unit.operator.world import JOB, NOW, observations, status_after

pytestmark = pytest.mark.filterwarnings("error")

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


@many
@given(observations())
def test_phase_changes_follow_the_transition_table(observation: Observation) -> None:
    actions = decide(observation)

    before = observation.status.phase
    after = status_after(observation.status, actions).phase
    assert after == before or after in TRANSITIONS[before], f"{before} -> {after}"


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
