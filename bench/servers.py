"""The snapshot store the benchmarks share: three Hazelcast members and a client to them.

Each benchmark starts its own servers (a benchmark must run on its own), and every one that
takes snapshots needs the same three members with the same heap and a connected client.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from spark_runtime.chunk_io import StoreAddress
from testbed.hazelcast import HazelcastCluster


@contextmanager
def snapshot_store(workdir: Path) -> Iterator[tuple[StoreAddress, HazelcastSnapshotStore]]:
    """Starts 3 members (1 GiB heap each) under ``workdir/hazelcast`` and connects a client.

    Yields:
        Where executors find the store, and the driver's store on that client.
    """
    (workdir / "hazelcast").mkdir()
    cluster = HazelcastCluster(workdir / "hazelcast", size=3, heap="1g")
    client = None
    try:
        cluster.start()
        members = [node.address for node in cluster.nodes]
        client = connect(members, cluster.cluster_name)
        yield StoreAddress(tuple(members), cluster.cluster_name), HazelcastSnapshotStore(client)
    finally:
        if client is not None:
            client.shutdown()
        cluster.stop()
