"""``python -m snapshot_operator``: runs the SnapshotJob operator.

Settings come from flags with ``SJ_OPERATOR_*`` environment fallbacks
(:mod:`snapshot_operator.settings`). Several replicas may run: kopf peering lets only the one
with the highest priority work. Replicas of a Deployment cannot be told apart by the chart,
so a replica without ``--priority`` draws a random one: kopf pauses every replica when the
highest priority is shared.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Sequence

import kopf

from snapshot_operator import handlers
from snapshot_operator.connecting import connect
from snapshot_operator.durable_gateway import S3DurableGateway
from snapshot_operator.executing import Services
from snapshot_operator.kubernetes_gateway import ClientKubernetesGateway
from snapshot_operator.metrics import OperatorMetrics
from snapshot_operator.settings import parse_settings
from snapshot_operator.snapshot_maps import SnapshotMaps
from snapshot_operator.store_gateway import HazelcastStoreGateway
from snapshotjob_contract.logs import configure_logging

log = logging.getLogger("snapshot_operator")

_PRIORITY_RANGE = 2**31 - 1


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the operator until SIGTERM or SIGINT."""
    settings = parse_settings(argv)
    configure_logging(settings.log_level, settings.log_format)
    metrics = OperatorMetrics()
    if settings.metrics_port is not None:
        metrics.serve(settings.metrics_port)
    kube = ClientKubernetesGateway(
        connect(), instance=settings.instance, on_api_error=metrics.api_error
    )
    maps = SnapshotMaps()
    store = HazelcastStoreGateway(maps)
    durable = (
        S3DurableGateway(settings.durable_storage, maps)
        if settings.durable_storage is not None
        else None
    )
    services = Services(
        kube=kube, store=store, settings=settings, durable=durable, metrics=metrics, spark_ui=kube
    )
    priority = settings.priority
    if priority is None:
        priority = 1 + secrets.randbelow(_PRIORITY_RANGE)
    log.info(
        "Starting operator namespaces=%s allNamespaces=%s storeMembers=%s priority=%s "
        "standalone=%s handlers=%s",
        ",".join(settings.namespaces) or "-",
        settings.all_namespaces,
        settings.store_address or "-",
        priority,
        settings.standalone,
        handlers.__name__,
    )
    try:
        kopf.run(
            clusterwide=settings.all_namespaces,
            namespaces=settings.namespaces,
            standalone=settings.standalone,
            priority=priority,
            # A peering name makes peering mandatory in kopf: replicas then wait for the
            # KopfPeering object instead of silently working side by side.
            peering_name=None if settings.standalone else settings.peering_name,
            liveness_endpoint=settings.liveness_endpoint,
            memo=kopf.Memo(services=services, wakers={}, watched={}, drivers={}, job_uids={}),
        )
    finally:
        store.close()
        metrics.close()


if __name__ == "__main__":
    main()
