"""Starting an execution (starting.py) and the gates in front of it (gates.py).

A new execution gets a new id (the fencing token), a driver Pod name that is a DNS label, and
records its ``statePartitions``; it starts only while the store can hold it (reachable,
cluster-safe, more members than backups, the quorum of split-brain protection, which a start
raises). An export that would overwrite the job's own restore point is rejected without
touching the execution. Found by trying (issue 12): a create the API server refuses
(``status.startFailure``) used to start a new execution on every reconcile; now the same
execution is created again after a backoff, reported first, and the job FAILED after a bound.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from snapshot_operator.reconcile import (
    EmitEvent,
    EventReason,
    Observation,
    PatchStatus,
    Requeue,
    StoreHealth,
    decide,
    driver_pod_name,
)
from snapshotjob_contract import (
    ConditionStatus,
    ConditionType,
    ExecutionRecord,
    Phase,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
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
    suspended_job,
)
from tests.unit.operator.world import JOB, NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")


def test_a_long_pod_name_is_cut_to_a_dns_label() -> None:
    name = driver_pod_name("a" * 70, 12)

    assert len(name) <= 63
    assert name.endswith("-driver-12")
    assert re.fullmatch(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?", name)
    assert name != driver_pod_name("a" * 69 + "b", 12)


def test_an_execution_records_its_state_partitions() -> None:
    spec = spec_of({"statePartitions": 32})
    observation = Observation(JOB, 1, spec, SnapshotJobStatus(), NOW, (), HEALTHY)

    after = status_after(observation.status, decide(observation))

    assert after.execution is not None and after.execution.state_partitions == 32


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


def test_an_export_over_the_restore_point_is_rejected_without_touching_the_execution() -> None:
    spec = spec_of({"exportSnapshot": {"name": "final", "cancelJob": True}})
    observation = running_job(spec, record=a_snapshot(SnapshotKind.TERMINAL_EXPORTED, "final"))

    actions = decide(observation)

    assert {type(a) for a in actions} <= {PatchStatus, EmitEvent, Requeue}
    assert EventReason.EXPORT_REJECTED in reasons(actions)
    degraded = status_after(observation.status, actions).condition(ConditionType.DEGRADED)
    assert degraded is not None and degraded.reason == "ExportRejected"


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


def test_a_rejected_export_does_not_hold_back_the_retry_of_a_refused_start() -> None:
    spec = spec_of({"exportSnapshot": {"name": "night"}, "initialSnapshotName": "night"})
    refused = _refused(spec, attempts=1, seconds_ago=3600)

    actions = decide(refused)

    assert len(creates(actions)) == 1, "Degraded reported CreateFailed, so it is created again"
