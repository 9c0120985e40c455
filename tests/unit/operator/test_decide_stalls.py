"""A running execution that takes no snapshot (stalls.py): Degraded first, then ended.

Found reading the code (issue 47): a driver that lives but takes no snapshot (a wedged sink
call, a hung epoch, a driver cut off from the API server) kept the job ``Ready`` for ever. The
bound is measured from the later of the restore point and the pipeline's start, so a new
execution gets the whole bound whatever the age of what it restored; the end goes through the
restart policy, and a stalled run does not reset the restart count, so a job that stalls every
time ends FAILED.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime

import pytest

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    EventReason,
    Observation,
    PodPhase,
    Requeue,
    decide,
)
from snapshotjob_contract import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    Phase,
    PipelineStartedStatus,
    SnapshotJobSpec,
)
from tests.unit.operator.decide_helpers import (
    SETTINGS,
    condition,
    of_type,
    reasons,
    running_job,
    snapshot_at,
    spec_of,
)
from tests.unit.operator.world import ago, status_after

pytestmark = pytest.mark.filterwarnings("error")

INTERVAL = 10
SPEC = spec_of({"snapshotIntervalSeconds": INTERVAL, "restartPolicy": {"maxRestarts": 2}})
BOUND = SPEC.stall_detection.bound_seconds(INTERVAL)
STALE_AFTER = INTERVAL * SETTINGS.stale_snapshot_intervals + SETTINGS.stale_snapshot_slack_seconds


def _running(
    spec: SnapshotJobSpec = SPEC,
    *,
    started_ago: float,
    snapshot_ago: float | None,
    restarts: int = 0,
) -> Observation:
    """A RUNNING execution whose pipeline started ``started_ago`` seconds before now, and whose
    restore point was taken ``snapshot_ago`` seconds before now (None: no snapshot at all)."""
    record = None if snapshot_ago is None else snapshot_at(ago(snapshot_ago))
    observation = running_job(spec, record=record, restarts=restarts)
    execution = observation.status.execution
    assert execution is not None
    started: datetime = ago(started_ago)
    status = observation.status.model_copy(
        update={
            "execution": execution.model_copy(update={"started_at": started}),
            "pipeline_started": PipelineStartedStatus(execution_id=execution.id, time=started),
            "last_snapshot_time": None if snapshot_ago is None else ago(snapshot_ago),
        }
    )
    return replace(observation, status=status)


def test_a_job_that_snapshots_is_left_alone() -> None:
    observation = _running(started_ago=BOUND * 10, snapshot_ago=INTERVAL)

    actions = decide(observation)
    status = status_after(observation.status, actions)

    assert not of_type(actions, DeleteDriverPod)
    assert condition(status, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    assert status.phase is Phase.RUNNING


def test_past_the_staleness_bound_the_job_is_degraded_with_one_event() -> None:
    observation = _running(started_ago=BOUND * 10, snapshot_ago=STALE_AFTER + 1)

    actions = decide(observation)
    status = status_after(observation.status, actions)
    again = decide(replace(observation, status=status))

    degraded = condition(status, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (
        ConditionStatus.TRUE,
        ConditionReason.SNAPSHOT_STALE,
    )
    assert f"boundSeconds={BOUND}" in degraded.message
    assert EventReason.SNAPSHOT_STALE in reasons(actions)
    assert EventReason.SNAPSHOT_STALE not in reasons(again)
    assert not of_type(actions, DeleteDriverPod)
    # Looked at again by the time the stall bound is reached.
    (requeue,) = of_type(actions, Requeue)
    assert requeue.after_seconds <= BOUND - STALE_AFTER - 1


def test_past_the_stall_bound_the_execution_is_ended_as_a_failure() -> None:
    observation = _running(started_ago=BOUND * 10, snapshot_ago=BOUND + 1)
    (pod,) = observation.pods

    actions = decide(observation)
    status = status_after(observation.status, actions)

    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name)]
    assert {EventReason.DRIVER_STALLED, EventReason.EXECUTION_FAILED} <= reasons(actions)
    assert status.phase is Phase.RESTARTING and status.restarts == 1
    assert status.last_failure is not None
    assert status.last_failure.reason == ConditionReason.DRIVER_STALLED
    assert f"boundSeconds={BOUND}" in status.last_failure.message


def test_a_new_execution_gets_the_whole_bound_whatever_the_age_it_restored() -> None:
    observation = _running(started_ago=BOUND - 1, snapshot_ago=BOUND * 100)

    actions = decide(observation)
    status = status_after(observation.status, actions)

    assert not of_type(actions, DeleteDriverPod)
    assert status.phase is Phase.RUNNING


def test_a_job_that_stalls_every_time_ends_failed() -> None:
    # Each execution runs past maxBackoffSeconds before its bound: that must not reset the count.
    spec = spec_of(
        {
            "snapshotIntervalSeconds": INTERVAL,
            "restartPolicy": {"maxRestarts": 2, "backoffSeconds": 1, "maxBackoffSeconds": 5},
        }
    )
    observation = _running(spec, started_ago=BOUND + 1, snapshot_ago=BOUND * 50, restarts=2)

    status = status_after(observation.status, decide(observation))

    assert status.phase is Phase.FAILED
    assert status.last_failure is not None
    assert status.last_failure.reason == ConditionReason.DRIVER_STALLED


def test_a_long_run_with_a_snapshot_of_its_own_still_resets_the_count() -> None:
    spec = spec_of(
        {
            "snapshotIntervalSeconds": INTERVAL,
            "restartPolicy": {"backoffSeconds": 1, "maxBackoffSeconds": 5},
        }
    )
    observation = _running(spec, started_ago=100, snapshot_ago=INTERVAL, restarts=2)

    status = status_after(observation.status, decide(observation))

    assert status.restarts == 0


def test_with_stall_detection_off_the_job_is_only_degraded() -> None:
    spec = spec_of({"snapshotIntervalSeconds": INTERVAL, "stallDetection": {"enabled": False}})
    observation = _running(spec, started_ago=BOUND * 10, snapshot_ago=BOUND * 5)

    actions = decide(observation)
    status = status_after(observation.status, actions)

    assert not of_type(actions, DeleteDriverPod)
    degraded = condition(status, ConditionType.DEGRADED)
    assert degraded.reason == ConditionReason.SNAPSHOT_STALE
    assert "stallDetection is off" in degraded.message


def test_a_job_without_snapshots_never_stalls() -> None:
    spec = spec_of({"processingGuarantee": "NONE", "upgradeMode": "stateless"})
    observation = _running(spec, started_ago=BOUND * 10, snapshot_ago=None)

    actions = decide(observation)

    assert not of_type(actions, DeleteDriverPod)
    assert condition(status_after(observation.status, actions), ConditionType.DEGRADED).status is (
        ConditionStatus.FALSE
    )


def test_a_driver_pod_not_yet_running_is_not_judged() -> None:
    observation = _running(started_ago=BOUND * 10, snapshot_ago=BOUND * 10)
    (pod,) = observation.pods
    pending = replace(observation, pods=(replace(pod, phase=PodPhase.PENDING),))

    assert not of_type(decide(pending), DeleteDriverPod)


def test_a_short_bound_is_reported_at_half_of_it_before_it_ends_the_execution() -> None:
    spec = spec_of(
        {"snapshotIntervalSeconds": 1, "stallDetection": {"intervals": 2, "minSeconds": 10}}
    )
    early = _running(spec, started_ago=100, snapshot_ago=4)
    half = _running(spec, started_ago=100, snapshot_ago=5)

    early_status = status_after(early.status, decide(early))
    half_actions = decide(half)

    assert condition(early_status, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    assert EventReason.SNAPSHOT_STALE in reasons(half_actions)
    assert not of_type(half_actions, DeleteDriverPod)
