"""The conditions a decision reports (conditions.py), and a settled job's status standing still.

kstatus reads a FAILED job as Stalled and a restart as Reconciling; SnapshotHealthy reports the
recovery point (recent, stale, failed, none yet). No message holds anything that changes with
the clock alone, so a later reconcile with the same snapshot patches nothing, and a stale
restore point is reported once. That every decision reports every condition, with a reason
from the enum, is in ``test_decide_safety.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from snapshot_operator.reconcile import PatchStatus, PodPhase, decide
from snapshotjob_contract import ConditionStatus, ConditionType, Phase
from tests.unit.operator.decide_helpers import (
    a_snapshot,
    condition,
    of_type,
    running_job,
    snapshot_at,
    spec_of,
)
from tests.unit.operator.world import NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")


def test_kstatus_reads_a_failed_job_as_stalled_and_a_restart_as_reconciling() -> None:
    spec = spec_of()
    corrupted = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=65, record=a_snapshot())
    failed = status_after(corrupted.status, decide(corrupted))
    stalled = condition(failed, ConditionType.STALLED)
    assert stalled.status is ConditionStatus.TRUE
    assert failed.last_failure is not None
    assert (stalled.reason, stalled.message) == (
        failed.last_failure.reason,
        failed.last_failure.message,
    )
    assert condition(failed, ConditionType.RECONCILING).status is ConditionStatus.FALSE

    crashed = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1)
    restarting = status_after(crashed.status, decide(crashed))
    assert restarting.phase is Phase.RESTARTING
    assert condition(restarting, ConditionType.STALLED).status is ConditionStatus.FALSE
    reconciling = condition(restarting, ConditionType.RECONCILING)
    progressing = condition(restarting, ConditionType.PROGRESSING)
    assert reconciling.status is ConditionStatus.TRUE
    assert (reconciling.reason, reconciling.message) == (progressing.reason, progressing.message)


@pytest.mark.parametrize(
    ("age", "failure", "status", "reason"),
    [
        (5, None, ConditionStatus.TRUE, "SnapshotRecent"),
        (10 * 3 + 61, None, ConditionStatus.FALSE, "SnapshotStale"),
        (5, "Chunk write indeterminate", ConditionStatus.FALSE, "SnapshotFailed"),
    ],
)
def test_snapshot_health_reports_the_recovery_point(
    age: int, failure: str | None, status: ConditionStatus, reason: str
) -> None:
    observation = running_job(spec_of(), record=snapshot_at(ago(age), failure))

    after = status_after(observation.status, decide(observation))

    healthy = condition(after, ConditionType.SNAPSHOT_HEALTHY)
    assert (healthy.status, healthy.reason) == (status, reason)
    # The record keeps figures of the last attempt only: after a failed one, the restore
    # point's time is what the operator saw before, here nothing.
    expected = ago(age) if failure is None else None
    assert after.last_snapshot_time == expected


def test_a_job_without_a_snapshot_has_unknown_snapshot_health() -> None:
    observation = running_job(spec_of())

    after = status_after(observation.status, decide(observation))

    assert condition(after, ConditionType.SNAPSHOT_HEALTHY).status is ConditionStatus.UNKNOWN
    assert after.last_snapshot_time is None


@pytest.mark.parametrize("later", [1, 7, 25])
def test_a_later_reconcile_with_the_same_snapshot_patches_nothing(later: int) -> None:
    observation = running_job(spec_of(), record=snapshot_at(ago(2)))
    settled = status_after(observation.status, decide(observation))
    healthy = condition(settled, ConditionType.SNAPSHOT_HEALTHY)
    assert healthy.reason == "SnapshotRecent"
    assert "takenAt=2026-11-21T11:59:58Z" in healthy.message
    assert "snapshotId=0" in healthy.message

    actions = decide(replace(observation, status=settled, now=NOW + timedelta(seconds=later)))

    assert of_type(actions, PatchStatus) == []


def test_a_stale_restore_point_is_reported_once_then_patches_nothing() -> None:
    spec = spec_of()
    observation = running_job(spec, record=snapshot_at(ago(2)))
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
