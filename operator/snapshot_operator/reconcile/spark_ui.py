"""The Spark UI's Service and Ingress a job should have now, and the actions to get there.

A pure planner beside :func:`~snapshot_operator.reconcile.decide`, level-based as it is: from
the job (its spec, its status as the decision left it) and the UI objects that exist, it
returns what to apply, what to delete and what ``status.sparkUi`` must say. The UI objects
exist only while an execution may run (:data:`~snapshot_operator.reconcile.phases.LIVE_PHASES`)
and ``spec.sparkUi.enabled``; their Service selects that execution's driver Pod alone, by its
execution label, so a restart's new driver is selected again and an old one never is.

Each object carries the fingerprint of what it was built from (the execution and the spec's
settings): an object whose fingerprint differs is applied again, one that matches is left
alone, so a settled job writes nothing. ``status.sparkUi`` is written after the objects, and
removed after they are deleted: it names a UI only once its Service exists.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snapshot_operator.reconcile.actions import PatchStatus
from snapshot_operator.reconcile.observation import InvalidSpec, JobRef
from snapshot_operator.reconcile.phases import LIVE_PHASES
from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus
from snapshotjob_contract.pods import LABEL_JOB_UID
from snapshotjob_contract.resource import GROUP
from snapshotjob_contract.spark_ui import SparkUiSpec, SparkUiStatus, host_of

UI_COMPONENT = "spark-ui"
"""``app.kubernetes.io/component`` of the UI's Service and Ingress, by which they are listed."""
ANNOTATION_FINGERPRINT = f"{GROUP}/spark-ui-fingerprint"
"""The fingerprint of the execution and settings an object was built from."""
SERVICE = "Service"
INGRESS = "Ingress"

_MAX_SERVICE_NAME = 63


def spark_ui_service_name(job_name: str) -> str:
    """Returns the name of a job's UI Service and Ingress: ``<job>-ui`` when that is a
    DNS-1035 label (a Service's name must be one), else a digest keeps it unique."""
    name = f"{job_name}-ui"
    if len(name) <= _MAX_SERVICE_NAME and name[0].isalpha() and "." not in name:
        return name
    digest = hashlib.sha256(job_name.encode()).hexdigest()[:8]
    keep = job_name.replace(".", "-")[: _MAX_SERVICE_NAME - len("ui--") - len(digest)]
    return f"ui-{keep.strip('-')}-{digest}"


@dataclass(frozen=True)
class SparkUiTarget:
    """The UI objects one execution's driver should have.

    Attributes:
        job: The SnapshotJob.
        execution_id: The execution whose driver Pod the Service selects.
        settings: ``spec.sparkUi``.
    """

    job: JobRef
    execution_id: str
    settings: SparkUiSpec

    @property
    def name(self) -> str:
        """The Service's and the Ingress's name."""
        return spark_ui_service_name(self.job.name)

    @property
    def fingerprint(self) -> str:
        """A digest of everything the objects are built from."""
        built_from = {
            "execution": self.execution_id,
            "settings": self.settings.model_dump(mode="json"),
        }
        canonical = json.dumps(built_from, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]

    @property
    def ingress_host(self) -> str | None:
        """The Ingress's host, the placeholders filled in; None without an Ingress."""
        ingress = self.settings.ingress
        if ingress is None:
            return None
        return host_of(ingress.host, self.job.name, self.job.namespace)

    def status(self) -> SparkUiStatus:
        """Returns ``status.sparkUi`` once the objects exist."""
        url = f"http://{self.name}.{self.job.namespace}.svc:{self.settings.service_port}"
        host = self.ingress_host
        ingress_url = None
        if host is not None and self.settings.ingress is not None:
            secured = any(
                not tls.hosts
                or host in (host_of(h, self.job.name, self.job.namespace) for h in tls.hosts)
                for tls in self.settings.ingress.tls
            )
            ingress_url = f"{'https' if secured else 'http'}://{host}/"
        return SparkUiStatus(
            service_name=self.name,
            url=url,
            execution_id=self.execution_id,
            ingress_url=ingress_url,
        )


@dataclass(frozen=True)
class UiObject:
    """A UI Service or Ingress of the job that exists.

    Attributes:
        kind: ``Service`` or ``Ingress``.
        name: Its name.
        fingerprint: What it was built from; None if it carries none.
    """

    kind: str
    name: str
    fingerprint: str | None


@dataclass(frozen=True)
class ApplySparkUi:
    """Create or update the UI Service, or the Ingress, of the target.

    Attributes:
        kind: ``Service`` or ``Ingress``.
        target: What it is built from.
    """

    kind: str
    target: SparkUiTarget


@dataclass(frozen=True)
class DeleteSparkUi:
    """Delete a UI Service or Ingress of the job; one already gone counts as deleted.

    Attributes:
        kind: ``Service`` or ``Ingress``.
        name: Its name.
    """

    kind: str
    name: str


SparkUiAction = ApplySparkUi | DeleteSparkUi | PatchStatus
"""Every kind of action of the UI's planner."""


def parse_ui_object(raw: Mapping[str, Any]) -> UiObject | None:
    """Returns a listed Service or Ingress as the planner sees it; None if it has no kind."""
    kind = raw.get("kind")
    metadata = raw.get("metadata") or {}
    if kind not in (SERVICE, INGRESS) or not metadata.get("name"):
        return None
    fingerprint = (metadata.get("annotations") or {}).get(ANNOTATION_FINGERPRINT)
    return UiObject(str(kind), str(metadata["name"]), fingerprint)


def spark_ui_target(
    job: JobRef,
    spec: SnapshotJobSpec,
    status: SnapshotJobStatus,
    *,
    deleting: bool = False,
) -> SparkUiTarget | None:
    """Returns the UI objects the job should have now; None for none."""
    execution = status.execution
    if deleting or not spec.spark_ui.enabled or execution is None:
        return None
    if status.phase not in LIVE_PHASES:
        return None
    return SparkUiTarget(job, execution.id, spec.spark_ui)


def plan_spark_ui(
    job: JobRef,
    spec: SnapshotJobSpec | InvalidSpec,
    status: SnapshotJobStatus,
    objects: Sequence[UiObject],
    *,
    deleting: bool = False,
) -> tuple[SparkUiAction, ...]:
    """Returns the actions that give the job the UI objects it should have, in order.

    Deletions come first, then the objects to apply, then the status: ``status.sparkUi``
    names the Service only after it was applied, and is removed only after the objects are
    deleted. A spec the operator cannot apply changes nothing, as for the execution.

    Args:
        job: The SnapshotJob.
        spec: Its spec, or why it is invalid.
        status: Its status as the job's decision left it.
        objects: The job's UI objects that exist (listed by the job's uid and component).
        deleting: Whether the job is being deleted.
    """
    if isinstance(spec, InvalidSpec) and not deleting:
        return ()
    target = (
        spark_ui_target(job, spec, status, deleting=deleting)
        if isinstance(spec, SnapshotJobSpec)
        else None
    )
    wanted: dict[tuple[str, str], str] = {}
    if target is not None:
        wanted[(SERVICE, target.name)] = target.fingerprint
        if target.settings.ingress is not None:
            wanted[(INGRESS, target.name)] = target.fingerprint
    actions: list[SparkUiAction] = [
        DeleteSparkUi(obj.kind, obj.name) for obj in objects if (obj.kind, obj.name) not in wanted
    ]
    for (kind, name), fingerprint in wanted.items():
        if UiObject(kind, name, fingerprint) not in objects and target is not None:
            actions.append(ApplySparkUi(kind, target))
    reported = None if target is None else target.status()
    if reported != status.spark_ui:
        actions.append(PatchStatus({"sparkUi": None if reported is None else reported.to_json()}))
    return tuple(actions)


def ui_labels(job: JobRef) -> dict[str, str]:
    """The labels the job's UI objects are listed by."""
    return {LABEL_JOB_UID: job.uid, "app.kubernetes.io/component": UI_COMPONENT}
