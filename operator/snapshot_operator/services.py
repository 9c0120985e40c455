"""What a reconcile is handed and hands back: the services, what it saw, and how it ended.

Shared by the reconcile's layers (:mod:`snapshot_operator.observing` reads,
:mod:`snapshot_operator.performing` performs, :mod:`snapshot_operator.executing` wires them)
and by the export reconcile; re-exported from :mod:`snapshot_operator.executing`, where the
handlers and ``__main__`` take them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from snapshot_operator.gateways import DurableGateway, KubernetesGateway, StoreGateway
from snapshot_operator.metrics import OperatorMetrics
from snapshot_operator.settings import OperatorSettings
from snapshot_operator.spark_ui_executing import SparkUiGateway
from snapshotjob_contract import SnapshotJobSpec

RETRY_STALE_SECONDS = 0.05
"""How soon to decide again after a write lost the optimistic lock: at once, the job moved."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Services:
    """What a reconcile needs besides the job: the gateways and settings, one per operator.

    Attributes:
        kube: The Kubernetes API.
        store: The snapshot store (Hazelcast).
        settings: The operator's settings.
        clock: The current time, timezone-aware (UTC).
        durable: The installation's durable storage, for disposing of exports' copies; None
            without one.
        metrics: The operator's metrics, which each reconcile reports to.
        spark_ui: The Spark UI's calls (:mod:`snapshot_operator.spark_ui_executing`); None
            to leave the UI objects alone.
    """

    kube: KubernetesGateway
    store: StoreGateway
    settings: OperatorSettings
    clock: Callable[[], datetime] = _utc_now
    durable: DurableGateway | None = None
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    spark_ui: SparkUiGateway | None = None


@dataclass(frozen=True)
class Seen:
    """What a reconcile of a job saw, from which the next one starts its reads early.

    Attributes:
        uid: The job's uid.
        driver_pod: The current driver Pod's name as the reconcile left the status (after
            its own writes), None if the status names none.
        members: The store members whose health it read.
        resource_version: The job's ``resourceVersion`` as the reconcile left it (its last
            write's, or the one it read if it wrote nothing); None if not known.
        driver_pod_version: The ``resourceVersion`` of the driver Pod named by
            ``driver_pod`` as the performed decision saw it; None if not known (no such Pod,
            or the reconcile created or deleted Pods, or named a new driver).
    """

    uid: str
    driver_pod: str | None
    members: tuple[str, ...]
    resource_version: str | None = None
    driver_pod_version: str | None = None


@dataclass(frozen=True)
class Outcome:
    """How a reconcile ended.

    Attributes:
        requeue_after: Decide again after this many seconds even if nothing changes.
        finalizer_removable: The job is being deleted and its cleanup is done.
        gone: The job no longer exists.
        seen: What the reconcile saw, for :func:`snapshot_operator.observing.read_early`
            before the next one; None if it read no job.
        resource_version: The job's ``resourceVersion`` after the writes performed (set by
            :func:`snapshot_operator.performing.perform`, then carried in ``seen``).
    """

    requeue_after: float
    finalizer_removable: bool = False
    gone: bool = False
    seen: Seen | None = None
    resource_version: str | None = None


def store_of(services: Services, spec: SnapshotJobSpec | None) -> tuple[tuple[str, ...], str]:
    """Returns the members and cluster name of the store a job uses."""
    settings = services.settings
    if spec is not None and spec.hazelcast.address is not None:
        members = tuple(part.strip() for part in spec.hazelcast.address.split(",") if part)
        return members, spec.hazelcast.cluster_name or settings.store_cluster_name
    return settings.store_members, settings.store_cluster_name
