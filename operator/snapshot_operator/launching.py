"""Creates a job's Pods: its driver (a refused create recorded) and its upgrade check.

Performs :class:`~snapshot_operator.reconcile.CreateDriverPod` and
:class:`~snapshot_operator.reconcile.CreateUpgradeCheckPod` through the Kubernetes gateway,
with the manifests built by :mod:`snapshot_operator.manifests` and
:mod:`snapshot_operator.upgrade_check_pod`. A driver the API server refuses is recorded in
``status.startFailure``, counted by :func:`snapshot_operator.reconcile.attempts.next_start_failure`.
"""

from __future__ import annotations

import logging
from typing import Any

from snapshot_operator.gateways import CreateFailed
from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.reconcile import CreateDriverPod, CreateUpgradeCheckPod, Observation
from snapshot_operator.reconcile.attempts import next_start_failure
from snapshot_operator.reconcile.exports import completed_export_identity
from snapshot_operator.services import Services, store_of
from snapshot_operator.upgrade_check_pod import build_upgrade_check_pod
from snapshotjob_contract import SnapshotJobSpec

log = logging.getLogger(__name__)


def create_driver(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CreateDriverPod,
) -> bool:
    """Creates the driver Pod (and its identity, without a configured service account).

    Returns:
        False if the API server refused it: the refusal was then written to the status, and
        the rest of the decision (the start's Events) must not be performed.
    """
    job = observation.job
    kube = services.kube
    settings = services.settings
    context = f"namespace={job.namespace} name={job.name}"
    spec = observation.spec
    if not isinstance(spec, SnapshotJobSpec):
        raise TypeError(f"Decision created a driver for an invalid spec {context}")
    pod = build_driver_pod(
        job,
        spec,
        action,
        **_installation(services),
        default_durable_storage=settings.durable_storage,
        initial_export=_completed_export(services, job.namespace, action.initial_snapshot_name),
    )
    try:
        if settings.driver_service_account is None:
            kube.ensure_driver_identity(job)
        created = kube.create_pod(pod)
    except CreateFailed as error:
        _start_failed(services, observation, version, status, action, error)
        return False
    if created:
        services.metrics.execution_started()
    log.info(
        "Created driver pod %s pod=%s executionId=%s new=%s",
        context,
        action.pod_name,
        action.execution_id,
        created,
    )
    return True


def _completed_export(
    services: Services, namespace: str, name: str | None
) -> tuple[str, int] | None:
    """``(job uid, snapshot id)`` of the completed SnapshotJobExport called ``name``, if any.

    The identity the new driver's restore checks (chosen by
    :func:`snapshot_operator.reconcile.exports.completed_export_identity`). A consistent list,
    not the watch cache: a stale identity would fail the restore. Only a start from an export
    pays for it.
    """
    if name is None:
        return None
    return completed_export_identity(services.kube.list_exports(namespace), name)


def _start_failed(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CreateDriverPod,
    error: CreateFailed,
) -> str:
    """Records a refused create in ``status.startFailure``, counting attempts per execution.

    Recorded instead of raised, for the same reason as a failed export copy: the decision can
    back off, report the failure once and give up only if it sees it. Raised, it would leave a
    STARTING execution without a Pod, which the next decision cannot tell from a lost Pod.
    """
    job = observation.job
    failure = next_start_failure(
        status.get("startFailure") or {},
        action.execution_id,
        f"{error.kind}/{error.name}",
        f"status={error.code} {error.message}",
        services.clock(),
    )
    patch = {"startFailure": failure.to_json()}
    version = services.kube.patch_status(job.namespace, job.name, version, patch)
    status.update(patch)
    log.warning(
        "Create failed namespace=%s name=%s object=%s executionId=%s attempts=%d error=%s",
        job.namespace,
        job.name,
        failure.object,
        action.execution_id,
        failure.attempts,
        failure.message,
    )
    return version


def create_upgrade_check(
    services: Services, observation: Observation, action: CreateUpgradeCheckPod
) -> None:
    """Creates an upgrade check's Pod; one the API server refuses is answered by the timeout.

    A refused Pod (a quota, say) is logged, not retried here: the decision creates it again
    while it is missing, and refuses the rollout once the check's timeout has passed.
    """
    job = observation.job
    spec = observation.spec
    if not isinstance(spec, SnapshotJobSpec):
        raise TypeError(
            f"Decision checked an invalid spec namespace={job.namespace} name={job.name}"
        )
    settings = services.settings
    pod = build_upgrade_check_pod(
        job,
        spec,
        action,
        **_installation(services),
        timeout_seconds=settings.decision.upgrade_check_timeout_seconds,
    )
    try:
        if settings.driver_service_account is None:
            services.kube.ensure_driver_identity(job)
        created = services.kube.create_pod(pod)
    except CreateFailed as error:
        log.warning(
            "Upgrade check pod not created namespace=%s name=%s pod=%s error=%s",
            job.namespace,
            job.name,
            action.pod_name,
            error,
        )
        return
    log.info(
        "Created upgrade check pod namespace=%s name=%s pod=%s specHash=%s maps=%s new=%s",
        job.namespace,
        job.name,
        action.pod_name,
        action.spec_hash,
        ",".join(action.map_names),
        created,
    )


def _installation(services: Services) -> dict[str, Any]:
    """What every Pod of a job takes from the installation: its store, the store's label,
    the drivers' ServiceAccount, the log format and the image pull Secrets."""
    settings = services.settings
    members, cluster = store_of(services, None)
    return {
        "store_address": ",".join(members) or None,
        "store_cluster_name": cluster,
        "store_label": settings.store_label,
        "service_account": settings.driver_service_account,
        "log_format": settings.log_format,
        "image_pull_secrets": settings.job_image_pull_secrets,
    }
