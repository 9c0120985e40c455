"""Rolling out a spec change (live.py, starting.py): what counts as one, and each upgradeMode.

A running execution whose spec fingerprint (``SnapshotJobSpec.execution_fingerprint``) is not
the spec's is restarted: with a terminal snapshot (``SNAPSHOT``), from the last snapshot
(``LAST_SNAPSHOT``) or without the job's state (``STATELESS``). A ``statePartitions`` change
rolls out the same way, from the job's snapshot: the runtime re-partitions keyed state when it
restores. New fields must leave the fingerprints of existing jobs alone, or an operator upgrade
would roll out every job.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import assume, given

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    EventReason,
    Observation,
    RequestTermination,
    decide,
    driver_pod_name,
    execution_id,
)
from snapshotjob_contract import (
    NO_SNAPSHOT,
    ConditionStatus,
    ConditionType,
    ExecutionStatus,
    Phase,
    SnapshotJobSpec,
    TerminationMode,
    UpgradeMode,
)
from tests.unit.operator.decide_helpers import (
    a_snapshot,
    condition,
    creates,
    decide_running,
    of_type,
    reasons,
    running_job,
    spec_of,
    suspended_job,
    upgrade_check_passed,
)
from tests.unit.operator.world import JOB, NOW, OTHER_HASH, ago, specs, status_after

pytestmark = pytest.mark.filterwarnings("error")


@given(specs())
def test_an_upgrade_rolls_out_by_upgrade_mode(spec: SnapshotJobSpec) -> None:
    assume(not spec.suspend and spec.export_snapshot is None)

    observation, actions = decide_running(spec, spec_hash=OTHER_HASH)

    assert EventReason.UPGRADING in reasons(actions)
    after = status_after(observation.status, actions)
    if spec.upgrade_mode is UpgradeMode.SNAPSHOT:
        [request] = of_type(actions, RequestTermination)
        assert request.mode is TerminationMode.RESTART_GRACEFUL
    else:
        assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(driver_pod_name(JOB.name, 2))]
        assert after.phase is Phase.RESTARTING


def test_a_stateless_upgrade_starts_without_the_jobs_state() -> None:
    spec = spec_of({"upgradeMode": "stateless"})
    observation = running_job(spec, spec_hash=OTHER_HASH, record=a_snapshot())
    stopped = status_after(observation.status, decide(observation))
    later = replace(observation, status=stopped, pods=())

    actions = decide(later)

    [created] = creates(actions)
    record = status_after(stopped, actions).record()
    assert record.snapshot_id == NO_SNAPSHOT
    assert record.ongoing_snapshot_id == 0, "snapshot ids are never reused"
    assert created.initial_snapshot_name is None


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
    # The new spec's pipeline passed its upgrade check (test_decide_upgrade_check.py).
    observation = upgrade_check_passed(observation)

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
