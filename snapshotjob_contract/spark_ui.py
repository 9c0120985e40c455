"""``SnapshotJob.spec.sparkUi`` and ``status.sparkUi``: the running driver's Spark web UI.

As the Spark operator's ``sparkUIOptions``: on request, the operator puts a Service (and
optionally an Ingress) in front of the current execution's driver Pod while it runs, and removes
them when the execution ends. The driver serves the UI on :data:`SPARK_UI_PORT`, its container
port named :data:`SPARK_UI_PORT_NAME`; both sides take these from here.
"""

from __future__ import annotations

import enum
from typing import Annotated, Any

from pydantic import ConfigDict, Field

from snapshotjob_contract.base import DNS_LABEL_MAX_LENGTH, DNS_LABEL_PATTERN, ApiModel

SPARK_UI_PORT = 4040
"""The port the driver serves its UI on (``spark.ui.port``, Spark's default)."""
SPARK_UI_PORT_NAME = "spark-ui"
"""The driver container's port of the UI, which the Service targets by name."""

HOST_TEMPLATE_PATTERN = (
    r"^([a-z0-9-]|\{name\}|\{namespace\})+(\.([a-z0-9-]|\{name\}|\{namespace\})+)*$"
)
"""A DNS name in lower case, in which ``{name}`` and ``{namespace}`` stand for the job's."""

HostTemplate = Annotated[
    str,
    Field(
        min_length=1,
        max_length=253,
        pattern=HOST_TEMPLATE_PATTERN,
        description="A DNS name; {name} and {namespace} stand for the job's.",
    ),
]
"""An Ingress host as the spec gives it, placeholders and all."""


def host_of(template: str, name: str, namespace: str) -> str:
    """Returns an Ingress host with the job's name and namespace in place of the placeholders.

    A job name may hold dots (the API server admits DNS subdomains): each stays a dot.
    """
    return template.replace("{name}", name).replace("{namespace}", namespace)


class ServiceType(enum.StrEnum):
    """The UI Service's type, as any Service's."""

    CLUSTER_IP = "ClusterIP"
    NODE_PORT = "NodePort"
    LOAD_BALANCER = "LoadBalancer"


class IngressTlsSpec(ApiModel):
    """TLS of the Ingress, as networking.k8s.io/v1 IngressTLS."""

    model_config = ConfigDict(extra="forbid")

    hosts: list[HostTemplate] = Field(default_factory=list)
    """Hosts the certificate covers; `{name}` and `{namespace}` as in `host`. Empty: the
    Ingress's host."""
    secret_name: str = Field(max_length=253, pattern=r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$")
    """The Secret in the job's namespace holding the certificate (`tls.crt`, `tls.key`)."""


class SparkUiIngressSpec(ApiModel):
    """An Ingress (networking.k8s.io/v1) to the UI Service, at the root path of one host."""

    model_config = ConfigDict(extra="forbid")

    host: HostTemplate
    """The host, e.g. `{name}.{namespace}.spark.example.com` (`{name}` and `{namespace}` are
    the job's, as the Spark operator's ingressUrlFormat). The UI is served at `/`."""
    ingress_class_name: str | None = Field(
        default=None, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN
    )
    """The IngressClass; the cluster's default class when unset."""
    annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations of the Ingress, e.g. for the controller or cert-manager."""
    tls: list[IngressTlsSpec] = Field(default_factory=list)
    """TLS settings; plain HTTP when empty."""


class SparkUiSpec(ApiModel):
    """The driver's Spark web UI, served through a Service while an execution runs."""

    model_config = ConfigDict(extra="forbid")

    enabled: bool = False
    """Serve the UI: the driver runs it on port 4040 (named `spark-ui`), and the operator
    creates the Service `<job>-ui` (and the Ingress) while an execution runs. A change rolls
    out as any other (upgradeMode), since the driver starts its UI or not."""
    service_type: ServiceType = ServiceType.CLUSTER_IP
    """The Service's type: ClusterIP, NodePort or LoadBalancer."""
    service_port: int = Field(default=SPARK_UI_PORT, ge=1, le=65535)
    """The Service's port."""
    service_annotations: dict[str, str] = Field(default_factory=dict)
    """Annotations of the Service, e.g. for a load balancer."""
    service_labels: dict[str, str] = Field(default_factory=dict)
    """Labels of the Service, beside the operator's own."""
    ingress: SparkUiIngressSpec | None = None
    """An Ingress to the Service; none when unset."""


def driver_ui_conf(settings: SparkUiSpec) -> dict[str, str]:
    """Returns the Spark settings that make the driver serve its UI; none when it must not.

    The operator pins them over ``spec.spark.conf`` in the driver's ``--conf`` arguments
    (every Spark session of the runtime starts with its UI off otherwise): the Service
    targets this port.
    """
    if not settings.enabled:
        return {}
    return {"spark.ui.enabled": "true", "spark.ui.port": str(SPARK_UI_PORT)}


def driver_ui_ports(settings: SparkUiSpec) -> list[dict[str, Any]]:
    """Returns the driver container's UI port, named for the Service; none without a UI."""
    if not settings.enabled:
        return []
    return [{"name": SPARK_UI_PORT_NAME, "containerPort": SPARK_UI_PORT, "protocol": "TCP"}]


class SparkUiStatus(ApiModel):
    """Where the UI of the running execution is; absent while no UI Service exists."""

    # As every status model: unknown fields are ignored, so newer writers do not break readers.
    model_config = ConfigDict(extra="ignore")

    service_name: str = Field(min_length=1)
    """The Service in the job's namespace, e.g. for `kubectl port-forward svc/<name>`."""
    url: str = Field(min_length=1)
    """The UI's address inside the cluster, `http://<service>.<namespace>.svc:<port>`."""
    execution_id: str = Field(min_length=1)
    """The execution whose driver the Service selects."""
    ingress_url: str | None = None
    """The UI's address through the Ingress; absent without one."""
