"""Whether a starting execution's pipeline runs, and what keeps it from starting.

A running driver Pod does not mean a running pipeline: the SparkContext may never start,
executors may never be scheduled (they request more than any node has) or never start (a
wrong image or command). The driver reports in ``status.pipelineStarted`` (fenced by its
execution id) once it has restored and a first Spark job ran on the executors; until then the
job stays STARTING. Meanwhile the operator looks at the driver Pod and the executor Pods the
driver owns: one that Kubernetes says cannot start makes the job Degraded with its own reason
and a Warning Event naming the Pod and Kubernetes' reason and message, at once. An execution
whose pipeline has not started within the operator's pipeline start timeout is ended (its
driver Pod deleted) and counted as a failure, so the restart policy's ``maxRestarts`` ends
even a job that can never start in FAILED instead of STARTING for ever.
"""

from __future__ import annotations

import json
from datetime import timedelta

from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.exits import failed
from snapshot_operator.reconcile.observation import DriverPod, PodPhase, PodProblem
from snapshot_operator.reconcile.plan import Plan, Problem
from snapshotjob_contract import ConditionReason, Phase, SnapshotJobSpec


def start_problem(plan: Plan, pod: DriverPod) -> Problem | None:
    """Returns why the current execution's driver or executors cannot start, if Kubernetes says.

    The driver Pod comes first (without it no executor is asked for), then the executors the
    driver Pod owns, in the order listed.

    Args:
        plan: The decision; its status names the current execution.
        pod: The current execution's driver Pod.
    """
    execution = plan.status.execution
    assert execution is not None
    context = f"executionId={execution.id}"
    if pod.problem is not None:
        reason = (
            ConditionReason.DRIVER_UNSCHEDULABLE
            if pod.problem.scheduling
            else ConditionReason.DRIVER_NOT_STARTING
        )
        what = _what(pod.problem)
        return Problem(reason, _describe(f"Driver Pod {what}", pod.name, pod.problem, context))
    for executor in plan.obs.executors:
        if executor.driver_pod == pod.name and executor.problem is not None:
            what = _what(executor.problem)
            return Problem(
                ConditionReason.EXECUTORS_NOT_STARTING,
                _describe(f"Executor Pod {what}", executor.name, executor.problem, context),
            )
    return None


def watch_pipeline_start(plan: Plan, spec: SnapshotJobSpec, pod: DriverPod) -> bool:
    """Follows a starting execution whose driver has not reported a running pipeline.

    Reports what keeps it from starting (Degraded, through :attr:`Plan.start_problem`) and
    ends it once the pipeline start timeout has passed.

    Args:
        plan: The decision.
        spec: The job's spec.
        pod: The current execution's driver Pod, neither terminal nor being deleted.

    Returns:
        Whether the execution was ended (counted as a failure): the caller does nothing more.
    """
    execution = plan.status.execution
    assert execution is not None
    timeout = plan.settings.pipeline_start_timeout_seconds
    problem = start_problem(plan, pod)
    plan.start_problem = problem
    plan.waiting_for_pipeline = pod.phase is PodPhase.RUNNING
    deadline = execution.started_at + timedelta(seconds=timeout)
    if plan.now < deadline:
        plan.requeue((deadline - plan.now).total_seconds())
        return False
    plan.delete_pod(pod)
    plan.start_problem = None
    plan.waiting_for_pipeline = False
    cause = f": {problem.message}" if problem is not None else "; see the driver's log"
    failed(
        plan,
        spec,
        ConditionReason.PIPELINE_START_TIMEOUT,
        f"Pipeline did not start within timeoutSeconds={timeout}, ended the execution "
        f"executionId={execution.id} attempt={execution.attempt} pod={pod.name}{cause}",
    )
    return True


def announce_pipeline(plan: Plan) -> None:
    """Emits the Event that a starting execution's pipeline now runs."""
    execution = plan.status.execution
    reported = plan.status.pipeline_started
    if (
        plan.obs.status.phase is Phase.RUNNING
        or plan.status.phase is not Phase.RUNNING
        or execution is None
        or reported is None
    ):
        return
    took = max(0, int((reported.time - execution.started_at).total_seconds()))
    plan.event(
        EventReason.PIPELINE_RUNNING,
        f"Pipeline runs executionId={execution.id} attempt={execution.attempt} startSeconds={took}",
    )


def _what(problem: PodProblem) -> str:
    """What is wrong with the Pod, in the words its problem's message starts with."""
    if problem.scheduling:
        return "cannot be scheduled"
    if problem.image is not None:
        return "cannot pull its image"
    return "cannot start"


def _describe(what: str, pod_name: str, problem: PodProblem, context: str) -> str:
    """Returns a problem's message: the Pod, Kubernetes' reason and message, and the bound.

    An image the kubelet cannot pull is named first, with the Pod's pull Secrets (``-`` for
    none): the kubelet's message ends with the registry's answer (``401 Unauthorized`` for a
    wrong Secret, ``not found`` for a wrong name), and the Secrets are what a user checks.
    """
    message = json.dumps(problem.message, ensure_ascii=False)
    pulling = ""
    if problem.image is not None:
        secrets = ",".join(problem.pull_secrets) or "-"
        pulling = f" image={problem.image} pullSecrets={secrets}"
    return f"{what}{pulling} pod={pod_name} reason={problem.reason} message={message} {context}"
