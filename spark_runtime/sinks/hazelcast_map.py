"""A Hazelcast map as an idempotent sink: upserts by key, so it needs no two-phase commit.

Executor tasks write, each through one Hazelcast client per Python worker and cluster, kept
for the worker's life: connecting costs far more than a batch of puts.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import pyarrow as pa
from hazelcast.client import HazelcastClient
from pyspark.sql import DataFrame

from spark_runtime.sinks.base import EPOCH_COLUMN, Sink

_map_clients: dict[tuple[tuple[str, ...], str], HazelcastClient] = {}
_map_clients_lock = threading.Lock()


def _map_client(members: tuple[str, ...], cluster_name: str) -> HazelcastClient:
    with _map_clients_lock:
        client = _map_clients.get((members, cluster_name))
        if client is None:
            client = HazelcastClient(cluster_members=list(members), cluster_name=cluster_name)
            _map_clients[(members, cluster_name)] = client
        return client


class HazelcastMapSink(Sink):
    """A Hazelcast map, upserting each row under its key: idempotent, so writes every epoch.

    A replay after a restore writes the same values under the same keys again, so the map ends
    exactly as with exactly-once, though a reader may briefly see older values.

    Args:
        members: ``host:port`` addresses of the cluster.
        cluster_name: The cluster's name.
        map_name: The map to write.
        key: Key columns; the map key is their values joined by ``|``.
    """

    def __init__(
        self, members: Sequence[str], cluster_name: str, map_name: str, key: Sequence[str]
    ) -> None:
        self.members = tuple(members)
        self.cluster_name = cluster_name
        self.map_name = map_name
        self.key = tuple(key)

    def write(self, frame: DataFrame) -> int:
        """Puts every row as JSON under its key, from the executors; returns the entries put
        (rows of one batch with the same key are one entry)."""
        members, cluster, map_name, key = self.members, self.cluster_name, self.map_name, self.key
        columns = [c for c in frame.columns if c != EPOCH_COLUMN]

        def put(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
            target: Any = _map_client(members, cluster).get_map(map_name).blocking()
            count = 0
            for batch in batches:
                entries = {
                    "|".join(str(row[k]) for k in key): json.dumps(
                        {c: row[c] for c in columns}, default=str
                    )
                    for row in batch.to_pylist()
                }
                if entries:
                    target.put_all(entries)
                count += len(entries)
            yield pa.RecordBatch.from_pydict({"n": [count]})

        return sum(int(row["n"]) for row in frame.mapInArrow(put, "n long").collect())
