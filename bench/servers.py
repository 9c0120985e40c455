"""The snapshot store the benchmarks share: three Hazelcast members and a client to them.

Each benchmark starts its own servers (a benchmark must run on its own), and every one that
takes snapshots needs the same three members with the same heap and a connected client; the
durable-storage benchmarks also need an S3 server with a bucket.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshot_store.s3 import connect_s3
from spark_runtime.chunk_io import StoreAddress
from testbed.hazelcast import HazelcastCluster
from testbed.s3 import S3Server

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


@contextmanager
def snapshot_store(
    workdir: Path, heap: str = "1g"
) -> Iterator[tuple[StoreAddress, HazelcastSnapshotStore]]:
    """Starts 3 members under ``workdir/hazelcast`` and connects a client.

    Args:
        workdir: Where the members' configs and logs go.
        heap: Each member's JVM heap. A map with one backup takes twice its size spread over
            the three members; 1 GiB each holds a few hundred MiB of snapshots, and
            ``bench.scale_curve`` raises it for gigabytes.

    Yields:
        Where executors find the store, and the driver's store on that client.
    """
    (workdir / "hazelcast").mkdir()
    cluster = HazelcastCluster(workdir / "hazelcast", size=3, heap=heap)
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


def start_s3(server: S3Server) -> tuple[S3Client, str]:
    """Starts the test bed's S3 server (s3proxy) and makes a bucket on it.

    Returns:
        A client configured as the driver's (:func:`~snapshot_store.s3.connect_s3`), and the
        bucket's name. The caller stops the server.
    """
    server.config.parent.mkdir(parents=True, exist_ok=True)
    server.start()
    bucket = server.create_bucket()
    client = connect_s3(
        server.endpoint, "us-east-1", access_key=server.access_key, secret_key=server.secret_key
    )
    return client, bucket
