"""Reads raw API objects into an :class:`Observation`: the one place they are parsed.

The kopf layer hands over what it read (the SnapshotJob, its driver Pods, the store's health
document) as plain dictionaries; everything about their shape is decided here, purely, so it is
unit-tested together with the decisions it feeds. Parsing errs on the safe side: a Pod whose
state is unknown may still run, and a health document that cannot be read is no store.
The functions are named ``parse_*`` because they only parse what was handed over; ``read_``
and ``fetch_`` name the HTTP calls, in the verb-named modules (``fetching``, ``store_health``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import Any

import pydantic

from snapshot_operator.reconcile.observation import (
    DriverPod,
    ExecutorPod,
    InvalidSpec,
    JobRef,
    Observation,
    PodPhase,
    PodProblem,
    StoreHealth,
    UpgradeCheckPod,
)
from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus
from snapshotjob_contract.resource import GROUP, NAME_RULE

LABEL_EXECUTION_ID = f"{GROUP}/execution-id"
"""The driver Pod label naming its execution (set by ``manifests.build_driver_pod``)."""
DRIVER_CONTAINER = "driver"
"""The driver Pod's container whose exit code tells how the execution ended."""
TERMINATION_MESSAGE_PATH = "/dev/termination-log"
"""Where the driver writes one line naming its failure before it exits (65, 66, 69, 78), or,
when it ended as asked and exits 0, one starting ``Ended as asked:`` (which makes that exit 0
mean 64, see ``exits.driver_exit_code``); the kubelet hands it to the operator as the
container's ``state.terminated.message``."""
MAX_TERMINATION_MESSAGE = 400
"""The longest driver message the operator passes on (its end: the last log lines matter
most): with the operator's own text it still fits an Event's note, which the API limits to
1 KiB."""
MAX_POD_MESSAGE = 300
"""The longest scheduler or kubelet message about a Pod that cannot start the operator passes
on, for the same reason."""
MAX_IMAGE = 200
"""The longest image reference the operator names in a problem (a digest reference is about
100 characters)."""
LABEL_COMPONENT = "app.kubernetes.io/component"
"""Spark's executor Pods carry ``executor`` in it (``manifests.driver_spark_conf``)."""
EXECUTOR_COMPONENT = "executor"
UPGRADE_CHECK_COMPONENT = "upgrade-check"
"""The component label of an upgrade check's Pod (``manifests_check.build_upgrade_check_pod``)."""
LABEL_SPEC_HASH = f"{GROUP}/spec-hash"
"""The upgrade check Pod's label naming the fingerprint of the spec it checks."""
CHECK_CONTAINER = "check"
"""The upgrade check Pod's container, whose exit code is the check's answer."""
WAITING_PROBLEMS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "ErrImageNeverPull",
        "InvalidImageName",
        "CreateContainerError",
        "CreateContainerConfigError",
        "RunContainerError",
    }
)
"""Reasons of a waiting container that mean it will not start without a change (the kubelet
may retry, but the image, its command or its config is wrong)."""
PULL_PROBLEMS = frozenset({"ErrImagePull", "ImagePullBackOff"})
"""Reasons of a waiting container whose image the kubelet could not pull: the image's name,
the registry, or the Pod's pull Secrets are wrong."""
_PLAIN_TERMINATION_REASONS = frozenset({"Error", "Completed"})
"""Terminated reasons that say nothing the exit code does not."""


def parse_spec(raw: Mapping[str, Any] | None) -> SnapshotJobSpec | InvalidSpec:
    """Returns the spec, or what is wrong with it (field paths in the API's camelCase)."""
    try:
        return SnapshotJobSpec.model_validate(raw or {})
    except pydantic.ValidationError as error:
        problems = [
            f"{'.'.join(str(part) for part in detail['loc']) or 'spec'}: {detail['msg']}"
            for detail in error.errors(include_url=False)
        ]
        return InvalidSpec("; ".join(problems))


def _pod_phase(status: Mapping[str, Any]) -> PodPhase:
    """A Pod's phase; one the decision does not know (``Unknown``) counts as running."""
    try:
        return PodPhase(status.get("phase") or PodPhase.PENDING.value)
    except ValueError:
        return PodPhase.RUNNING


def parse_driver_pod(raw: Mapping[str, Any]) -> DriverPod | None:
    """Returns a driver Pod as the decision sees it; None if it is not a driver Pod.

    A phase the decision does not know (``Unknown``: the node stopped reporting) counts as
    running, because the driver may well still be running there.
    """
    metadata = raw.get("metadata") or {}
    execution = (metadata.get("labels") or {}).get(LABEL_EXECUTION_ID)
    if not execution:
        return None
    status = raw.get("status") or {}
    phase = _pod_phase(status)
    exit_code = None
    message = None
    reason = None
    for container in status.get("containerStatuses") or ():
        if container.get("name") == DRIVER_CONTAINER:
            terminated = (container.get("state") or {}).get("terminated")
            if terminated is not None and terminated.get("exitCode") is not None:
                exit_code = int(terminated["exitCode"])
                message = parse_termination_message(terminated.get("message"))
                if terminated.get("reason") not in _PLAIN_TERMINATION_REASONS:
                    reason = _one_line(terminated.get("reason"), 64)
    return DriverPod(
        name=str(metadata["name"]),
        execution_id=str(execution),
        phase=phase,
        exit_code=exit_code,
        deleting=metadata.get("deletionTimestamp") is not None,
        termination_message=message,
        termination_reason=reason,
        problem=None
        if phase.is_terminal
        else parse_pod_problem(
            status, terminated_errors=False, pull_secrets=_pull_secrets(raw.get("spec"))
        ),
        node_lost_since=parse_node_lost_since(status) if phase is PodPhase.RUNNING else None,
    )


def parse_node_lost_since(status: Mapping[str, Any]) -> datetime | None:
    """Returns since when a running Pod is not Ready, which for a driver means a lost node.

    The node controller marks every Pod of a node that stopped reporting not Ready; the
    driver has no readiness probe, so its Pod is Ready from start to exit otherwise. A time
    that cannot be read counts as not lost: the Pod is left to run.
    """
    for condition in status.get("conditions") or ():
        if condition.get("type") == "Ready" and condition.get("status") == "False":
            try:
                return datetime.fromisoformat(str(condition["lastTransitionTime"]))
            except (KeyError, ValueError):
                return None
    return None


def parse_executor_pod(raw: Mapping[str, Any]) -> ExecutorPod | None:
    """Returns a Spark executor Pod of the job; None if the Pod is not an executor."""
    metadata = raw.get("metadata") or {}
    labels = metadata.get("labels") or {}
    if labels.get(LABEL_COMPONENT) != EXECUTOR_COMPONENT or LABEL_EXECUTION_ID in labels:
        return None
    owners = [ref for ref in metadata.get("ownerReferences") or () if ref.get("kind") == "Pod"]
    return ExecutorPod(
        name=str(metadata["name"]),
        driver_pod=str(owners[0]["name"]) if owners else None,
        problem=parse_pod_problem(
            raw.get("status") or {},
            terminated_errors=True,
            pull_secrets=_pull_secrets(raw.get("spec")),
        ),
    )


def _pull_secrets(spec: Mapping[str, Any] | None) -> tuple[str, ...]:
    """The names of a Pod's ``imagePullSecrets``, in order."""
    refs = (spec or {}).get("imagePullSecrets") or ()
    return tuple(str(ref["name"]) for ref in refs if isinstance(ref, Mapping) and ref.get("name"))


def parse_pod_problem(
    status: Mapping[str, Any], *, terminated_errors: bool, pull_secrets: tuple[str, ...] = ()
) -> PodProblem | None:
    """Returns why a Pod cannot start, from its ``status``; None if nothing says so.

    Args:
        status: The Pod's status.
        terminated_errors: Whether a container that exited with a non-zero code is a problem
            (an executor's is; the driver's exit is its execution's end, told by its code).
        pull_secrets: The Pod's ``imagePullSecrets`` names, kept with an image pull problem.
    """
    for condition in status.get("conditions") or ():
        if (
            condition.get("type") == "PodScheduled"
            and condition.get("status") == "False"
            and condition.get("reason") == "Unschedulable"
        ):
            message = _one_line(condition.get("message"), MAX_POD_MESSAGE) or ""
            return PodProblem("Unschedulable", message, scheduling=True)
    containers = [
        *(status.get("initContainerStatuses") or ()),
        *(status.get("containerStatuses") or ()),
    ]
    for container in containers:
        state = container.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in WAITING_PROBLEMS:
            message = _one_line(waiting.get("message"), MAX_POD_MESSAGE) or ""
            if waiting["reason"] in PULL_PROBLEMS and container.get("image"):
                image = _one_line(container["image"], MAX_IMAGE)
                return PodProblem(
                    str(waiting["reason"]), message, image=image, pull_secrets=pull_secrets
                )
            return PodProblem(str(waiting["reason"]), message)
        terminated = state.get("terminated") or {}
        code = terminated.get("exitCode")
        if terminated_errors and code not in (None, 0):
            detail = _one_line(terminated.get("message"), MAX_POD_MESSAGE)
            message = f"exitCode={code}" + (f" {detail}" if detail else "")
            return PodProblem(str(terminated.get("reason") or "Error"), message)
    return None


def _one_line(raw: object, limit: int) -> str | None:
    """Returns the text on one line, its end kept if it is longer than ``limit``; None if empty.

    The end is kept because a log's last lines (and a scheduler message's summary) say most.
    """
    if not isinstance(raw, str):
        return None
    line = " ".join(raw.split())
    if not line:
        return None
    if len(line) > limit:
        line = "..." + line[-(limit - 3) :].lstrip()
    return line


def parse_termination_message(raw: object) -> str | None:
    """Returns the driver's termination message on one line, cut to a length fit for an Event.

    With ``FallbackToLogsOnError`` the kubelet gives the log's last lines when the driver wrote
    no message, so it may span lines; whitespace is collapsed to single spaces, and of a long
    message the end is kept (the last log lines name the error). None if empty.
    """
    return _one_line(raw, MAX_TERMINATION_MESSAGE)


def parse_store_health(document: Mapping[str, Any] | None) -> StoreHealth | None:
    """Returns the store's health from a member's ``/hazelcast/health`` document.

    Cluster-safe means more than the document's ``clusterSafe``: the answering member and
    the cluster must also be ACTIVE (a member that is shutting down still reports safe).
    """
    if not document:
        return None
    try:
        active = document["nodeState"] == "ACTIVE" and document["clusterState"] == "ACTIVE"
        return StoreHealth(
            cluster_safe=active and document["clusterSafe"] is True,
            member_count=int(document["clusterSize"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def parse_upgrade_check_pod(raw: Mapping[str, Any]) -> UpgradeCheckPod | None:
    """Returns an upgrade check's Pod; None if the Pod is not one."""
    metadata = raw.get("metadata") or {}
    labels = metadata.get("labels") or {}
    spec_hash = labels.get(LABEL_SPEC_HASH)
    if labels.get(LABEL_COMPONENT) != UPGRADE_CHECK_COMPONENT or not spec_hash:
        return None
    status = raw.get("status") or {}
    phase = _pod_phase(status)
    exit_code = None
    message = None
    for container in status.get("containerStatuses") or ():
        terminated = (container.get("state") or {}).get("terminated")
        if (
            container.get("name") == CHECK_CONTAINER
            and terminated is not None
            and terminated.get("exitCode") is not None
        ):
            exit_code = int(terminated["exitCode"])
            message = parse_termination_message(terminated.get("message"))
    deleting = metadata.get("deletionTimestamp") is not None
    return UpgradeCheckPod(
        str(metadata["name"]), str(spec_hash), phase, exit_code, message, deleting
    )


def observe(
    job: Mapping[str, Any],
    pods: Sequence[Mapping[str, Any]],
    health: Mapping[str, Any] | None,
    now: datetime,
) -> Observation:
    """Returns the observation of a SnapshotJob read with its driver Pods and store health.

    Args:
        job: The SnapshotJob object.
        pods: The Pods labelled with the job's uid, read right before (not from a cache): its
            driver Pods (labelled with their execution) and Spark's executor Pods.
        health: The store's health document; None if no member answered.
        now: The current time, timezone-aware.

    Raises:
        pydantic.ValidationError: If the status cannot be read. Deciding on a status with
            parts left out could reuse a fencing token or forget a pending request, so the
            caller must retry rather than decide.
    """
    metadata = job["metadata"]
    drivers = (parse_driver_pod(pod) for pod in pods)
    executors = (parse_executor_pod(pod) for pod in pods)
    checks = (parse_upgrade_check_pod(pod) for pod in pods)
    name = str(metadata["name"])
    # A job admitted before the CRD refused long names: nothing can be built from its name.
    spec = parse_spec(job.get("spec")) if NAME_RULE.holds(name) else InvalidSpec(NAME_RULE.message)
    return Observation(
        job=JobRef(
            namespace=str(metadata["namespace"]),
            name=name,
            uid=str(metadata["uid"]),
        ),
        generation=int(metadata.get("generation") or 1),
        spec=spec,
        status=SnapshotJobStatus.model_validate(job.get("status") or {}),
        now=now,
        pods=tuple(pod for pod in drivers if pod is not None),
        executors=tuple(pod for pod in executors if pod is not None),
        checks=tuple(pod for pod in checks if pod is not None),
        store=parse_store_health(health),
        deleting=metadata.get("deletionTimestamp") is not None,
    )
