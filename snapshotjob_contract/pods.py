"""What the driver and executor Pods share: one security context, and the executor template.

The operator builds the driver Pod (``snapshot_operator.manifests``); Spark's Kubernetes
scheduler, inside the driver, builds the executor Pods from an executor pod template that the
driver writes at start (``spark_runtime.kube_mode``). Both take the restricted container
security context from here, so a driver and its executors can never run under different
rules, and a namespace enforcing the ``restricted`` Pod Security Standard admits both.
"""

from __future__ import annotations

from typing import Any

from snapshotjob_contract.resource import GROUP

LABEL_JOB = f"{GROUP}/job"
"""Names the SnapshotJob on every object the operator creates for it, executors included."""
LABEL_JOB_UID = f"{GROUP}/job-uid"
"""The SnapshotJob's uid: the operator lists a job's driver Pods by it, and a job's executors
spread over nodes by it."""
LABEL_COMPONENT = "app.kubernetes.io/component"
"""``driver`` or ``executor``."""
LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
MANAGED_BY = "snapshotjob-operator"

EXECUTOR_CONTAINER = "executor"
"""The executor container's name in the template (Spark completes the first container)."""

EXECUTOR_POD_TEMPLATE_CONF = "spark.kubernetes.executor.podTemplateFile"
"""The Spark setting naming the template file; the driver sets it unless the spec's conf does."""

EXECUTOR_START_ARG = "executor"
"""The container argument Spark gives executor Pods; the image has a launcher of that name."""


def restricted_container_security_context() -> dict[str, Any]:
    """Returns the security context of every driver and executor container, a fresh copy.

    The image runs as uid 10001, so ``runAsNonRoot`` holds without naming a user.
    """
    return {
        "runAsNonRoot": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }


def executor_pod_template() -> dict[str, Any]:
    """Returns the Pod that Spark completes into each executor Pod.

    Spark adds the image, command arguments, environment, resources, labels and the owner
    reference (the driver Pod); the template adds what Spark has no setting for. Executors
    never call the API server, so they get no service account token (Spark would otherwise
    give them the driver's, which may create Pods).
    """
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "spec": {
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            # A job's executors on as many nodes as there are: one lost node then takes only
            # a share of them. Soft, so a small cluster still runs them all; matchLabelKeys
            # narrows the selector to this job's own executors (its uid label).
            "topologySpreadConstraints": [
                {
                    "maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname",
                    "whenUnsatisfiable": "ScheduleAnyway",
                    "labelSelector": {"matchLabels": {LABEL_COMPONENT: "executor"}},
                    "matchLabelKeys": [LABEL_JOB_UID],
                }
            ],
            "securityContext": {
                "runAsNonRoot": True,
                "seccompProfile": {"type": "RuntimeDefault"},
            },
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "securityContext": restricted_container_security_context(),
                }
            ],
        },
    }
