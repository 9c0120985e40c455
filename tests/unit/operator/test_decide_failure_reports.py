"""What a failure tells (exits.py, live.py): the driver's words, the Pod kept, its exit report.

Found by a user (issue 13): a failed driver said only ``exitCode=1`` and its log went with its
Pod. The driver's termination message and the kubelet's reason (``OOMKilled``) now reach
``status.lastFailure`` and the Warning Event, and the failed driver Pod is kept, named in
``lastFailure``, until a later one fails. When the kubelet killed the Pod after the driver
reported how it ends, or the Pod is gone altogether, the driver's own exit report
(``status.driverExit``, of the current execution only) says what happened: an interrupted
driver restarts without a failure, a driver without a report failed.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    DriverPod,
    EmitEvent,
    EventReason,
    PodPhase,
    decide,
    parse_driver_pod,
)
from snapshotjob_contract import (
    ConditionReason,
    DriverExit,
    DriverExitStatus,
    PipelineStartedStatus,
    SnapshotJobStatus,
)
from tests.unit.operator.decide_helpers import (
    SETTINGS,
    a_snapshot,
    creates,
    of_type,
    reasons,
    running_job,
    spec_of,
)
from tests.unit.operator.world import NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")

DRIVER_LINE = "Snapshot 0 in map '__sj.snapshot.uid.0' is corrupted: chunk '0/counts/3/0' missing"


@pytest.mark.parametrize(
    ("code", "event"),
    [
        (DriverExit.SNAPSHOT_CORRUPTED, EventReason.SNAPSHOT_CORRUPTED),
        (DriverExit.SNAPSHOT_NOT_FOUND, EventReason.SNAPSHOT_NOT_FOUND),
        (DriverExit.TRANSIENT_FAILURE, EventReason.EXECUTION_FAILED),
        (DriverExit.SNAPSHOT_INCOMPATIBLE, EventReason.SNAPSHOT_INCOMPATIBLE),
    ],
)
def test_the_drivers_message_is_in_the_event_and_last_failure(
    code: DriverExit, event: EventReason
) -> None:
    observation = running_job(
        spec_of(), pod_phase=PodPhase.FAILED, exit_code=code, record=a_snapshot()
    )
    [pod] = observation.pods
    told = replace(observation, pods=(replace(pod, termination_message=DRIVER_LINE),))

    actions = decide(told)
    silent = decide(observation)

    after = status_after(told.status, actions)
    assert after.last_failure is not None
    assert f'driverMessage="{DRIVER_LINE}"' in after.last_failure.message
    [emitted] = [e for e in of_type(actions, EmitEvent) if e.reason is event]
    assert f'driverMessage="{DRIVER_LINE}"' in emitted.message
    assert f"exitCode={int(code)}" in emitted.message or "snapshot" in emitted.message
    quiet = status_after(observation.status, silent).last_failure
    assert quiet is not None and "driverMessage" not in quiet.message


@pytest.mark.parametrize(
    ("code", "container_reason", "message", "expected"),
    [
        (1, "Error", "Traceback ...\nValueError: no such column", 'driverMessage="Traceback'),
        (137, "OOMKilled", None, "containerReason=OOMKilled"),
        (2, "Error", "ModuleNotFoundError: pipelines.nope", "ModuleNotFoundError"),
    ],
)
def test_every_failure_names_the_drivers_message_and_container_reason(
    code: int, container_reason: str, message: str | None, expected: str
) -> None:
    raw = {
        "metadata": {
            "name": "wordcount-driver-2",
            "labels": {"snapshotjob.io/execution-id": "x"},
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "driver",
                    "state": {
                        "terminated": {
                            "exitCode": code,
                            "reason": container_reason,
                            "message": message,
                        }
                    },
                }
            ],
        },
    }
    parsed = parse_driver_pod(raw)
    assert parsed is not None
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=code)
    (pod,) = observation.pods
    pod = replace(
        pod,
        termination_message=parsed.termination_message,
        termination_reason=parsed.termination_reason,
    )

    actions = decide(replace(observation, pods=(pod,)))
    status = status_after(observation.status, actions)

    assert status.last_failure is not None
    assert expected in status.last_failure.message
    warnings = [a for a in actions if isinstance(a, EmitEvent) and expected in a.message]
    assert warnings and all(w.event_type.value == "Warning" for w in warnings)
    assert (parsed.termination_reason is None) == (container_reason == "Error")


def test_the_failed_driver_pod_is_kept_and_named_until_a_later_one_fails() -> None:
    spec = spec_of({"restartPolicy": {"maxRestarts": 5, "backoffSeconds": 1}})
    observation = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1)
    (failed_pod,) = observation.pods

    failed = status_after(observation.status, decide(observation))
    assert failed.last_failure is not None
    assert failed.last_failure.driver_pod == failed_pod.name

    restart = replace(observation, status=failed, now=NOW + timedelta(seconds=60))
    actions = decide(restart)
    started = status_after(failed, actions, restart.now)
    (create,) = creates(actions)
    assert not of_type(actions, DeleteDriverPod), "the failed Pod stays for its log"
    assert started.last_failure is not None
    assert started.last_failure.driver_pod == failed_pod.name

    new_pod = DriverPod(create.pod_name, create.execution_id, PodPhase.FAILED, exit_code=1)
    later = replace(
        restart,
        status=started.model_copy(
            update={
                "pipeline_started": PipelineStartedStatus(
                    execution_id=create.execution_id, time=restart.now
                )
            }
        ),
        pods=(failed_pod, new_pod),
    )
    actions = decide(later)
    status = status_after(later.status, actions)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(failed_pod.name)]
    assert status.last_failure is not None
    assert status.last_failure.driver_pod == new_pod.name


def test_a_failure_without_a_pod_forgets_a_kept_pod_that_is_gone() -> None:
    observation = running_job(spec_of(), pipeline_started=True)
    failure = status_after(
        observation.status,
        decide(running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=1)),
    ).last_failure
    assert failure is not None and failure.driver_pod is not None
    lost = replace(
        observation,
        status=observation.status.model_copy(update={"last_failure": failure}),
        pods=(),
    )

    actions = decide(lost)
    patch = actions[0].patch  # type: ignore[union-attr]

    assert patch["lastFailure"]["driverPod"] is None, "a merge patch must remove it"
    assert patch["lastFailure"]["reason"] == ConditionReason.DRIVER_POD_LOST


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
