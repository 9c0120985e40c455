"""Where a restore's time goes: the fixed cost of reading a small keyed state back.

``bench.overhead`` restores 10 MiB in about as long as 100 MiB, so most of a small restore is
a fixed cost. This script snapshots a running-sum state of ``--state-mib`` MiB into a real
three-member Hazelcast cluster, then restores it ``--repeat`` times through each of the two
read paths (through the driver, and in executor tasks), timing the phases of each restore:
reading the chunks, building the DataFrame, and materialising it hash-partitioned.

Run: ``.venv/bin/python -m bench.profile_restore``; the last line printed is JSON.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from bench.keyed_state import STATE_PARTITIONS
from bench.overhead import _session
from snapshot_protocol import ChunkWriter, SnapshotRef
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.lineage import empty_frame
from spark_runtime.state import RunningAggregate, StateContext
from spark_runtime.state import keyed as state_module
from testbed.hazelcast import HazelcastCluster

_phases: dict[str, list[float]] = defaultdict(list)


@contextmanager
def _timed(phase: str) -> Iterator[None]:
    started = time.monotonic()
    try:
        yield
    finally:
        _phases[phase].append(time.monotonic() - started)


def _wrap(owner: Any, attribute: str, phase: str) -> None:
    original: Callable[..., Any] = getattr(owner, attribute)

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        with _timed(phase):
            return original(*args, **kwargs)

    setattr(owner, attribute, wrapper)


def main() -> int:
    """Starts Hazelcast, snapshots one state and times restores through both read paths."""
    options = argparse.ArgumentParser(description=__doc__)
    options.add_argument("--state-mib", type=int, default=10)
    options.add_argument("--repeat", type=int, default=3)
    ns = options.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sj-profile-restore-"))
    cluster = HazelcastCluster(workdir, size=3, heap="1g")
    client = None
    try:
        cluster.start()
        members = [node.address for node in cluster.nodes]
        address = StoreAddress(tuple(members), cluster.cluster_name)
        client = connect(members, cluster.cluster_name)
        store = HazelcastSnapshotStore(client)
        spark = _session()
        context = StateContext(spark, STATE_PARTITIONS, address)
        keys = ns.state_mib * 1024 * 1024 // 16
        batch = spark.range(keys, numPartitions=STATE_PARTITIONS).select(
            F.col("id").alias("key"), F.col("id").alias("value")
        )
        aggs = {"total": ("sum", "value")}
        operator = RunningAggregate("state", context, ["key"], aggs, batch.schema)
        operator.update(batch)
        map_name = f"__sj.profile.{uuid.uuid4().hex[:8]}"
        descriptors = operator.save_and_prepare(
            1, ChunkWriter(store, map_name, 1, operator.name), False
        )
        ref = SnapshotRef(map_name, 1, tuple(descriptors), context.partitions)
        _wrap(store, "read_chunk", "driver: read chunks from Hazelcast")
        _wrap(state_module, "decode_batches", "driver: decode Arrow IPC")
        _wrap(spark, "createDataFrame", "driver: createDataFrame")
        _wrap(state_module, "checkpoint", "materialise (repartition + localCheckpoint)")
        results: dict[str, Any] = {"state_mib": ns.state_mib, "chunks": len(descriptors)}
        for path, limit in (("driver", 2**40), ("executors", 0)):
            state_module.DRIVER_RESTORE_MAX_BYTES = limit
            state_module.DRIVER_RESTORE_MAX_CHUNKS = 10**6 if limit else 0
            totals = []
            _phases.clear()
            for _ in range(ns.repeat):
                restored = RunningAggregate("state", context, ["key"], aggs, batch.schema)
                started = time.monotonic()
                restored.restore(ref, store)
                totals.append(time.monotonic() - started)
                if restored.state.count() != keys:
                    raise RuntimeError("restored state lost keys")
                restored._replace_state(empty_frame(spark, restored.state_schema))
            results[path] = {
                "restore_s": [round(t, 2) for t in totals],
                "phases_s": {k: [round(t, 2) for t in v] for k, v in _phases.items()},
            }
            print(f"path={path} {json.dumps(results[path])}", flush=True)
        store.destroy(map_name)
        spark.stop()
        print(json.dumps(results))
        return 0
    finally:
        if client is not None:
            client.shutdown()
        cluster.stop()
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
