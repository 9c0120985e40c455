"""The decision's rules kept as data: condition reasons, the exit-code table, the phase changes.

The other ``test_decide*`` modules check what decisions do; these check that the data they are
made from is complete and that the decision cannot step outside it.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings

from snapshot_operator.api import ConditionReason
from snapshot_operator.reconcile import Observation, decide
from tests.unit.operator.world import observations, status_after

pytestmark = pytest.mark.filterwarnings("error")
many = settings(max_examples=100, suppress_health_check=[HealthCheck.too_slow])


@many
@given(observations())
def test_every_condition_reason_comes_from_the_enum(observation: Observation) -> None:
    after = status_after(observation.status, decide(observation))

    for condition in after.conditions:
        assert condition.reason in set(ConditionReason), condition
