"""Between executions (between.py): resuming, exporting by copy, and waiting for the user.

No execution runs here. A suspended job (:func:`suspended_job`) resumes from its own last
snapshot and a new job from ``initialSnapshotName``; an export while suspended is the
operator's validated copy of the restore point, retried with a doubling backoff a few times and
then given up until the export's name changes; a FAILED or COMPLETED job, and one suspended on
failure, stays until its spec changes. Starting an execution and what gates it are in
``test_decide_starting.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from snapshot_operator.reconcile import (
    CopySnapshotToExport,
    EventReason,
    Observation,
    PodPhase,
    Requeue,
    decide,
    execution_id,
)
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionStatus,
    ConditionType,
    ExportedSnapshot,
    ExportFailureStatus,
    Phase,
    SnapshotJobStatus,
    SnapshotKind,
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
from tests.unit.operator.world import JOB, NOW, observations, status_after

pytestmark = pytest.mark.filterwarnings("error")


def test_resume_restores_the_last_good_snapshot() -> None:
    spec = spec_of({"initialSnapshotName": "seed"})

    actions = decide(suspended_job(spec, a_snapshot(SnapshotKind.TERMINAL)))

    [created] = creates(actions)
    assert created.initial_snapshot_name is None, "the job's own snapshot wins"
    assert created.execution_id == execution_id(JOB.uid, 3, NOW)


def test_a_first_start_uses_the_initial_snapshot() -> None:
    spec = spec_of({"initialSnapshotName": "seed"})
    observation = Observation(JOB, 1, spec, SnapshotJobStatus(), NOW, (), HEALTHY)

    [created] = creates(decide(observation))

    assert created.initial_snapshot_name == "seed"
    assert created.attempt == 1


def test_an_export_only_restore_point_is_never_in_the_record() -> None:
    export_only = a_snapshot(SnapshotKind.EXPORT_ONLY, "nightly")
    spec = spec_of()

    [created] = creates(decide(suspended_job(spec, export_only)))

    assert export_only.snapshot_id == NO_SNAPSHOT
    assert created.initial_snapshot_name is None


@pytest.mark.parametrize(
    ("kind", "name", "source"),
    [
        (SnapshotKind.TERMINAL, None, f"__sj.b1.snapshot.{JOB.uid}.0"),
        (SnapshotKind.TERMINAL_EXPORTED, "final", "__sj.export.default.final"),
    ],
)
def test_an_export_while_suspended_copies_the_restore_point(
    kind: SnapshotKind, name: str | None, source: str
) -> None:
    spec = spec_of({"suspend": True, "exportSnapshot": {"name": "nightly"}})
    observation = suspended_job(spec, a_snapshot(kind, name))

    actions = decide(observation)

    assert of_type(actions, CopySnapshotToExport) == [
        CopySnapshotToExport(source, 0, "nightly", "__sj.export.default.nightly")
    ]
    copying = status_after(observation.status, actions)
    assert copying.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    exported = {"name": "nightly", "snapshotId": 0, "numBytes": 10, "terminal": False}
    done = SnapshotJobStatus.model_validate(
        {
            **copying.model_dump(mode="json"),
            "exportedSnapshots": [{**exported, "createdAt": NOW.isoformat()}],
        }
    )

    finished = decide(replace(observation, status=done))

    assert status_after(done, finished).phase is Phase.SUSPENDED
    assert EventReason.SNAPSHOT_EXPORTED in reasons(finished)


def test_cancel_with_export_while_suspended_copies_then_cancels() -> None:
    spec = spec_of({"suspend": True, "exportSnapshot": {"name": "final", "cancelJob": True}})
    observation = suspended_job(spec, a_snapshot(SnapshotKind.TERMINAL))
    copying = status_after(observation.status, decide(observation))
    assert copying.phase is Phase.SUSPENDED_EXPORTING_SNAPSHOT
    exported = copying.model_copy(
        update={
            "exported_snapshots": [
                ExportedSnapshot(
                    name="final", snapshot_id=0, num_bytes=10, created_at=NOW, terminal=False
                )
            ]
        }
    )

    actions = decide(replace(observation, status=exported))

    after = status_after(exported, actions)
    assert after.phase is Phase.FAILED
    assert after.last_failure is not None and after.last_failure.reason == "Cancelled"
    assert condition(after, ConditionType.DEGRADED).status is ConditionStatus.FALSE
    assert {EventReason.SNAPSHOT_EXPORTED, EventReason.CANCELLED} <= reasons(actions)


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


@given(observations(), st.sampled_from([Phase.FAILED, Phase.COMPLETED]))
def test_a_failed_or_completed_job_stays_until_its_spec_changes(
    observation: Observation, phase: Phase
) -> None:
    status = observation.status.model_copy(
        update={"phase": phase, "observed_generation": observation.generation}
    )
    stopped = tuple(pod for pod in observation.pods if not pod.may_run)
    unchanged = replace(observation, status=status, pods=stopped)

    actions = decide(unchanged)
    changed = decide(replace(unchanged, generation=observation.generation + 1))

    assert creates(actions) == []
    assert status_after(status, actions).phase is phase
    assert status_after(status, changed).phase is not phase


def test_suspend_on_failure_holds_the_job_until_its_spec_changes() -> None:
    spec = spec_of({"suspendOnFailure": True})
    observation = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1)
    held = status_after(observation.status, decide(observation))
    assert held.phase is Phase.SUSPENDED
    assert condition(held, ConditionType.DEGRADED).reason == "SuspendedOnFailure"

    later = replace(observation, status=held, pods=(), now=NOW + timedelta(hours=1))
    unchanged = decide(later)
    changed = decide(replace(later, generation=2, spec=spec_of({"image": "fixed"})))

    assert creates(unchanged) == []
    assert status_after(held, unchanged).phase is Phase.SUSPENDED
    assert len(creates(changed)) == 1
