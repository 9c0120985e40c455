"""Writing a keyed state's incremental snapshot: deltas, inherited chains, and full rewrites.

docs/protocol.md, "Incremental snapshots", says why a snapshot writes, per state partition,
a full version, a delta or nothing; ``snapshot_protocol.incremental`` decides which for each
partition; this module does it with the executors' JVMs (``spark_runtime.jvm_chunks``). The
delta (every key changed since the restore point, :class:`~spark_runtime.state.changes.ChangeLog`)
is written first, one task per partition, because the plan needs each partition's delta
size; then the partitions the plan rewrites in full (chains at their bounds, and those whose
turn it is) are written from the state, their tasks alone reading
their rows. The validation record lists, per partition, the restore point's chain with the
delta appended, or the chain as it was, or the new full version.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter
from snapshot_protocol.incremental import ChainPolicy, Write, chains_of, plan_snapshot
from spark_runtime.chunk_io import StoreAddress, writer_counts
from spark_runtime.jvm_chunks import write_state
from spark_runtime.state.changes import ChangeLog


@dataclass(frozen=True)
class Increment:
    """What an incremental snapshot of one operator wrote and lists.

    Attributes:
        chunks: Every chunk the record lists for the state partitions, inherited or new.
        writers: Who wrote the new ones (``writer_counts``).
        plan: What each partition got.
    """

    chunks: list[ChunkDescriptor]
    writers: str
    plan: Mapping[int, Write]

    def summary(self) -> str:
        """``full:N,delta:N,keep:N``, for the log line."""
        counts = Counter(write.value for write in self.plan.values())
        return ",".join(f"{w.value}:{counts.get(w.value, 0)}" for w in Write)


def builds_on(changes: ChangeLog | None, writer: ChunkWriter, partitions: int) -> bool:
    """Whether a snapshot may inherit the restore point's chains: the coordinator offers
    them (``writer.previous``), the change log holds every change since exactly that
    snapshot, and it was taken with the same partitions."""
    previous = writer.previous
    return (
        changes is not None
        and previous is not None
        and previous.snapshot_id == changes.base_id
        and previous.state_partitions == partitions
    )


def write_increment(
    jvm: Any,
    spark: SparkSession,
    state: DataFrame,
    delta: DataFrame | None,
    address: StoreAddress,
    writer: ChunkWriter,
    partitions: int,
    policy: ChainPolicy,
) -> Increment:
    """Writes the snapshot of a state that builds on ``writer.previous``.

    Args:
        jvm: :func:`~spark_runtime.jvm_chunks.state_chunks`.
        spark: The session.
        state: The state, partitioned into its ``partitions`` by key.
        delta: The newest row of every key changed since the restore point, partitioned the
            same way; None if nothing changed.
        address: Where the executors find the store.
        writer: The snapshot's writer; its ``previous`` is the restore point's chunks of
            this operator, taken with ``partitions`` state partitions.
        partitions: The state partitions.
        policy: The chains' bounds.

    Raises:
        Py4JJavaError: If a task failed, e.g. a put in doubt or refused.
    """
    previous = writer.previous
    assert previous is not None and previous.state_partitions == partitions
    chains = {p: chain for p, chain in chains_of(previous.chunks).items() if p < partitions}
    new: dict[int, list[ChunkDescriptor]] = {}
    who: list[str] = []

    def write(rows: DataFrame, **only_or_delta: Any) -> None:
        for chunk, name in write_state(
            jvm,
            spark,
            rows,
            address,
            writer.map_name,
            writer.snapshot_id,
            writer.operator,
            **only_or_delta,
        ):
            new.setdefault(chunk.key.partition, []).append(chunk)
            who.append(name)

    if delta is not None:
        write(delta, delta=True)
    changed = {p: sum(chunk.num_bytes for chunk in listed) for p, listed in new.items()}
    # A partition the restore point lists no chunk of was empty: the JVM writer puts none.
    empty = set(range(partitions)) - chains.keys()
    plan = plan_snapshot(chains, changed, partitions, policy, writer.snapshot_id, empty=empty)
    rewritten = sorted(p for p, planned in plan.items() if planned is Write.FULL)
    if rewritten:
        for p in rewritten:
            # Its delta's chunks are not listed; the full version's puts overwrite most of them.
            new.pop(p, None)
        write(state, only=rewritten)
    listed: list[ChunkDescriptor] = []
    inherited = {p: [c for c in previous.chunks if c.key.partition == p] for p in chains}
    for partition in range(partitions):
        if plan[partition] is not Write.FULL:
            listed.extend(inherited.get(partition, ()))
        if plan[partition] is not Write.KEEP:
            listed.extend(sorted(new.get(partition, []), key=lambda c: c.key))
    return Increment(listed, writer_counts({"writer": name} for name in who), plan)
