"""Decisions on how things ended: interrupted and fenced drivers, failed export copies, and
statePartitions changes; plus the status staying still between snapshots.

The observations are built with the helpers of ``test_decide.py`` (a job whose attempt-2
execution runs in one Pod, a suspended job with a restore point); the general safety
properties over arbitrary observations, which now include the exit codes 77 and 143, stay in
``test_decide.py`` and ``test_decide_machine.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_operator.reconcile import (
    LIVE_PHASES,
    CopySnapshotToExport,
    DeleteDriverPod,
    DriverPod,
    EventReason,
    Observation,
    PatchStatus,
    PodPhase,
    RequestTermination,
    Requeue,
    StoreHealth,
    decide,
    driver_pod_name,
    execution_id,
)
from snapshotjob_contract import (
    ConditionStatus,
    ConditionType,
    DriverExit,
    ExecutionRecord,
    ExecutionStatus,
    ExportedSnapshot,
    ExportFailureStatus,
    FailureStatus,
    Phase,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
    TerminationMode,
    UpgradeMode,
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
    spec_of,
    suspended_job,
)
from tests.unit.operator.world import JOB, NOW, ago, specs, status_after

pytestmark = pytest.mark.filterwarnings("error")

UNSAFE = StoreHealth(cluster_safe=False, member_count=3)


# INTERRUPTED (143): restart at once from the last snapshot, not a failure.


@many
@given(
    specs(),
    st.sampled_from([None, *TerminationMode]),
    st.sampled_from(sorted(LIVE_PHASES)),
    st.integers(0, 6),
)
def test_an_interrupted_driver_restarts_at_once_without_counting_a_failure(
    spec: SnapshotJobSpec, mode: TerminationMode | None, phase: Phase, restarts: int
) -> None:
    pending = graceful(mode) if mode is not None else None
    observation = running_job(
        spec,
        phase=phase,
        pod_phase=PodPhase.FAILED,
        exit_code=DriverExit.INTERRUPTED,
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
    assert EventReason.DRIVER_INTERRUPTED in reasons(actions)
    assert EventReason.EXECUTION_FAILED not in reasons(actions)
    [create] = creates(actions)
    assert create.initial_snapshot_name is None, "restores the job's own last snapshot"
    assert after.record().snapshot_id == observation.status.record().snapshot_id


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


# FENCED (77): a newer execution owns the job; nothing restarts on its account.


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


# A failed copy to an export while suspended: bounded retries with backoff, then given up.


def _copying(name: str = "nightly") -> tuple[Observation, SnapshotJobStatus]:
    spec = spec_of({"suspend": True, "exportSnapshot": {"name": name}})
    observation = suspended_job(spec, a_snapshot())
    copying = status_after(observation.status, decide(observation))
    assert copying.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    return observation, copying


def _failed_copy(
    status: SnapshotJobStatus, attempts: int, name: str = "nightly"
) -> SnapshotJobStatus:
    failure = ExportFailureStatus(
        name=name, attempts=attempts, message="SnapshotStoreError: put indeterminate", time=NOW
    )
    return status.model_copy(update={"export_failure": failure})


def test_a_failed_copy_waits_for_its_backoff_then_copies_again() -> None:
    observation, copying = _copying()
    failed = _failed_copy(copying, 1)

    early = decide(replace(observation, status=failed, now=NOW + timedelta(seconds=4)))

    assert of_type(early, CopySnapshotToExport) == []
    assert early[-1] == Requeue(SETTINGS.export_retry_seconds - 4)
    after = status_after(failed, early)
    assert after.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    degraded = condition(after, ConditionType.DEGRADED)
    assert degraded.status is ConditionStatus.TRUE
    assert degraded.reason == "ExportFailed"
    assert "name=nightly" in degraded.message
    assert "put indeterminate" in degraded.message

    due = decide(
        replace(
            observation, status=failed, now=NOW + timedelta(seconds=SETTINGS.export_retry_seconds)
        )
    )

    assert len(of_type(due, CopySnapshotToExport)) == 1
    assert EventReason.EXPORT_FAILED in reasons(due)


def test_the_backoff_doubles_per_failed_copy() -> None:
    observation, copying = _copying()
    failed = _failed_copy(copying, 2)
    wait = SETTINGS.export_retry_seconds * 2

    early = decide(replace(observation, status=failed, now=NOW + timedelta(seconds=wait - 1)))
    due = decide(replace(observation, status=failed, now=NOW + timedelta(seconds=wait)))

    assert of_type(early, CopySnapshotToExport) == []
    assert len(of_type(due, CopySnapshotToExport)) == 1


def test_a_copy_that_keeps_failing_is_given_up_until_a_new_name() -> None:
    observation, copying = _copying()
    failed = _failed_copy(copying, SETTINGS.export_copy_attempts)
    later = NOW + timedelta(hours=1)

    actions = decide(replace(observation, status=failed, now=later))

    given_up = status_after(failed, actions)
    assert given_up.phase is Phase.SUSPENDED
    assert of_type(actions, CopySnapshotToExport) == []
    assert EventReason.EXPORT_FAILED in reasons(actions)
    degraded = condition(given_up, ConditionType.DEGRADED)
    assert degraded.reason == "ExportFailed"
    assert "gave up" in degraded.message and "name=nightly" in degraded.message

    again = decide(replace(observation, status=given_up, now=later + timedelta(hours=1)))

    assert of_type(again, CopySnapshotToExport) == [], "no retry of a given-up export"
    assert reasons(again) == set()
    assert status_after(given_up, again).phase is Phase.SUSPENDED

    renamed = spec_of({"suspend": True, "exportSnapshot": {"name": "weekly"}})
    actions = decide(replace(observation, spec=renamed, generation=2, status=given_up, now=later))

    [copy] = of_type(actions, CopySnapshotToExport)
    assert copy.export_name == "weekly"
    after = status_after(given_up, actions)
    assert after.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    assert after.export_failure is None
    assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.FALSE


def test_a_successful_copy_after_failures_clears_the_failure() -> None:
    observation, copying = _copying()
    failed = _failed_copy(copying, 1)
    done = failed.model_copy(
        update={
            "exported_snapshots": [
                ExportedSnapshot(
                    name="nightly", snapshot_id=0, num_bytes=10, created_at=NOW, terminal=False
                )
            ]
        }
    )

    actions = decide(replace(observation, status=done))

    after = status_after(done, actions)
    assert after.phase is Phase.SUSPENDED
    assert after.export_failure is None
    assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    assert EventReason.SNAPSHOT_EXPORTED in reasons(actions)


# SnapshotHealthy: a message that changes only with a new snapshot.


def _snapshot_taken_at(seconds_ago: int) -> ExecutionRecord:
    millis = int(ago(seconds_ago).timestamp() * 1000)
    record = ExecutionRecord().start_new_snapshot(now=millis - 100)
    return record.snapshot_done(
        SnapshotKind.AUTOMATIC,
        export_name=None,
        num_bytes=10,
        num_keys=1,
        num_chunks=1,
        failure=None,
        now=millis,
        backup_count=1,
    )


@pytest.mark.parametrize("later", [1, 7, 25])
def test_a_later_reconcile_with_the_same_snapshot_patches_nothing(later: int) -> None:
    observation = running_job(spec_of(), record=_snapshot_taken_at(2))
    settled = status_after(observation.status, decide(observation))
    healthy = condition(settled, ConditionType.SNAPSHOT_HEALTHY)
    assert healthy.reason == "SnapshotRecent"
    assert "takenAt=2026-11-21T11:59:58Z" in healthy.message
    assert "snapshotId=0" in healthy.message

    actions = decide(replace(observation, status=settled, now=NOW + timedelta(seconds=later)))

    assert of_type(actions, PatchStatus) == []


def test_a_stale_restore_point_is_reported_once_then_patches_nothing() -> None:
    spec = spec_of()
    observation = running_job(spec, record=_snapshot_taken_at(2))
    settled = status_after(observation.status, decide(observation))
    bound = spec.snapshot_interval_seconds * 3 + 60

    stale_at = NOW + timedelta(seconds=bound)
    actions = decide(replace(observation, status=settled, now=stale_at))
    stale = status_after(settled, actions)
    healthy = condition(stale, ConditionType.SNAPSHOT_HEALTHY)
    assert (healthy.status, healthy.reason) == (ConditionStatus.FALSE, "SnapshotStale")
    assert "takenAt=" in healthy.message and "ageSeconds" not in healthy.message

    later = decide(replace(observation, status=stale, now=stale_at + timedelta(seconds=30)))

    assert of_type(later, PatchStatus) == []


# spec.statePartitions: the runtime re-partitions keyed state on restore, so a change rolls out
# as any other spec change, from the job's snapshot.


def _with_partitions(observation: Observation, partitions: int) -> Observation:
    status = observation.status
    assert status.execution is not None
    execution = status.execution.model_copy(update={"state_partitions": partitions})
    return replace(observation, status=status.model_copy(update={"execution": execution}))


@pytest.mark.parametrize(
    ("mode", "stop"),
    [
        (UpgradeMode.SNAPSHOT, TerminationMode.RESTART_GRACEFUL),
        (UpgradeMode.LAST_SNAPSHOT, TerminationMode.RESTART_FORCEFUL),
    ],
)
def test_changing_state_partitions_of_a_job_with_a_snapshot_rolls_out_per_upgrade_mode(
    mode: UpgradeMode, stop: TerminationMode
) -> None:
    spec = spec_of({"statePartitions": 16, "upgradeMode": mode.value})
    observation = _with_partitions(running_job(spec, record=a_snapshot(), spec_hash="old"), 8)

    actions = decide(observation)

    after = status_after(observation.status, actions)
    assert EventReason.INVALID_SPEC not in reasons(actions)
    assert EventReason.UPGRADING in reasons(actions)
    if stop.terminal_snapshot:
        assert [r.mode for r in of_type(actions, RequestTermination)] == [stop]
    else:
        assert of_type(actions, DeleteDriverPod), "RESTART_FORCEFUL deletes the driver"
    degraded = condition(after, ConditionType.DEGRADED)
    assert degraded.status is ConditionStatus.FALSE


def test_a_suspended_job_with_changed_state_partitions_resumes_from_its_snapshot() -> None:
    spec = spec_of({"statePartitions": 4})
    suspended = suspended_job(spec, a_snapshot())
    execution = ExecutionStatus(
        id=execution_id(JOB.uid, 1, NOW),
        driver_pod=driver_pod_name(JOB.name, 1),
        started_at=ago(600),
        attempt=1,
        spec_hash="old",
        state_partitions=8,
    )
    observation = replace(
        suspended,
        generation=2,
        status=suspended.status.model_copy(update={"execution": execution}),
    )

    actions = decide(observation)

    assert len(creates(actions)) == 1
    after = status_after(observation.status, actions)
    assert after.execution is not None and after.execution.state_partitions == 4
    assert after.record().snapshot_id == a_snapshot().snapshot_id, "restored, not dropped"
    assert EventReason.INVALID_SPEC not in reasons(actions)


def test_state_partitions_change_with_a_stateless_upgrade() -> None:
    spec = spec_of({"statePartitions": 16, "upgradeMode": "stateless"})
    observation = _with_partitions(running_job(spec, record=a_snapshot(), spec_hash="old"), 8)

    stopping = decide(observation)

    assert of_type(stopping, DeleteDriverPod), "RESTART_FORCEFUL"
    restarting = status_after(observation.status, stopping)
    started = decide(replace(observation, status=restarting, pods=()))
    assert len(creates(started)) == 1
    after = status_after(restarting, started)
    assert after.execution is not None and after.execution.state_partitions == 16
    assert after.record().snapshot_id == -1, "started without the job's state"
    assert EventReason.UPGRADING in reasons(started)


def test_state_partitions_change_freely_before_the_first_snapshot() -> None:
    spec = spec_of({"statePartitions": 16})
    observation = _with_partitions(running_job(spec, spec_hash="old"), 8)

    actions = decide(observation)

    assert EventReason.INVALID_SPEC not in reasons(actions)
    assert EventReason.UPGRADING in reasons(actions), "a spec change like any other"


def test_an_execution_records_its_state_partitions() -> None:
    spec = spec_of({"statePartitions": 32})
    observation = Observation(JOB, 1, spec, SnapshotJobStatus(), NOW, (), HEALTHY)

    after = status_after(observation.status, decide(observation))

    assert after.execution is not None and after.execution.state_partitions == 32


def test_state_partitions_are_part_of_the_execution_fingerprint() -> None:
    assert (
        spec_of({"statePartitions": 8}).execution_fingerprint()
        != spec_of({"statePartitions": 9}).execution_fingerprint()
    )
    assert spec_of().state_partitions == 8


def test_turning_incremental_snapshots_on_rolls_out_and_off_keeps_the_old_fingerprint() -> None:
    base = {"image": "runtime:1", "snapshotIntervalSeconds": 5}
    # The driver reads the setting at its start: a change needs a new execution.
    assert (
        spec_of({**base, "incrementalSnapshots": True}).execution_fingerprint()
        != spec_of(base).execution_fingerprint()
    )
    # Off (the default) adds nothing, so jobs from before the field are not rolled out.
    assert spec_of({**base, "incrementalSnapshots": False}).execution_fingerprint() == (
        "3d63637ae72394c8"
    )


def test_chain_bounds_roll_out_when_set_and_leave_the_fingerprint_when_not() -> None:
    base = {"image": "runtime:1", "snapshotIntervalSeconds": 5, "incrementalSnapshots": True}
    unset = spec_of(base).execution_fingerprint()
    # The driver reads the bounds at its start: a change needs a new execution.
    assert spec_of({**base, "snapshotChains": {"maxDeltas": 32}}).execution_fingerprint() != unset
    assert (
        spec_of({**base, "snapshotChains": {"maxDeltas": 32}}).execution_fingerprint()
        != spec_of(
            {**base, "snapshotChains": {"maxDeltas": 32, "maxDeltaPercent": 25}}
        ).execution_fingerprint()
    )


def test_the_default_state_partitions_keep_the_fingerprint_jobs_had_before_the_field() -> None:
    spec = spec_of({"image": "runtime:1", "snapshotIntervalSeconds": 5})

    # The operator compares this digest with the one stored in each running job's status: if
    # this literal has to change, the fingerprint changed for existing jobs, and an operator
    # upgrade rolls out (restarts per upgradeMode) every SnapshotJob. 3d63637ae72394c8 is what
    # the operator computed for this spec before statePartitions existed (the parent of
    # 957727d, which added the field).
    assert spec.execution_fingerprint() == "3d63637ae72394c8"
    assert (
        spec_of(
            {"image": "runtime:1", "snapshotIntervalSeconds": 5, "statePartitions": 8}
        ).execution_fingerprint()
        == "3d63637ae72394c8"
    )
