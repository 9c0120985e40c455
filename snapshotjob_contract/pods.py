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
LABEL_STORE = f"{GROUP}/store"
"""On the driver and executor Pods of a job that uses the installation's snapshot store: that
store's name (the chart's ``sj.store.label``). The store's NetworkPolicy admits the members'
port only from Pods with it, so no other Pod in the cluster reaches the members."""
MANAGED_BY = "snapshotjob-operator"

EXECUTOR_CONTAINER = "executor"
"""The executor container's name in the template (Spark completes the first container)."""

EXECUTOR_POD_TEMPLATE_CONF = "spark.kubernetes.executor.podTemplateFile"
"""The Spark setting naming the template file; the driver sets it unless the spec's conf does."""

EXECUTOR_START_ARG = "executor"
"""The container argument Spark gives executor Pods; the image has a launcher of that name."""


SCRATCH_VOLUME = "sj-tmp"
"""The driver's and executors' writable ``/tmp`` (an emptyDir): their root file system is
read-only, and the JVM (its performance data), Python and Spark (the driver's scratch files,
the executor pod template the driver writes, the jars and files an executor fetches into its
working directory, which is this one) need one writable directory. Spark gives executors
their local directories as volumes of its own (``spark-local-dir-*``)."""

SCRATCH_PATH = "/tmp"


def scratch_volume() -> dict[str, Any]:
    """Returns the :data:`SCRATCH_VOLUME` of a driver or executor Pod, a fresh copy."""
    return {"name": SCRATCH_VOLUME, "emptyDir": {}}


def scratch_mount() -> dict[str, Any]:
    """Returns the main container's mount of :data:`SCRATCH_VOLUME` at :data:`SCRATCH_PATH`."""
    return {"name": SCRATCH_VOLUME, "mountPath": SCRATCH_PATH}


def restricted_container_security_context() -> dict[str, Any]:
    """Returns the security context of every driver and executor container, a fresh copy.

    The image runs as uid 10001, so ``runAsNonRoot`` holds without naming a user. The root
    file system is read-only: what a compromised pipeline could change is its scratch
    directory (:data:`SCRATCH_PATH`), never the image's code.
    """
    return {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
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
            "volumes": [scratch_volume()],
            "containers": [
                {
                    "name": EXECUTOR_CONTAINER,
                    "securityContext": restricted_container_security_context(),
                    "volumeMounts": [scratch_mount()],
                    # Spark fetches the job's jars and files into the executor's working
                    # directory, which the read-only image cannot hold.
                    "workingDir": SCRATCH_PATH,
                }
            ],
        },
    }
