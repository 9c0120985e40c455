"""Decisions for a driver Pod that is lost or gone: its node stopped reporting, or the Pod was
deleted as soon as it stopped (an eviction), which only the driver's own exit report explains.

Found on a multi-node cluster (issue 13): the Pod of a lost node stays Running in the API, and
once evicted stays Terminating until the node confirms, which a lost node never does, so the
job waited for ever. The operator now deletes such a Pod without a grace period once it has
been not Ready for ``driver_lost_seconds``, and the next decision starts a new execution
(a failure, with backoff); fencing keeps the old driver from committing if its node returns.
The observations are built with the helpers of ``test_decide.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    EventReason,
    RemoveFinalizer,
    Requeue,
    decide,
)
from snapshot_operator.reconcile.observation import PodPhase
from snapshot_operator.reconcile.observe import parse_node_lost_since
from snapshotjob_contract import (
    DriverExit,
    DriverExitStatus,
    Phase,
    PipelineStartedStatus,
    SnapshotJobStatus,
)
from tests.unit.operator.decide_helpers import SETTINGS, of_type, reasons, running_job, spec_of
from tests.unit.operator.world import NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")


def test_a_driver_not_ready_for_less_than_the_limit_is_left_to_run() -> None:
    observation = running_job(spec_of())
    (pod,) = observation.pods
    lost = replace(pod, node_lost_since=ago(SETTINGS.driver_lost_seconds - 5))
    actions = decide(replace(observation, pods=(lost,)), SETTINGS)
    assert not of_type(actions, DeleteDriverPod)
    assert EventReason.DRIVER_NODE_LOST not in reasons(actions)
    (requeue,) = of_type(actions, Requeue)
    assert requeue.after_seconds <= 6


def test_a_driver_lost_for_the_limit_is_deleted_at_once_and_the_next_look_restarts() -> None:
    observation = running_job(spec_of())
    (pod,) = observation.pods
    lost = replace(pod, node_lost_since=ago(SETTINGS.driver_lost_seconds))
    actions = decide(replace(observation, pods=(lost,)), SETTINGS)

    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]
    assert EventReason.DRIVER_NODE_LOST in reasons(actions)

    # The API forgot the Pod: the execution failed, a new one starts after the backoff.
    status = status_after(observation.status, actions)
    gone = decide(replace(observation, status=status, pods=()), SETTINGS)
    after = status_after(status, gone)
    assert after.phase is Phase.RESTARTING
    assert after.restarts == observation.status.restarts + 1


def test_a_lost_driver_already_evicted_is_still_deleted_at_once() -> None:
    observation = running_job(spec_of())
    (pod,) = observation.pods
    evicted = replace(pod, deleting=True, node_lost_since=ago(SETTINGS.driver_lost_seconds + 300))
    actions = decide(replace(observation, pods=(evicted,)), SETTINGS)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]


def test_a_job_being_deleted_deletes_a_driver_on_a_lost_node_at_once_then_ends() -> None:
    # Its graceful deletion would never end, and the job would keep its finalizer for ever.
    observation = running_job(spec_of())
    (pod,) = observation.pods
    lost = replace(pod, deleting=True, node_lost_since=ago(SETTINGS.driver_lost_seconds))
    actions = decide(replace(observation, pods=(lost,), deleting=True), SETTINGS)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]
    assert EventReason.DRIVER_NODE_LOST in reasons(actions)
    assert not of_type(actions, RemoveFinalizer)

    gone = decide(replace(observation, pods=(), deleting=True), SETTINGS)
    assert of_type(gone, RemoveFinalizer)


@pytest.mark.parametrize("phase", [Phase.FAILED, Phase.RESTARTING, Phase.SUSPENDED])
def test_a_driver_on_a_lost_node_is_deleted_at_once_between_executions(phase: Phase) -> None:
    # A Pod being deleted when the job ended or paused, whose node then stopped reporting:
    # it may run as far as the API knows, so no new execution could ever start.
    observation = running_job(spec_of())
    (pod,) = observation.pods
    status = observation.status.model_copy(update={"phase": phase})
    lost = replace(pod, deleting=True, node_lost_since=ago(SETTINGS.driver_lost_seconds + 1))
    actions = decide(replace(observation, status=status, pods=(lost,)), SETTINGS)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]
    assert EventReason.DRIVER_NODE_LOST in reasons(actions)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T01:00:00Z"}], None),
        (
            [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T01:00:00Z"}],
            "2026-11-23T01:00:00+00:00",
        ),
        ([{"type": "Ready", "status": "False"}], None),
        ([], None),
    ],
)
def test_parse_node_lost_since(conditions: list[dict[str, str]], expected: str | None) -> None:
    since = parse_node_lost_since({"conditions": conditions})
    assert (since.isoformat() if since else None) == expected
    assert NOW.tzinfo is not None


def _gone_after_reporting(exit_code: int | None) -> tuple[SnapshotJobStatus, SnapshotJobStatus]:
    """A RUNNING job whose driver Pod is gone; with an exit report of ``exit_code`` if given."""
    observation = running_job(spec_of())
    execution = observation.status.execution
    assert execution is not None
    status = observation.status.model_copy(
        update={
            "pipeline_started": PipelineStartedStatus(execution_id=execution.id, time=ago(20)),
            "driver_exit": None
            if exit_code is None
            else DriverExitStatus(execution_id=execution.id, exit_code=exit_code, time=NOW),
        }
    )
    actions = decide(replace(observation, status=status, pods=()), SETTINGS)
    return status, status_after(status, actions)


def test_a_driver_evicted_after_reporting_its_interruption_restarts_without_a_failure() -> None:
    before, after = _gone_after_reporting(int(DriverExit.INTERRUPTED))
    assert after.restarts == before.restarts
    assert after.last_failure is None


def test_a_driver_gone_without_a_report_is_a_failure() -> None:
    before, after = _gone_after_reporting(None)
    assert after.restarts == before.restarts + 1
    assert after.last_failure is not None


def test_an_exit_report_of_an_older_execution_means_nothing() -> None:
    observation = running_job(spec_of())
    status = observation.status.model_copy(
        update={"driver_exit": DriverExitStatus(execution_id="older", exit_code=143, time=NOW)}
    )
    after = status_after(status, decide(replace(observation, status=status, pods=()), SETTINGS))
    assert after.restarts == status.restarts + 1


def _killed_after_reporting(
    pod_exit_code: int, reported: int | None
) -> tuple[SnapshotJobStatus, list[object]]:
    """A RUNNING job whose driver Pod is still listed, FAILED with ``pod_exit_code``; with an
    exit report of ``reported`` if given. Returns the status before and the actions."""
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=pod_exit_code)
    execution = observation.status.execution
    assert execution is not None
    status = observation.status.model_copy(
        update={
            "driver_exit": None
            if reported is None
            else DriverExitStatus(
                execution_id=execution.id,
                exit_code=reported,
                message="Stop signal not served within 20s",
                time=NOW,
            ),
        }
    )
    return status, decide(replace(observation, status=status), SETTINGS)


def test_a_driver_killed_after_reporting_its_interruption_restarts_without_a_failure() -> None:
    # Found in CI (a drain): the step outlasted the grace period, the driver reported 143 and
    # the kubelet killed it; the operator saw the FAILED Pod (137) before its deletion.
    before, actions = _killed_after_reporting(137, int(DriverExit.INTERRUPTED))
    after = status_after(before, actions)
    assert EventReason.DRIVER_INTERRUPTED in reasons(actions)
    assert after.restarts == before.restarts
    assert after.last_failure is None


def test_a_driver_killed_without_a_report_is_a_failure() -> None:
    before, actions = _killed_after_reporting(137, None)
    after = status_after(before, actions)
    assert EventReason.DRIVER_INTERRUPTED not in reasons(actions)
    assert after.restarts == before.restarts + 1
    assert after.last_failure is not None


def test_a_driver_that_chose_its_exit_code_is_not_overruled_by_its_report() -> None:
    # Only the kubelet's kill defers to the report: a code the driver exited with is its last word.
    before, actions = _killed_after_reporting(int(DriverExit.FAILED), int(DriverExit.INTERRUPTED))
    after = status_after(before, actions)
    assert after.restarts == before.restarts + 1
    assert after.last_failure is not None
