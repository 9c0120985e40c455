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
import sys
from collections.abc import Sequence
from typing import Any

import kopf
from kubernetes import client, config

from snapshot_operator import handlers
from snapshot_operator.executing import Runtime
from snapshot_operator.settings import parse_settings
from snapshot_operator.snapshot_maps import SnapshotMaps

log = logging.getLogger("snapshot_operator")

_PRIORITY_RANGE = 2**31 - 1


def _load_kube_config() -> None:
    loader: Any = config  # untyped functions of the client library
    try:
        loader.load_incluster_config()
    except config.ConfigException:
        loader.load_kube_config()


def main(argv: Sequence[str] | None = None) -> None:
    """Runs the operator until SIGTERM or SIGINT."""
    settings = parse_settings(argv)
    logging.basicConfig(
        level=settings.log_level,
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    _load_kube_config()
    maps = SnapshotMaps()
    runtime = Runtime(api=client.ApiClient(), settings=settings, maps=maps)
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
            memo=kopf.Memo(runtime=runtime, wakers={}),
        )
    finally:
        maps.close()


if __name__ == "__main__":
    main()
