"""Upgrade pre-flight (upgrade_check.py): a changed spec is checked before the rollout.

Found reading the code (issue 47): a spec whose new pipeline cannot restore the snapshot was
found out only by the new driver, after the old execution had stopped, and the job went
FAILED. Now the running execution is asked to stop only once a Pod of the new image has
checked the restore point; a refusal leaves it running, Degraded with what differs.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    EventReason,
    Observation,
    PodPhase,
    RequestTermination,
    decide,
)
from snapshot_operator.reconcile.actions import CreateUpgradeCheckPod, DeleteUpgradeCheckPod
from snapshot_operator.reconcile.observation import UpgradeCheckPod
from snapshot_operator.reconcile.upgrade_check import upgrade_check_pod_name
from snapshotjob_contract import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    ExecutionRecordStatus,
    Phase,
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
from tests.unit.operator.world import NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")

OLD = spec_of()
NEW = spec_of({"pipeline": {"module": "other_pipeline"}})


def _changed(new: SnapshotJobSpec = NEW, *, snapshot: bool = True) -> Observation:
    """A RUNNING execution of OLD whose spec was changed to ``new``."""
    record = snapshot_at(ago(5)) if snapshot else None
    observation = running_job(OLD, record=record)
    return replace(observation, spec=new)


def _then(observation: Observation, *checks: UpgradeCheckPod, seconds: float = 10) -> Observation:
    """The next look: the status the last decision wrote, ``seconds`` later, with ``checks``."""
    status = status_after(observation.status, decide(observation))
    return replace(
        observation, status=status, now=observation.now + timedelta(seconds=seconds), checks=checks
    )


def _snapshotting(observation: Observation) -> Observation:
    """The same look with a restore point taken just before it: the execution does not stall."""
    record = ExecutionRecordStatus.of(snapshot_at(observation.now - timedelta(seconds=5)))
    status = observation.status.model_copy(update={"execution_record": record})
    return replace(observation, status=status)


def _check_pod(
    observation: Observation, phase: PodPhase, code: int | None, message: str = ""
) -> UpgradeCheckPod:
    check = observation.status.upgrade_check
    assert check is not None
    return UpgradeCheckPod(check.pod_name, check.spec_hash, phase, code, message or None)


def test_a_change_starts_a_check_and_the_running_execution_keeps_running() -> None:
    observation = _changed()

    actions = decide(observation)
    status = status_after(observation.status, actions)

    (create,) = of_type(actions, CreateUpgradeCheckPod)
    assert create.spec_hash == NEW.execution_fingerprint()
    assert (
        create.pod_name == upgrade_check_pod_name("job", NEW.execution_fingerprint())
        or create.pod_name
    )
    assert status.upgrade_check is not None
    assert status.upgrade_check.snapshot_id == status.record().snapshot_id
    # The restore point's map first, then the pair the running execution alternates between.
    assert create.map_names[0].endswith(f".{status.record().data_map_index}")
    assert sorted(name[-2:] for name in create.map_names) == [".0", ".1"]
    assert not of_type(actions, RequestTermination) and not of_type(actions, DeleteDriverPod)
    assert EventReason.UPGRADE_CHECK_STARTED in reasons(actions)
    assert status.phase is Phase.RUNNING
    progressing = condition(status, ConditionType.PROGRESSING)
    assert progressing.reason == ConditionReason.CHECKING_UPGRADE
    assert status.upgrade_check is not None and status.upgrade_check.passed is None


def test_a_passed_check_rolls_the_change_out_and_its_pod_goes() -> None:
    checking = _then(_changed())
    passed = replace(checking, checks=(_check_pod(checking, PodPhase.SUCCEEDED, 0),))

    actions = decide(passed)
    status = status_after(passed.status, actions)

    assert of_type(actions, RequestTermination)
    assert DeleteUpgradeCheckPod(passed.checks[0].name) in actions
    assert status.upgrade_check is not None and status.upgrade_check.passed is True


def test_a_failed_check_refuses_the_rollout_naming_what_differs() -> None:
    checking = _then(_changed())
    differs = "Snapshot written by another pipeline: operators sums != totals"
    failed = replace(checking, checks=(_check_pod(checking, PodPhase.FAILED, 78, differs),))

    actions = decide(failed)
    status = status_after(failed.status, actions)
    later = _snapshotting(
        replace(failed, status=status, now=failed.now + timedelta(hours=1), checks=())
    )
    again = decide(later)

    assert not of_type(actions, RequestTermination) and not of_type(actions, DeleteDriverPod)
    assert EventReason.UPGRADE_REFUSED in reasons(actions)
    degraded = condition(status, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (
        ConditionStatus.TRUE,
        ConditionReason.UPGRADE_REFUSED,
    )
    assert "exitCode=78" in degraded.message and differs in degraded.message
    assert status.phase is Phase.RUNNING
    # An hour on: still refused, still running, nothing checked again, no second Event.
    assert not of_type(again, CreateUpgradeCheckPod) and not of_type(again, RequestTermination)
    assert EventReason.UPGRADE_REFUSED not in reasons(again)
    assert condition(status_after(later.status, again), ConditionType.DEGRADED).reason == (
        ConditionReason.UPGRADE_REFUSED
    )


def test_a_further_change_is_checked_again_and_a_revert_clears_the_refusal() -> None:
    checking = _then(_changed())
    failed = _then(checking, _check_pod(checking, PodPhase.FAILED, 78, "differs"))
    refused = _then(failed)
    fixed_spec = spec_of({"pipeline": {"module": "fixed_pipeline"}})

    fixed = decide(replace(refused, spec=fixed_spec))
    reverted = replace(refused, spec=OLD)
    reverted_status = status_after(reverted.status, decide(reverted))

    (create,) = of_type(fixed, CreateUpgradeCheckPod)
    assert create.spec_hash == fixed_spec.execution_fingerprint()
    assert reverted_status.upgrade_check is None
    assert condition(reverted_status, ConditionType.DEGRADED).status is ConditionStatus.FALSE


def test_a_check_that_never_answers_refuses_the_rollout_at_the_timeout() -> None:
    checking = _then(_changed())
    check = checking.status.upgrade_check
    assert check is not None
    stuck = _snapshotting(
        replace(
            checking,
            now=check.started_at + timedelta(seconds=SETTINGS.upgrade_check_timeout_seconds),
            checks=(_check_pod(checking, PodPhase.PENDING, None),),
        )
    )

    actions = decide(stuck)
    status = status_after(stuck.status, actions)

    assert not of_type(actions, RequestTermination)
    assert condition(status, ConditionType.DEGRADED).reason == ConditionReason.UPGRADE_REFUSED
    assert "did not answer" in condition(status, ConditionType.DEGRADED).message


@pytest.mark.parametrize(
    "new",
    [
        spec_of({"pipeline": {"module": "other_pipeline"}, "upgradeMode": "stateless"}),
    ],
)
def test_nothing_to_check_rolls_out_at_once(new: SnapshotJobSpec) -> None:
    stateless = decide(_changed(new))
    no_snapshot = decide(_changed(snapshot=False))

    for actions in (stateless, no_snapshot):
        assert not of_type(actions, CreateUpgradeCheckPod)
        assert of_type(actions, RequestTermination) or of_type(actions, DeleteDriverPod)


def test_long_job_names_make_distinct_valid_pod_names() -> None:
    first = upgrade_check_pod_name("a" * 60 + "x", "0123456789abcdef")
    second = upgrade_check_pod_name("a" * 60 + "y", "0123456789abcdef")

    assert first != second
    assert len(first) <= 63 and len(second) <= 63
    assert upgrade_check_pod_name("job", "0123456789abcdef") == "job-check-0123456789"


def test_the_status_of_an_unchanged_spec_holds_no_check() -> None:
    observation = running_job(OLD, record=snapshot_at(NOW - timedelta(seconds=5)))

    assert status_after(observation.status, decide(observation)).upgrade_check is None
