"""Reading a snapshot's keyed state outside any job, like Spark's state data source.

Why: after an incident the question is often what the job's state held at a snapshot: the
running sum of one key, whether a window was still open, what a deduplication remembered.
A state operator's chunks are Arrow IPC batches of its state rows (``spark_runtime.state``),
so one snapshot's state of one operator can be read back from Hazelcast or from a durable
copy without running the pipeline. The snapshot is validated first, and every chunk is
verified against its checksum as it is read, so a table read here is exactly what a restore
would load.

From Python (a Spark DataFrame)::

    from spark_runtime.snapshot_reader import read_state
    sums = read_state(spark, store, "__sj.export.team-a.nightly", "sums")
    sums.where("key = 3").show()

From the command line: ``python -m spark_runtime snapshot read --operator sums ...``.
"""

from __future__ import annotations

import re
from contextlib import closing

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from snapshot_protocol import SnapshotStore
from snapshot_protocol.chunks import validate_snapshot
from snapshot_protocol.transfer import read_verified
from spark_runtime.chunk_io import decode_batches
from spark_runtime.state.changes import newest_rows

_KEYS = re.compile(r"\(keys=([^;]+);")


class NotAStateTable(ValueError):  # noqa: N818 - names the condition
    """The operator named holds no table of state (a source's offsets, a sink's transactions),
    or the snapshot has no such operator."""


def read_state_table(
    store: SnapshotStore, map_name: str, operator: str, snapshot_id: int | None = None
) -> pa.Table:
    """Returns one state operator's rows at a snapshot, validated and verified.

    Args:
        store: The store holding the snapshot (Hazelcast or object storage).
        map_name: Its map.
        operator: The state operator's name in the pipeline (``name=`` of ``agg`` etc.).
        snapshot_id: The snapshot; the newest with a validation record by default.

    Raises:
        SnapshotCorrupted: If the snapshot fails validation (an id given but absent: its
            validation record is missing) or a chunk does not match its checksum.
        NotAStateTable: If the map holds no snapshot, the snapshot has no such operator, or
            its chunks are not state rows.
        SnapshotStoreError: If the store could not be read.
    """
    if snapshot_id is None:
        snapshot_id = store.latest_snapshot_id(map_name)
        if snapshot_id is None:
            raise NotAStateTable(f"Map {map_name} holds no snapshot with a validation record")
    record = validate_snapshot(store, map_name, snapshot_id)
    described = record.shape.participants
    mine = [chunk for chunk in record.chunks if chunk.key.operator == operator]
    if not mine:
        known = ", ".join(sorted(described) or {chunk.key.operator for chunk in record.chunks})
        raise NotAStateTable(
            f"Snapshot {snapshot_id} in map {map_name} has no operator '{operator}'; its "
            f"operators: {known}"
        )
    # The driver's chunk (partition count, watermark) sits after the last state partition.
    taken_with = record.shape.state_partitions or max(chunk.key.partition for chunk in mine)
    state = sorted((c for c in mine if c.key.partition < taken_with), key=lambda c: c.key)
    batches: list[pa.RecordBatch] = []
    with closing(read_verified(store, map_name, snapshot_id, state)) as verified:
        for chunk, value in verified:
            try:
                batches.extend(decode_batches(value))
            except (pa.ArrowInvalid, OSError) as error:
                description = described.get(operator, "not a state operator")
                raise NotAStateTable(
                    f"Operator '{operator}' ({description}) of snapshot {snapshot_id} holds no "
                    f"table of state rows: chunk '{chunk.key}' is not Arrow IPC ({error})"
                ) from error
    if any(chunk.delta for chunk in state):
        # A chain (incremental snapshots): each key's newest row. The keys are in the
        # operator's description, as Pipeline.shape writes it: "<class>(keys=<a,b>; ...".
        keys = _KEYS.search(described.get(operator, ""))
        if keys is None:
            raise NotAStateTable(
                f"Operator '{operator}' of snapshot {snapshot_id} lists deltas but its "
                f"description names no keys: {described.get(operator)!r}"
            )
        batches = newest_rows(batches, keys.group(1).split(","))
    if not batches:
        return pa.table({})
    return pa.Table.from_batches(batches)


def read_state(
    spark: SparkSession,
    store: SnapshotStore,
    map_name: str,
    operator: str,
    snapshot_id: int | None = None,
) -> DataFrame:
    """Returns one state operator's rows at a snapshot as a Spark DataFrame.

    The rows are read on the driver (a snapshot is verified chunk by chunk as it is read), so
    this suits inspecting a state, not processing one of many GiB.

    Args:
        spark: The session to build the DataFrame in.
        store: The store holding the snapshot.
        map_name: Its map.
        operator: The state operator's name in the pipeline.
        snapshot_id: The snapshot; the newest by default.

    Raises:
        The errors of :func:`read_state_table`.
    """
    table = read_state_table(store, map_name, operator, snapshot_id)
    if table.num_columns == 0:
        raise NotAStateTable(f"Operator '{operator}' has no state rows in map {map_name}")
    return spark.createDataFrame(table)
