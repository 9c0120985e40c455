"""The live execution (live.py): spec changes turned into one request to the driver, and watched.

While an execution runs (:func:`running_job`), its first pending spec change becomes a request:
``suspend`` and an export that cancels the job a graceful termination (forceful when there is
nothing to snapshot), a new export name an export-only request. One request is pending at a
time; a graceful one not served within the deadline becomes forceful, an export-only one not
served is asked again, and Pods of older executions are deleted. Upgrades are in
``test_decide_rollouts.py``; how the execution then ends, in ``test_decide_exits.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    DriverPod,
    EventReason,
    PodPhase,
    RequestExport,
    RequestTermination,
    decide,
    driver_pod_name,
    execution_id,
)
from snapshotjob_contract import (
    ExportedSnapshot,
    ExportSnapshotSpec,
    Phase,
    ProcessingGuarantee,
    SnapshotJobSpec,
    TerminationMode,
)
from tests.unit.operator.decide_helpers import (
    SETTINGS,
    decide_running,
    graceful,
    of_type,
    reasons,
    running_job,
    spec_of,
)
from tests.unit.operator.world import JOB, NOW, OTHER_HASH, specs, status_after

pytestmark = pytest.mark.filterwarnings("error")


@given(specs())
def test_suspend_asks_for_a_terminal_snapshot(spec: SnapshotJobSpec) -> None:
    observation, actions = decide_running(spec.model_copy(update={"suspend": True}))

    after = status_after(observation.status, actions)
    if spec.processing_guarantee is ProcessingGuarantee.NONE:
        assert of_type(actions, DeleteDriverPod) and after.phase is Phase.SUSPENDED
    else:
        [request] = of_type(actions, RequestTermination)
        assert request.mode is TerminationMode.SUSPEND_GRACEFUL
        assert after.phase is Phase.COMPLETING
        assert of_type(actions, DeleteDriverPod) == []


@given(specs(), st.sampled_from(["new-export"]), st.booleans())
def test_a_new_export_name_exports_or_cancels_with_a_terminal_export(
    spec: SnapshotJobSpec, name: str, cancel: bool
) -> None:
    assume(not spec.suspend and spec.processing_guarantee is not ProcessingGuarantee.NONE)
    changed = spec.model_copy(
        update={"export_snapshot": ExportSnapshotSpec(name=name, cancel_job=cancel)}
    )

    _, actions = decide_running(changed)

    if cancel:
        [request] = of_type(actions, RequestTermination)
        assert (request.mode, request.export_name) == (TerminationMode.CANCEL_GRACEFUL, name)
    else:
        assert of_type(actions, RequestExport)[0].name == name
        assert of_type(actions, RequestTermination) == []
    assert of_type(actions, DeleteDriverPod) == []


@given(specs())
def test_only_one_request_is_pending_at_a_time(spec: SnapshotJobSpec) -> None:
    changed = spec.model_copy(update={"suspend": True})
    pending = graceful(TerminationMode.RESTART_GRACEFUL)

    observation, actions = decide_running(
        changed, phase=Phase.COMPLETING, termination=pending, spec_hash=OTHER_HASH
    )

    assert of_type(actions, RequestTermination) == []
    assert status_after(observation.status, actions).termination == pending


@given(specs(), st.sampled_from([m for m in TerminationMode if m.terminal_snapshot]))
def test_a_graceful_request_not_served_in_time_becomes_forceful(
    spec: SnapshotJobSpec, mode: TerminationMode
) -> None:
    late = graceful(mode, seconds_ago=SETTINGS.graceful_timeout_seconds + 1)

    observation, actions = decide_running(spec, phase=Phase.COMPLETING, termination=late)

    assert EventReason.TERMINATION_ESCALATED in reasons(actions)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(driver_pod_name(JOB.name, 2))]
    after = status_after(observation.status, actions)
    expected = {"RESTART": Phase.RESTARTING, "SUSPEND": Phase.SUSPENDED, "CANCEL": Phase.FAILED}
    assert after.phase is expected[mode.action_after.value]
    assert after.termination is None


def test_an_export_only_request_is_cleared_once_the_driver_exported() -> None:
    # No snapshot in the whole wait: stall detection would end the execution first.
    observation = running_job(
        spec_of({"exportSnapshot": {"name": "nightly"}, "stallDetection": {"enabled": False}})
    )
    requested = status_after(observation.status, decide(observation))
    assert requested.export_request is not None
    exported = requested.model_copy(
        update={
            "exported_snapshots": [
                ExportedSnapshot(
                    name="nightly", snapshot_id=4, num_bytes=10, created_at=NOW, terminal=False
                )
            ]
        }
    )

    actions = decide(replace(observation, status=exported))

    assert status_after(exported, actions).export_request is None
    assert EventReason.SNAPSHOT_EXPORTED in reasons(actions)
    assert of_type(actions, RequestExport) == []


def test_an_export_only_request_not_served_in_time_is_asked_again() -> None:
    # No snapshot in the whole wait: stall detection would end the execution first.
    observation = running_job(
        spec_of({"exportSnapshot": {"name": "nightly"}, "stallDetection": {"enabled": False}})
    )
    requested = status_after(observation.status, decide(observation))
    late = replace(
        observation,
        status=requested,
        now=NOW + timedelta(seconds=SETTINGS.graceful_timeout_seconds),
    )

    actions = decide(late)

    assert EventReason.EXPORT_TIMED_OUT in reasons(actions)
    [again] = of_type(actions, RequestExport)
    assert again.name == "nightly"
    assert requested.export_request is not None
    assert again.request_id != requested.export_request.request_id


def test_a_stale_driver_of_an_older_execution_is_deleted() -> None:
    spec = spec_of()
    observation = running_job(spec)
    stale = DriverPod(driver_pod_name(JOB.name, 1), execution_id(JOB.uid, 1, NOW), PodPhase.RUNNING)

    actions = decide(replace(observation, pods=(*observation.pods, stale)))

    assert DeleteDriverPod(stale.name) in actions
    assert EventReason.STALE_DRIVER_DELETED in reasons(actions)
    assert DeleteDriverPod(driver_pod_name(JOB.name, 2)) not in actions
