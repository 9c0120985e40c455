"""The operator's store operations: copy a suspended job's snapshot to an export (and that
export on to object storage), and destroy a deleted job's automatic snapshot maps.

Both go through the shared Hazelcast snapshot store (``snapshot_store.hazelcast``) rather
than a second client of the operator's own: the copy must be exactly as strict as the
driver's writes (single-key puts that fail on indeterminate state, the validation record
written last, the copy validated before it counts), and keeping one implementation of that is
the point. Clients are slow to connect, so one client per store is kept for the operator's
lifetime and reused from the worker threads the handlers run blocking calls in. Connecting is
locked per store, not globally: a job whose external store is unreachable waits out its own
connect timeout without holding back the other jobs' store operations (and the shared worker
threads they run in).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence

from hazelcast.client import HazelcastClient

from snapshot_operator.gateways import CopiedSnapshot
from snapshot_protocol import SnapshotStore
from snapshot_protocol.transfer import transfer_snapshot
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect

log = logging.getLogger(__name__)


class SnapshotMaps:
    """Copies and destroys snapshot maps on Hazelcast clusters, one cached client each."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._clients: dict[tuple[tuple[str, ...], str], HazelcastClient] = {}
        self._connecting: dict[tuple[tuple[str, ...], str], threading.Lock] = {}

    def _store(self, members: Sequence[str], cluster_name: str) -> HazelcastSnapshotStore:
        key = (tuple(members), cluster_name)
        with self._lock:
            client = self._clients.get(key)
            # A client that reached no member for its connect timeout has shut down for good.
            if client is not None and not client.lifecycle_service.is_running():
                del self._clients[key]
                client = None
            connecting = self._connecting.setdefault(key, threading.Lock())
        if client is None:
            with connecting:
                with self._lock:
                    client = self._clients.get(key)
                if client is None or not client.lifecycle_service.is_running():
                    log.info(
                        "Connecting to the snapshot store members=%s cluster=%s",
                        ",".join(members),
                        cluster_name,
                    )
                    client = connect(members, cluster_name, cluster_connect_timeout=30.0)
                    with self._lock:
                        self._clients[key] = client
        return HazelcastSnapshotStore(client)

    def copy(
        self,
        members: Sequence[str],
        cluster_name: str,
        *,
        source_map: str,
        target_map: str,
        snapshot_id: int,
    ) -> CopiedSnapshot:
        """Copies a snapshot to another map and validates the copy.

        Raises:
            SnapshotCorrupted: If the source or the copy fails validation.
            SnapshotStoreError: If the store failed (including indeterminate puts).
        """
        record = self._store(members, cluster_name).copy_snapshot(
            source_map, target_map, snapshot_id
        )
        return CopiedSnapshot(snapshot_id=record.snapshot_id, num_bytes=record.num_bytes)

    def transfer(
        self,
        members: Sequence[str],
        cluster_name: str,
        *,
        source_map: str,
        snapshot_id: int,
        target: SnapshotStore,
        target_map: str,
    ) -> CopiedSnapshot:
        """Copies a snapshot out of the store into another store (object storage), verified.

        Raises:
            SnapshotCorrupted: If the source or the copy fails validation.
            SnapshotStoreError: If either store failed.
        """
        record = transfer_snapshot(
            self._store(members, cluster_name), source_map, target, target_map, snapshot_id
        )
        return CopiedSnapshot(snapshot_id=record.snapshot_id, num_bytes=record.num_bytes)

    def destroy(self, members: Sequence[str], cluster_name: str, map_names: Sequence[str]) -> None:
        """Destroys maps with their data; destroying a map that does not exist is a no-op.

        Raises:
            SnapshotStoreError: If the store failed.
        """
        store = self._store(members, cluster_name)
        for name in map_names:
            store.destroy(name)

    def close(self) -> None:
        """Shuts every client down (at operator exit)."""
        with self._lock:
            clients = list(self._clients.values())
            self._clients.clear()
        for client in clients:
            client.shutdown()
