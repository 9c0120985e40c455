"""Properties of every decision (decide.py), over every phase x spec change x Pod state x store.

Each test draws arbitrary observations (see ``world.py``), including inconsistent ones (a
RUNNING phase without a Pod, Pods of older executions), decides once, and checks what the
actions do: the safety rules (never two drivers, no start the store does not allow, no
automatic restore of an export-only snapshot), the shape of every result (every condition for
the observed generation with a reason from the enum, Events with fixed reasons and
Kubernetes-style messages, one requeue last), and a spec the operator cannot apply. The phase
rules are in ``test_decide_phases.py``, deletion in ``test_decide_deletion.py``; what each part
of the decision does is in the module named after it.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from hypothesis import HealthCheck, assume, given, settings

from snapshot_operator.reconcile import (
    DriverPod,
    EmitEvent,
    EventReason,
    InvalidSpec,
    Observation,
    PatchStatus,
    PodPhase,
    Requeue,
    StoreHealth,
    decide,
)
from snapshotjob_contract import NO_SNAPSHOT, ConditionReason, ConditionType, SnapshotJobSpec
from tests.unit.operator.decide_helpers import creates, many, of_type, reasons
from tests.unit.operator.world import observations, status_after

pytestmark = pytest.mark.filterwarnings("error")

EVENT_MESSAGE = re.compile(r"^[A-Z][^\n]*[^.\s]$")
CAMEL_CASE = re.compile(r"^[A-Z][A-Za-z0-9]*$")


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
def test_the_status_reports_all_conditions_for_the_observed_generation(
    observation: Observation,
) -> None:
    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.observed_generation == observation.generation
    assert {c.type for c in after.conditions} == set(ConditionType)
    for reported in after.conditions:
        assert reported.reason in set(ConditionReason), reported
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
