"""Restarts (exits.py, live.py): the restart policy, restarts at once, and what resets the counts.

A failed execution restarts after the policy's backoff, suspends (``suspendOnFailure``) or,
beyond ``maxRestarts``, fails; an execution that ran for the longest backoff resets
``restarts``. A driver that ends in a forced restart (75: an indeterminate record write; 143:
interrupted; 79: the quorum lost, whose wait for a quorum is in ``test_decide_exits.py``)
restarts at once from its last snapshot, as soon as the store allows a start: it drops a
pending request, counts no failure and waits for no backoff. Found by trying (issue 12): such
restarts are counted until a new snapshot shows progress, Degraded from the 3rd in a row and
failures through the restart policy beyond the limit.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_operator.reconcile import (
    LIVE_PHASES,
    EventReason,
    Observation,
    PodPhase,
    RequestTermination,
    Requeue,
    StoreHealth,
    decide,
)
from snapshotjob_contract import (
    ConditionStatus,
    ConditionType,
    DriverExit,
    FailureStatus,
    ForcedRestartsStatus,
    Phase,
    SnapshotJobSpec,
    TerminationMode,
)
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
)
from tests.unit.operator.world import NOW, ago, specs, status_after

pytestmark = pytest.mark.filterwarnings("error")


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
    # With a snapshot of its own: a run without one may be a stall (test_decide_stalls.py).
    observation = running_job(spec, restarts=4, record=snapshot_at(ago(5)))
    without = running_job(spec, restarts=4)

    after = status_after(observation.status, decide(observation))

    assert after.restarts == 0
    assert status_after(without.status, decide(without)).restarts == 4


@pytest.mark.parametrize(
    ("code", "event"),
    [
        (DriverExit.RESTART_FORCEFUL, EventReason.FORCED_RESTART),
        (DriverExit.INTERRUPTED, EventReason.DRIVER_INTERRUPTED),
    ],
)
@many
@given(
    specs(),
    st.sampled_from([None, *TerminationMode]),
    st.sampled_from(sorted(LIVE_PHASES)),
    st.integers(0, 6),
)
def test_a_restart_at_once_drops_a_pending_request_and_counts_no_failure(
    code: DriverExit,
    event: EventReason,
    spec: SnapshotJobSpec,
    mode: TerminationMode | None,
    phase: Phase,
    restarts: int,
) -> None:
    pending = graceful(mode) if mode is not None else None
    observation = running_job(
        spec,
        phase=phase,
        pod_phase=PodPhase.FAILED,
        exit_code=code,
        termination=pending,
        restarts=restarts,
        record=a_snapshot(),
    )

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert after.restarts == restarts, "not counted in restarts"
    assert after.last_failure is None, "not a failure"
    assert after.phase is Phase.STARTING, "at once, whatever the spec and the policy say"
    assert after.termination is None, "a pending request is dropped"
    assert of_type(actions, RequestTermination) == []
    assert event in reasons(actions)
    assert EventReason.EXECUTION_FAILED not in reasons(actions)
    [create] = creates(actions)
    assert create.initial_snapshot_name is None, "restores the job's own last snapshot"
    assert after.record().snapshot_id == observation.status.record().snapshot_id


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


UNSAFE = StoreHealth(cluster_safe=False, member_count=3)


@given(specs())
def test_an_interrupted_driver_waits_for_the_store_without_backoff(spec: SnapshotJobSpec) -> None:
    spec = spec.model_copy(update={"suspend": False, "suspend_on_failure": False})
    first = running_job(
        spec, pod_phase=PodPhase.FAILED, exit_code=DriverExit.INTERRUPTED, store=UNSAFE, restarts=4
    )
    # A failure just before: a backoff restart would wait backoff(4) after it.
    first = replace(
        first,
        status=first.status.model_copy(
            update={"last_failure": FailureStatus(reason="DriverFailed", message="m", time=ago(1))}
        ),
    )
    waiting = status_after(first.status, decide(first))
    assert waiting.phase is Phase.RESTARTING
    assert waiting.termination is not None
    assert waiting.termination.mode is TerminationMode.RESTART_FORCEFUL
    assert waiting.termination.reason == "DriverInterrupted"
    assert waiting.restarts == 4

    started = decide(replace(first, status=waiting, store=HEALTHY, now=NOW + timedelta(seconds=1)))

    assert len(creates(started)) == 1, "no backoff"
    assert status_after(waiting, started).restarts == 4


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
    running = running_job(spec_of(), record=snapshot_at(NOW + timedelta(hours=1, seconds=-5)))
    long_run = replace(
        running,
        status=running.status.model_copy(update={"forced_restarts": forced}),
        now=NOW + timedelta(hours=1),
    )
    ran = status_after(long_run.status, decide(long_run))

    assert again.forced_restarts == ForcedRestartsStatus(count=1, snapshot_id=0)
    assert done.phase is Phase.COMPLETED and done.forced_restarts is None
    assert ran.forced_restarts is None
