"""Decisions that make failures end: a start the API server refuses, forced restarts in a row,
the driver's own message for the failures it names, and the restore failures that end.

Found by trying (issue 12): a refused create used to start a new execution on every reconcile,
and a driver that keeps ending in a forced restart was restarted for ever. These pin the
bounds: the same execution is created again after a backoff and the job FAILED after a few
attempts; forced restarts degrade the job from the 3rd in a row and count as failures beyond
the 10th. The observations are built with the helpers of ``test_decide.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest

from snapshot_operator.reconcile import (
    EmitEvent,
    EventReason,
    Observation,
    PatchStatus,
    PodPhase,
    Requeue,
    decide,
)
from snapshot_operator.reconcile.observation import StoreHealth
from snapshotjob_contract import (
    ConditionStatus,
    ConditionType,
    DriverExit,
    ForcedRestartsStatus,
    Phase,
    SnapshotJobSpec,
    StartFailureStatus,
)
from tests.unit.operator.decide_helpers import (
    HEALTHY,
    SETTINGS,
    a_snapshot,
    condition,
    creates,
    of_type,
    reasons,
    running_job,
    spec_of,
)
from tests.unit.operator.world import NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")


# A starting execution whose objects the API server did not create (status.startFailure).


def _refused(spec: SnapshotJobSpec, attempts: int = 1, seconds_ago: int = 0) -> Observation:
    """A STARTING execution without a Pod, its creation refused, Degraded already reported."""
    observation = running_job(spec, phase=Phase.STARTING)
    execution = observation.status.execution
    assert execution is not None
    failure = StartFailureStatus(
        execution_id=execution.id,
        object=f"Pod/{execution.driver_pod}",
        attempts=1,
        message="status=403 Forbidden: exceeded quota",
        time=NOW,
    )
    status = observation.status.model_copy(update={"start_failure": failure})
    reported = status_after(status, decide(replace(observation, status=status, pods=())))
    failure = failure.model_copy(update={"attempts": attempts, "time": ago(seconds_ago)})
    status = reported.model_copy(update={"start_failure": failure})
    return replace(observation, status=status, pods=())


def test_a_refused_execution_is_created_again_with_its_id_after_the_backoff() -> None:
    spec = spec_of()
    waiting = _refused(spec, attempts=2, seconds_ago=5)
    due = _refused(spec, attempts=2, seconds_ago=spec.restart_policy.backoff(2))

    early = decide(waiting)
    actions = decide(due)

    assert creates(early) == []
    assert all("execution" not in patch.patch for patch in of_type(early, PatchStatus))
    [requeue] = of_type(early, Requeue)
    assert requeue.after_seconds == spec.restart_policy.backoff(2) - 5
    execution = due.status.execution
    assert execution is not None
    [create] = creates(actions)
    assert (create.execution_id, create.pod_name) == (execution.id, execution.driver_pod)
    after = status_after(due.status, actions)
    assert after.execution == execution and after.phase is Phase.STARTING
    degraded = condition(after, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (ConditionStatus.TRUE, "CreateFailed")
    assert "exceeded quota" in degraded.message and "attempts=2" in degraded.message
    assert EventReason.CREATE_FAILED not in reasons(actions), "reported when it appeared"


def test_a_refused_execution_is_reported_before_it_is_created_again() -> None:
    observation = running_job(spec_of(), phase=Phase.STARTING)
    execution = observation.status.execution
    assert execution is not None
    failure = StartFailureStatus(
        execution_id=execution.id,
        object="ServiceAccount/wordcount-driver",
        attempts=1,
        message="status=403 Forbidden: exceeded quota",
        time=ago(3600),
    )
    status = observation.status.model_copy(update={"start_failure": failure})

    actions = decide(replace(observation, status=status, pods=()))

    assert creates(actions) == [], "its Events would be lost if the create failed again"
    assert EventReason.CREATE_FAILED in reasons(actions)
    assert condition(status_after(status, actions), ConditionType.DEGRADED).reason == (
        "CreateFailed"
    )


def test_refused_creates_fail_the_job_after_the_bound() -> None:
    observation = _refused(spec_of(), attempts=SETTINGS.start_attempts, seconds_ago=3600)

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert creates(actions) == []
    assert after.phase is Phase.FAILED
    assert after.last_failure is not None and after.last_failure.reason == "CreateFailed"
    assert "exceeded quota" in after.last_failure.message
    assert EventReason.RESTART_LIMIT_REACHED in reasons(actions)


def test_a_refused_execution_suspends_or_starts_anew_on_a_spec_change() -> None:
    refused = _refused(spec_of(), attempts=1, seconds_ago=1)
    execution = refused.status.execution
    assert execution is not None

    suspend = decide(replace(refused, spec=spec_of({"suspend": True})))
    changed = decide(replace(refused, spec=spec_of({"snapshotIntervalSeconds": 99})))

    suspended = status_after(refused.status, suspend)
    assert suspended.phase is Phase.SUSPENDED and suspended.start_failure is None
    assert creates(suspend) == []
    [create] = creates(changed)
    assert create.execution_id != execution.id and create.attempt == execution.attempt + 1
    assert status_after(refused.status, changed).start_failure is None


def test_an_older_executions_start_failure_is_not_the_current_ones() -> None:
    observation = running_job(spec_of(), phase=Phase.STARTING)
    failure = StartFailureStatus(
        execution_id="older",
        object="Pod/wordcount-driver-1",
        attempts=1,
        message="status=403 Forbidden: exceeded quota",
        time=ago(1),
    )
    status = observation.status.model_copy(update={"start_failure": failure})

    actions = decide(replace(observation, status=status, pods=()))

    assert EventReason.DRIVER_POD_MISSING in reasons(actions)
    assert status_after(status, actions).start_failure is None


# The driver's termination message reaches the Event and lastFailure of the exits that name a
# failure of their own.

DRIVER_LINE = "Snapshot 0 in map '__sj.snapshot.uid.0' is corrupted: chunk '0/counts/3/0' missing"


@pytest.mark.parametrize(
    ("code", "event"),
    [
        (DriverExit.SNAPSHOT_CORRUPTED, EventReason.SNAPSHOT_CORRUPTED),
        (DriverExit.SNAPSHOT_NOT_FOUND, EventReason.SNAPSHOT_NOT_FOUND),
        (DriverExit.TRANSIENT_FAILURE, EventReason.EXECUTION_FAILED),
        (DriverExit.SNAPSHOT_INCOMPATIBLE, EventReason.SNAPSHOT_INCOMPATIBLE),
    ],
)
def test_the_drivers_message_is_in_the_event_and_last_failure(
    code: DriverExit, event: EventReason
) -> None:
    observation = running_job(
        spec_of(), pod_phase=PodPhase.FAILED, exit_code=code, record=a_snapshot()
    )
    [pod] = observation.pods
    told = replace(observation, pods=(replace(pod, termination_message=DRIVER_LINE),))

    actions = decide(told)
    silent = decide(observation)

    after = status_after(told.status, actions)
    assert after.last_failure is not None
    assert f'driverMessage="{DRIVER_LINE}"' in after.last_failure.message
    [emitted] = [e for e in of_type(actions, EmitEvent) if e.reason is event]
    assert f'driverMessage="{DRIVER_LINE}"' in emitted.message
    assert f"exitCode={int(code)}" in emitted.message or "snapshot" in emitted.message
    quiet = status_after(observation.status, silent).last_failure
    assert quiet is not None and "driverMessage" not in quiet.message


# Forced restarts (75, 79, 143) restart at once, but are counted until a new snapshot: Degraded
# from the 3rd in a row, and failures through the restart policy beyond the 10th.


def _forced_exit(code: DriverExit, before: int, **kwargs: Any) -> Observation:
    """The current driver ended in a forced restart; ``before`` such ends preceded it."""
    observation = running_job(
        spec_of(), pod_phase=PodPhase.FAILED, exit_code=code, record=a_snapshot(), **kwargs
    )
    if before == 0:
        return observation
    forced = ForcedRestartsStatus(count=before, snapshot_id=observation.status.record().snapshot_id)
    status = observation.status.model_copy(update={"forced_restarts": forced})
    return replace(observation, status=status)


FORCED_EXITS = [DriverExit.RESTART_FORCEFUL, DriverExit.INTERRUPTED, DriverExit.QUORUM_LOST]


@pytest.mark.parametrize("code", FORCED_EXITS)
def test_forced_restarts_are_counted_and_degrade_the_job_from_the_third(code: DriverExit) -> None:
    second = _forced_exit(code, 1)
    third = _forced_exit(code, 2)

    quiet = decide(second)
    loud = decide(third)

    assert status_after(second.status, quiet).forced_restarts == ForcedRestartsStatus(
        count=2, snapshot_id=0
    )
    assert condition(status_after(second.status, quiet), ConditionType.DEGRADED).status is (
        ConditionStatus.FALSE
    )
    after = status_after(third.status, loud)
    assert after.forced_restarts is not None and after.forced_restarts.count == 3
    degraded = condition(after, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (ConditionStatus.TRUE, "RepeatedForcedRestarts")
    assert "forcedRestarts=3" in degraded.message
    assert EventReason.REPEATED_FORCED_RESTARTS in reasons(loud)
    assert len(creates(loud)) == 1, "still restarted at once"
    assert after.restarts == 0 and after.last_failure is None


@pytest.mark.parametrize("code", FORCED_EXITS)
def test_beyond_the_limit_a_forced_restart_is_a_failure(code: DriverExit) -> None:
    limit = SETTINGS.forced_restart_limit
    last_at_once = decide(_forced_exit(code, limit - 1))
    beyond = _forced_exit(code, limit, restarts=2)

    actions = decide(beyond)

    assert len(creates(last_at_once)) == 1, "the limit itself still restarts at once"
    after = status_after(beyond.status, actions)
    assert creates(actions) == []
    assert after.phase is Phase.RESTARTING and after.restarts == 3, "the restart policy"
    assert after.last_failure is not None
    assert after.last_failure.reason == "RepeatedForcedRestarts"
    assert f"forcedRestarts={limit + 1}" in after.last_failure.message
    assert EventReason.EXECUTION_FAILED in reasons(actions)
    assert condition(after, ConditionType.DEGRADED).reason == "RepeatedForcedRestarts"
    policy_ends = _forced_exit(code, limit, restarts=spec_of().restart_policy.max_restarts)
    ended = status_after(policy_ends.status, decide(policy_ends))
    assert ended.phase is Phase.FAILED, "maxRestarts ends it"


def test_a_new_snapshot_or_completion_resets_the_forced_restarts() -> None:
    counted = _forced_exit(DriverExit.INTERRUPTED, 5)
    forced = counted.status.forced_restarts
    assert forced is not None
    moved = counted.status.model_copy(
        update={"forced_restarts": forced.model_copy(update={"snapshot_id": -1})}
    )

    again = status_after(moved, decide(replace(counted, status=moved)))
    [pod] = counted.pods
    completed = replace(counted, pods=(replace(pod, phase=PodPhase.SUCCEEDED, exit_code=0),))
    done = status_after(counted.status, decide(completed))
    running = running_job(spec_of(), record=a_snapshot())
    long_run = replace(
        running,
        status=running.status.model_copy(update={"forced_restarts": forced}),
        now=NOW + timedelta(hours=1),
    )
    ran = status_after(long_run.status, decide(long_run))

    assert again.forced_restarts == ForcedRestartsStatus(count=1, snapshot_id=0)
    assert done.phase is Phase.COMPLETED and done.forced_restarts is None
    assert ran.forced_restarts is None


# The restore failures that end (66, 78) and the transient one that the restart policy bounds.


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


def test_a_rejected_export_does_not_hold_back_the_retry_of_a_refused_start() -> None:
    spec = spec_of({"exportSnapshot": {"name": "night"}, "initialSnapshotName": "night"})
    refused = _refused(spec, attempts=1, seconds_ago=3600)

    actions = decide(refused)

    assert len(creates(actions)) == 1, "Degraded reported CreateFailed, so it is created again"


# A driver that lost the store's quorum (79) restarts from the last snapshot, but only once the
# store the operator sees has a quorum again; meanwhile Degraded says why.


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
