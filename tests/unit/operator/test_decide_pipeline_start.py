"""Whether a starting execution's pipeline runs (pipeline_start.py), and a bound on the wait.

Found by a user with ``master: k8s`` (issue 13): executor Pods that could never start (an
image without the executable, requests larger than any node) left the job RUNNING for ever. A
running driver Pod is not a running pipeline: the job stays STARTING until the driver reports
its pipeline running (``status.pipelineStarted``, naming its execution); a driver or executor
Pod that Kubernetes says cannot start degrades the job at once, with a Warning Event naming
it; an execution whose pipeline has not started within the timeout is ended as a failure. For
resetting the restarts, a run counts from the driver's report. Where a test plays the driver,
it also plays that report, or deliberately leaves it out.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

import pytest
from hypothesis import HealthCheck, given, settings

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    EmitEvent,
    EventReason,
    ExecutorPod,
    Observation,
    PodPhase,
    PodProblem,
    decide,
    parse_driver_pod,
    parse_executor_pod,
)
from snapshotjob_contract import (
    ConditionReason,
    ConditionStatus,
    ConditionType,
    ExecutionRecord,
    ExecutionRecordStatus,
    Phase,
    PipelineStartedStatus,
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
from tests.unit.operator.world import NOW, ago, observations, status_after

pytestmark = pytest.mark.filterwarnings("error")

TIMEOUT = SETTINGS.pipeline_start_timeout_seconds
UNSCHEDULABLE = PodProblem(
    "Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.", scheduling=True
)


def _starting(
    *,
    pod_phase: PodPhase = PodPhase.RUNNING,
    seconds_ago: int = 30,
    problem: PodProblem | None = None,
    executors: tuple[ExecutorPod, ...] = (),
    max_restarts: int = 3,
) -> Observation:
    """A STARTING execution whose driver has not reported its pipeline running (yet)."""
    spec = spec_of({"restartPolicy": {"maxRestarts": max_restarts}})
    observation = running_job(spec, phase=Phase.STARTING, pod_phase=pod_phase)
    execution = observation.status.execution
    assert execution is not None
    status = observation.status.model_copy(
        update={"execution": execution.model_copy(update={"started_at": ago(seconds_ago)})}
    )
    (pod,) = observation.pods
    return replace(
        observation,
        status=status,
        pods=(replace(pod, problem=problem),),
        executors=executors,
    )


def _reported(observation: Observation) -> Observation:
    """Plays the driver's report that its pipeline runs."""
    execution = observation.status.execution
    assert execution is not None
    report = PipelineStartedStatus(execution_id=execution.id, time=ago(5))
    return replace(
        observation, status=observation.status.model_copy(update={"pipeline_started": report})
    )


def _events(actions: tuple[object, ...], reason: EventReason) -> list[EmitEvent]:
    return [a for a in actions if isinstance(a, EmitEvent) and a.reason is reason]


def test_a_running_driver_pod_is_not_a_running_pipeline() -> None:
    observation = _starting()

    status = status_after(observation.status, decide(observation))

    assert status.phase is Phase.STARTING
    progressing = condition(status, ConditionType.PROGRESSING)
    assert (progressing.status, progressing.reason) == (
        ConditionStatus.TRUE,
        ConditionReason.WAITING_FOR_PIPELINE,
    )
    assert f"timeoutSeconds={TIMEOUT}" in progressing.message
    assert condition(status, ConditionType.READY).status is ConditionStatus.FALSE


def test_the_drivers_report_makes_the_job_running_once_announced() -> None:
    observation = _reported(_starting())

    actions = decide(observation)
    status = status_after(observation.status, actions)
    again = decide(replace(observation, status=status))

    assert status.phase is Phase.RUNNING
    assert condition(status, ConditionType.READY).status is ConditionStatus.TRUE
    (event,) = _events(actions, EventReason.PIPELINE_RUNNING)
    assert "startSeconds=25" in event.message
    assert EventReason.PIPELINE_RUNNING not in reasons(again)


def test_a_report_of_an_older_execution_means_nothing() -> None:
    observation = _starting()
    stale = PipelineStartedStatus(execution_id="older-execution", time=ago(100))
    observation = replace(
        observation, status=observation.status.model_copy(update={"pipeline_started": stale})
    )

    assert status_after(observation.status, decide(observation)).phase is Phase.STARTING


@pytest.mark.parametrize(
    ("problem", "reason", "event"),
    [
        (UNSCHEDULABLE, ConditionReason.DRIVER_UNSCHEDULABLE, EventReason.DRIVER_UNSCHEDULABLE),
        (
            PodProblem("ImagePullBackOff", 'Back-off pulling image "nope:1"'),
            ConditionReason.DRIVER_NOT_STARTING,
            EventReason.DRIVER_NOT_STARTING,
        ),
        (
            PodProblem("CreateContainerConfigError", 'secret "creds" not found'),
            ConditionReason.DRIVER_NOT_STARTING,
            EventReason.DRIVER_NOT_STARTING,
        ),
    ],
)
def test_a_driver_pod_that_cannot_start_is_degraded_with_an_event_at_once(
    problem: PodProblem, reason: ConditionReason, event: EventReason
) -> None:
    observation = _starting(pod_phase=PodPhase.PENDING, problem=problem)

    actions = decide(observation)
    status = status_after(observation.status, actions)
    again = decide(replace(observation, status=status))

    degraded = condition(status, ConditionType.DEGRADED)
    assert (degraded.status, degraded.reason) == (ConditionStatus.TRUE, reason)
    (warning,) = _events(actions, event)
    assert warning.event_type.value == "Warning"
    for text in (degraded.message, warning.message):
        assert f"pod={observation.pods[0].name}" in text
        assert f"reason={problem.reason}" in text
        assert problem.message in text.replace('\\"', '"')
    assert status.phase is Phase.STARTING
    assert event not in reasons(again), "one Event, when the reason appears"


@pytest.mark.parametrize(
    "problem",
    [
        UNSCHEDULABLE,
        PodProblem("ErrImagePull", "pull access denied"),
        PodProblem(
            "StartError", 'exitCode=128 exec: "/opt/entrypoint.sh": executable file not found'
        ),
    ],
)
def test_executors_that_cannot_start_are_degraded_with_an_event(problem: PodProblem) -> None:
    pod_name = _starting().pods[0].name
    stuck = ExecutorPod("wordcount-exec-1", pod_name, problem)
    other = ExecutorPod("older-exec-1", "wordcount-driver-1", UNSCHEDULABLE)
    observation = _starting(executors=(other, stuck))

    actions = decide(observation)
    status = status_after(observation.status, actions)

    degraded = condition(status, ConditionType.DEGRADED)
    assert degraded.reason == ConditionReason.EXECUTORS_NOT_STARTING
    (warning,) = _events(actions, EventReason.EXECUTORS_NOT_STARTING)
    assert "pod=wordcount-exec-1" in warning.message and "older-exec" not in warning.message
    assert f"reason={problem.reason}" in warning.message


def test_executors_of_another_driver_pod_are_not_this_executions() -> None:
    other = ExecutorPod("older-exec-1", "wordcount-driver-1", UNSCHEDULABLE)
    observation = _starting(executors=(other,))

    status = status_after(observation.status, decide(observation))

    assert condition(status, ConditionType.DEGRADED).status is ConditionStatus.FALSE


def test_problems_of_a_running_pipeline_do_not_degrade_it() -> None:
    pod_name = _starting().pods[0].name
    observation = _reported(_starting(executors=(ExecutorPod("exec-9", pod_name, UNSCHEDULABLE),)))

    status = status_after(observation.status, decide(observation))

    assert status.phase is Phase.RUNNING
    assert condition(status, ConditionType.DEGRADED).status is ConditionStatus.FALSE


def test_before_the_timeout_the_decision_comes_back_at_the_deadline() -> None:
    observation = _starting(seconds_ago=TIMEOUT - 40)

    actions = decide(observation)

    assert not of_type(actions, DeleteDriverPod)
    assert actions[-1].after_seconds <= 40  # type: ignore[union-attr]


def test_a_pipeline_not_started_in_time_ends_the_execution_as_a_failure() -> None:
    pod_name = _starting().pods[0].name
    observation = _starting(
        seconds_ago=TIMEOUT,
        executors=(ExecutorPod("wordcount-exec-1", pod_name, UNSCHEDULABLE),),
    )

    actions = decide(observation)
    status = status_after(observation.status, actions)

    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod_name)]
    assert status.phase is Phase.RESTARTING and status.restarts == 1
    assert status.last_failure is not None
    assert status.last_failure.reason == ConditionReason.PIPELINE_START_TIMEOUT
    assert f"timeoutSeconds={TIMEOUT}" in status.last_failure.message
    assert "Insufficient cpu" in status.last_failure.message
    assert EventReason.EXECUTION_FAILED in reasons(actions)


def test_a_job_that_can_never_start_ends_failed() -> None:
    observation = _starting(
        pod_phase=PodPhase.PENDING, problem=UNSCHEDULABLE, seconds_ago=TIMEOUT, max_restarts=0
    )

    actions = decide(observation)
    status = status_after(observation.status, actions)

    assert status.phase is Phase.FAILED
    assert status.last_failure is not None
    assert "reason=Unschedulable" in status.last_failure.message
    assert EventReason.RESTART_LIMIT_REACHED in reasons(actions)
    ready = condition(status, ConditionType.READY)
    assert ready.reason == ConditionReason.PIPELINE_START_TIMEOUT


def test_a_long_wait_for_the_pipeline_does_not_reset_the_restarts() -> None:
    observation = _starting(seconds_ago=TIMEOUT - 1)
    observation = replace(observation, status=observation.status.model_copy(update={"restarts": 2}))

    status = status_after(observation.status, decide(observation))

    assert status.restarts == 2


def test_a_run_counts_from_the_drivers_report_for_resetting_the_restarts() -> None:
    observation = _reported(_starting(seconds_ago=TIMEOUT - 1))
    observation = replace(observation, status=observation.status.model_copy(update={"restarts": 2}))
    # A run with a snapshot of its own: one without may be a stall (test_decide_stalls.py).
    snapshot = ExecutionRecordStatus.of(snapshot_at(NOW + timedelta(seconds=3590)))
    later = replace(
        observation,
        now=NOW + timedelta(seconds=3600),
        status=observation.status.model_copy(update={"execution_record": snapshot}),
    )

    assert status_after(observation.status, decide(observation)).restarts == 2
    assert status_after(later.status, decide(later)).restarts == 0


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(observations())
def test_running_only_with_the_current_executions_report(observation: Observation) -> None:
    status = status_after(observation.status, decide(observation))

    if status.phase is Phase.RUNNING and status.execution == observation.status.execution:
        assert status.pipeline_runs()


def test_executor_pods_are_read_with_their_owner_and_problem() -> None:
    raw = {
        "metadata": {
            "name": "wordcount-exec-1",
            "labels": {"app.kubernetes.io/component": "executor"},
            "ownerReferences": [{"kind": "Pod", "name": "wordcount-driver-2"}],
        },
        "status": {
            "phase": "Pending",
            "conditions": [
                {
                    "type": "PodScheduled",
                    "status": "False",
                    "reason": "Unschedulable",
                    "message": "0/3 nodes are available:\n 3 Insufficient cpu.",
                }
            ],
        },
    }
    failed = {
        "metadata": {
            "name": "wordcount-exec-2",
            "labels": {"app.kubernetes.io/component": "executor"},
        },
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "executor",
                    "state": {
                        "terminated": {
                            "exitCode": 128,
                            "reason": "StartError",
                            "message": "exec: executable file not found in $PATH",
                        }
                    },
                }
            ],
        },
    }
    pulling = {
        "metadata": {
            "name": "wordcount-exec-3",
            "labels": {"app.kubernetes.io/component": "executor"},
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "executor",
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off"}},
                }
            ],
        },
    }

    executor = parse_executor_pod(raw)
    start_error = parse_executor_pod(failed)
    backoff = parse_executor_pod(pulling)

    assert executor == ExecutorPod(
        "wordcount-exec-1",
        "wordcount-driver-2",
        PodProblem("Unschedulable", "0/3 nodes are available: 3 Insufficient cpu.", True),
    )
    assert start_error is not None and start_error.problem is not None
    assert start_error.problem.reason == "StartError"
    assert "exitCode=128" in start_error.problem.message
    assert "executable file not found" in start_error.problem.message
    assert backoff is not None and backoff.problem == PodProblem("ImagePullBackOff", "Back-off")
    assert parse_executor_pod({"metadata": {"name": "x", "labels": {}}}) is None


def test_a_driver_that_never_reports_but_takes_snapshots_is_not_ended() -> None:
    """A driver of a release before status.pipelineStarted, under an upgraded operator."""
    observation = _starting(seconds_ago=TIMEOUT + 60)
    execution = observation.status.execution
    assert execution is not None
    started_ms = int(execution.started_at.timestamp() * 1000)
    earlier = ExecutionRecord().start_new_snapshot(now=started_ms - 1_000)
    since = ExecutionRecord().start_new_snapshot(now=started_ms + 20_000)

    def with_record(record: ExecutionRecord) -> Observation:
        status = observation.status.model_copy(
            update={"execution_record": ExecutionRecordStatus.of(record)}
        )
        return replace(observation, status=status)

    old_snapshot = decide(with_record(earlier))
    new_snapshot = decide(with_record(since))

    assert of_type(old_snapshot, DeleteDriverPod), "a previous execution's snapshot proves nothing"
    assert of_type(new_snapshot, DeleteDriverPod) == []
    assert status_after(observation.status, new_snapshot).phase is Phase.RUNNING


PULLED = "sj-registry:5000/snapshotjob/runtime@sha256:" + "c2ca" * 16
KUBELET_401 = (
    f'Back-off pulling image "{PULLED}": ErrImagePull: failed to pull and unpack image '
    f'"{PULLED}": failed to resolve reference "{PULLED}": pulling from host sj-registry:5000 '
    f"failed with status code [manifests sha256:{'c2ca' * 16}]: 401 Unauthorized"
)
"""What the kubelet (containerd 1.6) says of a Pod whose pull Secret has a wrong password."""


def test_a_driver_whose_pull_secret_is_wrong_is_degraded_naming_the_image_and_the_401() -> None:
    """The kubelet's message is longer than an Event allows and repeats the image three
    times; the condition and the Event still name the image whole, the Pod's pull Secrets,
    and keep the message's end, where the registry's answer is."""
    raw = {
        "metadata": {
            "name": "wordcount-driver-1",
            "labels": {"snapshotjob.io/execution-id": "e1"},
        },
        "spec": {"imagePullSecrets": [{"name": "sj-registry"}]},
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "driver",
                    "image": PULLED,
                    "state": {"waiting": {"reason": "ImagePullBackOff", "message": KUBELET_401}},
                }
            ],
        },
    }
    pod = parse_driver_pod(raw)
    assert pod is not None and pod.problem is not None
    assert (pod.problem.image, pod.problem.pull_secrets) == (PULLED, ("sj-registry",))
    assert pod.problem.message.endswith("401 Unauthorized")

    observation = _starting(pod_phase=PodPhase.PENDING, problem=pod.problem)
    actions = decide(observation)
    status = status_after(observation.status, actions)

    degraded = condition(status, ConditionType.DEGRADED)
    (warning,) = _events(actions, EventReason.DRIVER_NOT_STARTING)
    assert degraded.reason == ConditionReason.DRIVER_NOT_STARTING
    for text in (degraded.message, warning.message):
        assert text.startswith(f"Driver Pod cannot pull its image image={PULLED} ")
        assert "pullSecrets=sj-registry " in text
        assert "reason=ImagePullBackOff" in text and '401 Unauthorized"' in text
    assert len(warning.message.encode()) <= 1024, "an Event's note is at most 1 KiB"


def test_an_executor_that_cannot_pull_names_its_image_and_no_pull_secret() -> None:
    raw = {
        "metadata": {
            "name": "wordcount-exec-1",
            "labels": {"app.kubernetes.io/component": "executor"},
            "ownerReferences": [{"kind": "Pod", "name": "wordcount-driver-1"}],
        },
        "status": {
            "phase": "Pending",
            "containerStatuses": [
                {
                    "name": "executor",
                    "image": "my-pipeline:dev",
                    "state": {"waiting": {"reason": "ErrImagePull", "message": "not found"}},
                }
            ],
        },
    }
    executor = parse_executor_pod(raw)
    assert executor is not None and executor.problem is not None
    observation = _starting(executors=(replace(executor, driver_pod=_starting().pods[0].name),))

    actions = decide(observation)

    (warning,) = _events(actions, EventReason.EXECUTORS_NOT_STARTING)
    assert warning.message.startswith(
        "Executor Pod cannot pull its image image=my-pipeline:dev pullSecrets=- "
        "pod=wordcount-exec-1 reason=ErrImagePull"
    )
