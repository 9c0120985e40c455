"""The store gateway over Hazelcast: the health endpoint and the snapshot maps.

It joins :mod:`snapshot_operator.store_health` (HTTP, a fresh read every time, over
kept-alive connections) and
:class:`snapshot_operator.snapshot_maps.SnapshotMaps` (the shared Hazelcast snapshot store, one
cached client per store) behind :class:`snapshot_operator.gateways.StoreGateway`, so that
the executor and the store restart step receive the store as one injected object. Tested
against a real Hazelcast cluster by ``tests/integration/test_operator.py`` and
``tests/integration/test_store_rollout.py``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from snapshot_operator import store_health
from snapshot_operator.gateways import CopiedSnapshot, StoreOperationFailed
from snapshot_operator.snapshot_maps import SnapshotMaps
from snapshot_protocol import SnapshotStoreError, SnapshotUnusable


class HazelcastStoreGateway:
    """:class:`snapshot_operator.gateways.StoreGateway` over Hazelcast.

    Args:
        maps: The snapshot map operations; a new :class:`SnapshotMaps` if not given.
    """

    def __init__(self, maps: SnapshotMaps | None = None) -> None:
        self._maps = SnapshotMaps() if maps is None else maps
        self._health = store_health.StoreHealthReader()

    def read_health(self, members: Sequence[str], timeout: float) -> dict[str, Any] | None:
        """See :meth:`snapshot_operator.gateways.StoreGateway.read_health`."""
        return self._health.read_health(members, timeout)

    def copy_snapshot(
        self,
        members: Sequence[str],
        cluster_name: str,
        *,
        source_map: str,
        target_map: str,
        snapshot_id: int,
    ) -> CopiedSnapshot:
        """See :meth:`snapshot_operator.gateways.StoreGateway.copy_snapshot`."""
        try:
            return self._maps.copy(
                members,
                cluster_name,
                source_map=source_map,
                target_map=target_map,
                snapshot_id=snapshot_id,
            )
        except (SnapshotStoreError, SnapshotUnusable) as error:
            raise StoreOperationFailed(type(error).__name__, str(error)) from error

    def destroy_maps(
        self, members: Sequence[str], cluster_name: str, map_names: Sequence[str]
    ) -> None:
        """See :meth:`snapshot_operator.gateways.StoreGateway.destroy_maps`."""
        try:
            self._maps.destroy(members, cluster_name, map_names)
        except SnapshotStoreError as error:
            raise StoreOperationFailed(type(error).__name__, str(error)) from error

    def close(self) -> None:
        """Shuts the store clients and the health connections down (at operator exit)."""
        self._health.close()
        self._maps.close()
