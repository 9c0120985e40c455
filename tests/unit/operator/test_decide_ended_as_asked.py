"""A driver that ended as asked exits 0: how the operator tells it from a completed one.

A driver that served ``status.termination`` reports 64 (``TERMINATED``) in
``status.driverExit`` and writes a termination message starting ``Ended as asked:``, but its
process exits 0, so that Kubernetes does not show it as ``Error``. An exit 0 with either sign
is read as 64 and the request is carried out; an exit 0 with neither is a completion, as
before; a driver of an earlier release still exits 64. The rule that a 64 nobody asked for is
a failure (``test_decide_exits.py``) holds for an exit 0 that says 64 too.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from snapshot_operator.reconcile import DriverPod, EventReason, Observation, PodPhase, decide
from snapshot_operator.reconcile.exits import driver_exit_code
from snapshotjob_contract import (
    ConditionReason,
    DriverExit,
    DriverExitStatus,
    Phase,
    SnapshotJobStatus,
    TerminationMode,
)
from snapshotjob_contract.exits import ENDED_AS_ASKED_PREFIX
from tests.unit.operator.decide_helpers import (
    a_snapshot,
    creates,
    graceful,
    reasons,
    running_job,
    spec_of,
)
from tests.unit.operator.world import NOW, status_after

pytestmark = pytest.mark.filterwarnings("error")

MESSAGE = f"{ENDED_AS_ASKED_PREFIX}mode=SUSPEND_GRACEFUL snapshotId=0"
"""The termination message a driver writes when it served a suspend."""


def _ended(
    exit_code: int | None,
    *,
    reported: int | None = None,
    message: str | None = None,
    mode: TerminationMode | None = TerminationMode.SUSPEND_GRACEFUL,
    report_of: str | None = None,
) -> Observation:
    """A COMPLETING job whose driver Pod stopped with ``exit_code``.

    Args:
        exit_code: The driver container's exit code; None for a Pod without one.
        reported: The exit code in ``status.driverExit``; None for no report.
        message: The container's termination message.
        mode: The termination request in the status; None for none.
        report_of: The execution the report names; the current one by default.
    """
    observation = running_job(
        spec_of(),
        phase=Phase.COMPLETING if mode is not None else Phase.RUNNING,
        pod_phase=PodPhase.SUCCEEDED if exit_code in (0, None) else PodPhase.FAILED,
        exit_code=exit_code,
        termination=graceful(mode) if mode is not None else None,
        record=a_snapshot(),
    )
    execution = observation.status.execution
    assert execution is not None
    status = observation.status
    if reported is not None:
        report = DriverExitStatus(
            execution_id=report_of or execution.id, exit_code=reported, message=message, time=NOW
        )
        status = status.model_copy(update={"driver_exit": report})
    pods = tuple(replace(pod, termination_message=message) for pod in observation.pods)
    return replace(observation, status=status, pods=pods)


def _after(observation: Observation) -> tuple[SnapshotJobStatus, set[EventReason]]:
    actions = decide(observation)
    return status_after(observation.status, actions), reasons(actions)


@pytest.mark.parametrize(
    ("reported", "message"),
    [(DriverExit.TERMINATED, MESSAGE), (DriverExit.TERMINATED, None), (None, MESSAGE)],
    ids=["report-and-message", "report-only", "message-only"],
)
def test_an_exit_0_that_says_it_ended_as_asked_carries_out_the_request(
    reported: int | None, message: str | None
) -> None:
    after, events = _after(_ended(0, reported=reported, message=message))

    assert after.phase is Phase.SUSPENDED, "not COMPLETED: the driver ended as asked"
    assert EventReason.SUSPENDED in events and EventReason.COMPLETED not in events
    assert after.restarts == 0 and after.last_failure is None
    assert after.termination is None


@pytest.mark.parametrize(
    "mode", [TerminationMode.RESTART_GRACEFUL, TerminationMode.CANCEL_GRACEFUL]
)
def test_every_action_of_a_request_is_carried_out_after_an_exit_0(mode: TerminationMode) -> None:
    observation = _ended(0, reported=DriverExit.TERMINATED, message=MESSAGE, mode=mode)
    actions = decide(observation)

    after = status_after(observation.status, actions)
    if mode is TerminationMode.RESTART_GRACEFUL:
        assert after.phase is Phase.STARTING and len(creates(actions)) == 1
    else:
        assert after.phase is Phase.FAILED
        assert after.last_failure is not None
        assert after.last_failure.reason == ConditionReason.CANCELLED


def test_a_driver_of_an_earlier_release_still_exits_64() -> None:
    after, _ = _after(_ended(DriverExit.TERMINATED))

    assert after.phase is Phase.SUSPENDED


def test_a_driver_killed_after_reporting_it_ended_as_asked_carries_out_the_request() -> None:
    after, _ = _after(_ended(137, reported=DriverExit.TERMINATED, message=MESSAGE))

    assert after.phase is Phase.SUSPENDED and after.restarts == 0


def test_a_driver_gone_after_reporting_it_ended_as_asked_carries_out_the_request() -> None:
    observation = _ended(0, reported=DriverExit.TERMINATED, message=MESSAGE)

    after, _ = _after(replace(observation, pods=()))

    assert after.phase is Phase.SUSPENDED and after.restarts == 0


@pytest.mark.parametrize(
    ("reported", "message", "report_of"),
    [
        (None, None, None),
        (DriverExit.COMPLETED, None, None),
        (None, "Pipeline done: Ended as asked: is not at the start", None),
        (DriverExit.TERMINATED, None, "an-older-execution"),
    ],
    ids=["no-word", "reported-0", "prefix-not-at-start", "report-of-an-older-execution"],
)
def test_an_exit_0_without_word_of_a_termination_is_a_completion(
    reported: int | None, message: str | None, report_of: str | None
) -> None:
    after, events = _after(_ended(0, reported=reported, message=message, report_of=report_of))

    assert after.phase is Phase.COMPLETED
    assert EventReason.COMPLETED in events


def test_an_exit_0_that_ended_as_asked_without_a_request_is_a_plain_failure() -> None:
    after, _ = _after(_ended(0, reported=DriverExit.TERMINATED, message=MESSAGE, mode=None))

    assert after.phase is Phase.RESTARTING and after.restarts == 1
    assert after.last_failure is not None
    assert after.last_failure.reason == ConditionReason.DRIVER_FAILED
    assert "exitCode=64" in after.last_failure.message
    assert ENDED_AS_ASKED_PREFIX.strip() in after.last_failure.message


@pytest.mark.parametrize(
    ("pod", "reported", "expected"),
    [
        (DriverPod("p", "e", PodPhase.SUCCEEDED, 0), None, 0),
        (DriverPod("p", "e", PodPhase.SUCCEEDED, None), None, 0),
        (DriverPod("p", "e", PodPhase.FAILED, None), DriverExit.TERMINATED, None),
        (DriverPod("p", "e", PodPhase.SUCCEEDED, 0), DriverExit.TERMINATED, 64),
        (DriverPod("p", "e", PodPhase.SUCCEEDED, None), DriverExit.TERMINATED, 64),
        (DriverPod("p", "e", PodPhase.SUCCEEDED, 0, termination_message=MESSAGE), None, 64),
        (DriverPod("p", "e", PodPhase.FAILED, 64), None, 64),
        (DriverPod("p", "e", PodPhase.FAILED, 1, termination_message=MESSAGE), None, 1),
        (DriverPod("p", "e", PodPhase.FAILED, 143), DriverExit.TERMINATED, 143),
    ],
)
def test_only_an_exit_0_is_read_with_the_drivers_word(
    pod: DriverPod, reported: int | None, expected: int | None
) -> None:
    report = (
        None
        if reported is None
        else DriverExitStatus(execution_id="e", exit_code=reported, time=NOW)
    )

    assert driver_exit_code(pod, report) == expected
