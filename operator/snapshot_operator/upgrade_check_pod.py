"""The upgrade check's Pod: ``snapshot validate --pipeline`` in the changed spec's image.

It is built as the changed spec's driver Pod would be (the same image, pod templates,
environment from Secrets, ServiceAccount, store label and resources), so the pipeline is
defined as its driver would define it and reaches the store the same way; only the command
differs, and the Pod carries no execution id: it is no driver, and nothing it does touches
the execution record. Spark runs inside it in local mode (``validate`` starts no executors).
Its answer is its exit code (0 compatible, 78 incompatible, naming both sides), and the last
lines it printed are its termination message (``FallbackToLogsOnError``). It reads no chunk:
whether the restore point is intact is the restore's to check, and a running job with a short
interval rewrites its maps while the check starts, so the check takes the newest validation
record of the job's maps when it looks (every snapshot since the last rollout has the running
pipeline's shape).
"""

from __future__ import annotations

import json
from typing import Any

from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.reconcile.actions import CreateDriverPod, CreateUpgradeCheckPod
from snapshot_operator.reconcile.observation import JobRef
from snapshot_operator.reconcile.observe import (
    CHECK_CONTAINER,
    DRIVER_CONTAINER,
    LABEL_COMPONENT,
    LABEL_EXECUTION_ID,
    LABEL_SPEC_HASH,
    UPGRADE_CHECK_COMPONENT,
)
from snapshotjob_contract import SnapshotJobSpec
from snapshotjob_contract.observability import LogFormat

CHECK_COMMAND = ("python", "-m", "spark_runtime", "snapshot", "validate")
"""The check's command; its arguments name the job's maps, the store and the pipeline, and it
reads only the newest validation record there (``--compatibility-only``)."""
DEFAULT_CLUSTER_NAME = "dev"
"""Hazelcast's default cluster name, which the driver uses when none is configured."""


def build_upgrade_check_pod(
    job: JobRef,
    spec: SnapshotJobSpec,
    action: CreateUpgradeCheckPod,
    *,
    store_address: str | None,
    store_cluster_name: str | None,
    store_label: str | None,
    service_account: str | None,
    log_format: LogFormat,
    image_pull_secrets: tuple[str, ...] | list[str],
    timeout_seconds: int,
) -> dict[str, Any]:
    """Returns the Pod that checks ``spec``'s pipeline against the restore point.

    Args:
        job: The SnapshotJob.
        spec: The changed spec, whose image and pipeline are checked.
        action: The decision that asked for the check.
        store_address: Members of the installation's Hazelcast cluster, used when the spec
            names no external cluster.
        store_cluster_name: The installation's cluster name.
        store_label: The installation store's label value (its NetworkPolicy admits it).
        service_account: The drivers' precreated ServiceAccount; None for the job's own.
        log_format: The operator's log format.
        image_pull_secrets: The installation's image pull Secrets.
        timeout_seconds: The Pod's ``activeDeadlineSeconds``: the kubelet ends a check that
            runs longer, and the decision refuses a check that does not answer in time.
    """
    pod = build_driver_pod(
        job,
        spec,
        CreateDriverPod(action.pod_name, f"check-{action.spec_hash}", 0, None),
        store_address=store_address,
        store_cluster_name=store_cluster_name,
        store_label=store_label,
        service_account=service_account,
        log_format=log_format,
        image_pull_secrets=image_pull_secrets,
    )
    labels = pod["metadata"]["labels"]
    del labels[LABEL_EXECUTION_ID]
    labels[LABEL_COMPONENT] = UPGRADE_CHECK_COMPONENT
    labels[LABEL_SPEC_HASH] = action.spec_hash
    address = spec.hazelcast.address or store_address or ""
    cluster = spec.hazelcast.cluster_name or store_cluster_name or DEFAULT_CLUSTER_NAME
    # The templates' sidecars stay as they are.
    container = next(c for c in pod["spec"]["containers"] if c["name"] == DRIVER_CONTAINER)
    container["name"] = CHECK_CONTAINER
    container["command"] = list(CHECK_COMMAND)
    container["args"] = [
        f"--map={','.join(action.map_names)}",
        "--compatibility-only",
        f"--hazelcast={address}",
        f"--cluster-name={cluster}",
        f"--pipeline={spec.pipeline.module}",
        # Kubernetes expands $(VAR) here as the driver's own arguments are expanded.
        f"--args-json={json.dumps(spec.pipeline.args, sort_keys=True)}",
    ]
    container.pop("ports", None)
    pod["spec"]["activeDeadlineSeconds"] = timeout_seconds
    return pod
