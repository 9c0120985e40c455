"""Gives a job the Spark UI objects it should have: after each reconcile, plan and perform.

Runs at the end of :func:`snapshot_operator.executing.reconcile_once`, on the status as the
job's decision left it: lists the job's UI Service and Ingress, lets
:func:`~snapshot_operator.reconcile.spark_ui.plan_spark_ui` decide, and performs the actions
in order. A job without ``spec.sparkUi.enabled`` and without ``status.sparkUi`` costs no call.
A failure here is logged and tried again at the next reconcile: it never holds back the
job's own supervision.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Protocol

from snapshot_operator.gateways import KubernetesGateway, StaleObservation
from snapshot_operator.reconcile import Observation, PatchStatus
from snapshot_operator.reconcile.spark_ui import (
    ApplySparkUi,
    DeleteSparkUi,
    parse_ui_object,
    plan_spark_ui,
)
from snapshot_operator.spark_ui import build_spark_ui_object
from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus

log = logging.getLogger(__name__)

_PLANNED_FROM = ("phase", "execution", "sparkUi")
"""The status fields the planner reads."""


class SparkUiGateway(Protocol):
    """The Kubernetes calls of the UI (:mod:`snapshot_operator.exposing`)."""

    def list_spark_ui_objects(self, namespace: str, job_uid: str) -> list[dict[str, Any]]:
        """Returns the job's UI Services and Ingresses, each with its ``kind``."""
        ...

    def apply_spark_ui_object(self, manifest: dict[str, Any]) -> None:
        """Creates or updates a UI Service or Ingress."""
        ...

    def delete_spark_ui_object(self, namespace: str, kind: str, name: str) -> bool:
        """Deletes a UI Service or Ingress; False if it did not exist."""
        ...


def reconcile_spark_ui(
    gateway: SparkUiGateway,
    kube: KubernetesGateway,
    observation: Observation,
    status: Mapping[str, Any],
    version: str | None,
) -> str | None:
    """Plans and performs the job's UI objects; returns the job's version after its writes.

    Args:
        gateway: The UI's Kubernetes calls.
        kube: The Kubernetes API, for the status write.
        observation: What the job's decision was made on.
        status: The status as the decision's writes left it.
        version: The job's ``resourceVersion`` after those writes; None if unknown (then
            ``status.sparkUi`` waits for the next reconcile).

    Returns:
        The job's ``resourceVersion`` after the status write, ``version`` without one, None
        if the write lost the optimistic lock (the next reconcile plans again).
    """
    job = observation.job
    spec = observation.spec
    enabled = isinstance(spec, SnapshotJobSpec) and spec.spark_ui.enabled
    if not enabled and not status.get("sparkUi"):
        return version
    try:
        planned_from = SnapshotJobStatus.model_validate(
            {key: status[key] for key in _PLANNED_FROM if status.get(key) is not None}
        )
        listed = gateway.list_spark_ui_objects(job.namespace, job.uid)
        objects = [obj for obj in map(parse_ui_object, listed) if obj is not None]
        actions = plan_spark_ui(job, spec, planned_from, objects, deleting=observation.deleting)
        for action in actions:
            match action:
                case ApplySparkUi(kind=kind, target=target):
                    gateway.apply_spark_ui_object(build_spark_ui_object(kind, target))
                    log.info(
                        "Applied Spark UI namespace=%s name=%s kind=%s object=%s executionId=%s",
                        job.namespace,
                        job.name,
                        kind,
                        target.name,
                        target.execution_id,
                    )
                case DeleteSparkUi(kind=kind, name=name):
                    existed = gateway.delete_spark_ui_object(job.namespace, kind, name)
                    log.info(
                        "Deleted Spark UI namespace=%s name=%s kind=%s object=%s existed=%s",
                        job.namespace,
                        job.name,
                        kind,
                        name,
                        existed,
                    )
                case PatchStatus(patch=patch):
                    if version is None:
                        return None
                    version = kube.patch_status(job.namespace, job.name, version, patch)
    except StaleObservation:
        return None
    except Exception:
        # The job's own actions are done; its UI is planned again at the next reconcile.
        log.exception("Spark UI reconcile failed namespace=%s name=%s", job.namespace, job.name)
    return version
