"""Builds the Spark UI's Service and Ingress: pure builders.

The planner (:mod:`snapshot_operator.reconcile.spark_ui`) says which objects a job needs;
this module says what they are. The driver's part (its Spark settings and container port,
which the Service targets by name) is in :mod:`snapshotjob_contract.spark_ui`.
"""

from __future__ import annotations

from typing import Any

from snapshot_operator.manifests import owner_reference
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshot_operator.reconcile.spark_ui import (
    ANNOTATION_FINGERPRINT,
    INGRESS,
    SERVICE,
    SparkUiTarget,
    ui_labels,
)
from snapshotjob_contract.pods import LABEL_JOB, LABEL_JOB_UID, LABEL_MANAGED_BY, MANAGED_BY
from snapshotjob_contract.spark_ui import SPARK_UI_PORT_NAME, host_of


def _metadata(
    target: SparkUiTarget, labels: dict[str, str], annotations: dict[str, str]
) -> dict[str, Any]:
    job = target.job
    return {
        "name": target.name,
        "namespace": job.namespace,
        # The operator's labels and annotation last: it lists the objects by them.
        "labels": {
            **labels,
            LABEL_JOB: job.name,
            LABEL_MANAGED_BY: MANAGED_BY,
            **ui_labels(job),
        },
        "annotations": {**annotations, ANNOTATION_FINGERPRINT: target.fingerprint},
        # Owned by the job: the garbage collector removes them with it, whatever happens.
        "ownerReferences": [owner_reference(job)],
    }


def build_spark_ui_service(target: SparkUiTarget) -> dict[str, Any]:
    """Returns the Service in front of the current execution's driver Pod (and it alone)."""
    settings = target.settings
    return {
        "apiVersion": "v1",
        "kind": SERVICE,
        "metadata": _metadata(target, settings.service_labels, settings.service_annotations),
        "spec": {
            "type": settings.service_type.value,
            "selector": {
                LABEL_JOB_UID: target.job.uid,
                LABEL_EXECUTION_ID: target.execution_id,
            },
            "ports": [
                {
                    "name": SPARK_UI_PORT_NAME,
                    "port": settings.service_port,
                    "targetPort": SPARK_UI_PORT_NAME,
                    "protocol": "TCP",
                }
            ],
        },
    }


def build_spark_ui_ingress(target: SparkUiTarget) -> dict[str, Any]:
    """Returns the Ingress (networking.k8s.io/v1) to the UI Service, at ``/`` of its host.

    Raises:
        ValueError: The target has no Ingress.
    """
    ingress = target.settings.ingress
    host = target.ingress_host
    if ingress is None or host is None:
        raise ValueError(f"spec.sparkUi has no ingress job={target.job.name}")
    job = target.job
    spec: dict[str, Any] = {
        "rules": [
            {
                "host": host,
                "http": {
                    "paths": [
                        {
                            "path": "/",
                            "pathType": "Prefix",
                            "backend": {
                                "service": {
                                    "name": target.name,
                                    "port": {"name": SPARK_UI_PORT_NAME},
                                }
                            },
                        }
                    ]
                },
            }
        ]
    }
    if ingress.ingress_class_name is not None:
        spec["ingressClassName"] = ingress.ingress_class_name
    if ingress.tls:
        spec["tls"] = [
            {
                "hosts": [host_of(h, job.name, job.namespace) for h in tls.hosts] or [host],
                "secretName": tls.secret_name,
            }
            for tls in ingress.tls
        ]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": INGRESS,
        "metadata": _metadata(target, {}, ingress.annotations),
        "spec": spec,
    }


def build_spark_ui_object(kind: str, target: SparkUiTarget) -> dict[str, Any]:
    """Returns the UI object of that kind (``Service`` or ``Ingress``)."""
    return build_spark_ui_service(target) if kind == SERVICE else build_spark_ui_ingress(target)
