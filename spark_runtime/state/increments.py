"""Writing a keyed state's incremental snapshot: deltas, inherited chains, and full rewrites.

docs/concepts/protocol.md, "Incremental snapshots", says why a snapshot writes, per state partition,
a full version, a delta or nothing; ``snapshot_protocol.incremental`` decides which for each
partition; this module does it with the executors' JVMs (``spark_runtime.jvm_chunks``). The
partitions the plan rewrites in full whatever changed (those whose turn it is, once their
chain has a delta) are written from the state in one Spark job while a second one writes
the delta of the others (every key changed since the restore point,
:class:`~spark_runtime.state.changes.ChangeLog`), one task per partition: a turn's rewrite
then costs a snapshot the longer of the two jobs, not their sum. The plan needs each
partition's delta size for the rest: a delta that would break its chain's bounds is
replaced by a full version, written from the state after it. The validation record lists,
per partition, the restore point's chain with the delta appended, or the chain as it was,
or the new full version.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pyspark import InheritableThread
from pyspark.sql import DataFrame, SparkSession

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter
from snapshot_protocol.incremental import (
    ChainPolicy,
    Write,
    chains_of,
    full_whatever_changed,
    plan_snapshot,
)
from spark_runtime.chunk_io import StoreAddress, writer_counts
from spark_runtime.jvm_chunks import write_state
from spark_runtime.state.changes import ChangeLog

Written = list[tuple[ChunkDescriptor, str]]
"""What :func:`~spark_runtime.jvm_chunks.write_state` returns: each chunk, with its writer."""


@dataclass(frozen=True)
class Increment:
    """What an incremental snapshot of one operator wrote and lists.

    Attributes:
        chunks: Every chunk the record lists for the state partitions, inherited or new.
        writers: Who wrote the new ones (``writer_counts``).
        plan: What each partition got.
        beside_delta: The partitions written in full before the plan, in a job beside the
            delta's (alone if nothing else changed), not after it.
    """

    chunks: list[ChunkDescriptor]
    writers: str
    plan: Mapping[int, Write]
    beside_delta: frozenset[int] = frozenset()

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
    # A partition the restore point lists no chunk of was empty: the JVM writer puts none.
    empty = set(range(partitions)) - chains.keys()
    new: dict[int, list[ChunkDescriptor]] = {}
    who: list[str] = []

    def write(rows: DataFrame, **only_or_delta: Any) -> Callable[[], Written]:
        return lambda: write_state(
            jvm,
            spark,
            rows,
            address,
            writer.map_name,
            writer.snapshot_id,
            writer.operator,
            **only_or_delta,
        )

    def add(written: Written) -> None:
        for chunk, name in written:
            new.setdefault(chunk.key.partition, []).append(chunk)
            who.append(name)

    # The turns' rewrites do not wait for the delta: they run beside it, as a Spark job of
    # their own, and the delta skips their partitions.
    early = full_whatever_changed(chains, partitions, policy, writer.snapshot_id, empty=empty)
    others = [p for p in range(partitions) if p not in early]
    jobs = [write(state, only=early)] if early else []
    if delta is not None and others:
        jobs.append(write(delta, delta=True, only=others))
    for written in side_by_side(jobs):
        add(written)
    changed = {p: sum(c.num_bytes for c in new[p] if c.delta) for p in others if p in new}
    plan = plan_snapshot(chains, changed, partitions, policy, writer.snapshot_id, empty=empty)
    late = sorted(p for p, planned in plan.items() if planned is Write.FULL and p not in early)
    if late:
        # A delta that would break its chain's bounds, or its partition's turn come while
        # its chain had no delta: the delta's chunks are not listed, and the full version's
        # puts overwrite most of them.
        for p in late:
            new.pop(p, None)
        add(write(state, only=late)())
    listed: list[ChunkDescriptor] = []
    inherited = {p: [c for c in previous.chunks if c.key.partition == p] for p in chains}
    for partition in range(partitions):
        if plan[partition] is not Write.FULL:
            listed.extend(inherited.get(partition, ()))
        if plan[partition] is not Write.KEEP:
            listed.extend(sorted(new.get(partition, []), key=lambda c: c.key))
    return Increment(listed, writer_counts({"writer": name} for name in who), plan, early)


def side_by_side(jobs: Sequence[Callable[[], Written]]) -> list[Written]:
    """Runs the jobs' writes at once, the first in a thread of its own; returns their results.

    Spark runs jobs submitted from two threads side by side; a thread started with
    ``InheritableThread`` carries the caller's local properties (job group, pool). Every job
    has ended when this returns or raises, so a failed snapshot leaves no write running.

    Raises:
        Exception: The first failure (the first job's before the others'), after all ended.
    """
    if len(jobs) < 2:
        return [job() for job in jobs]
    results: list[Written | None] = [None] * len(jobs)
    errors: list[BaseException | None] = [None] * len(jobs)

    def run(index: int) -> None:
        try:
            results[index] = jobs[index]()
        except BaseException as error:  # re-raised in the caller's thread
            errors[index] = error

    threads = [
        InheritableThread(target=run, args=(index,), name=f"snapshot-write-{index}")
        for index in range(len(jobs) - 1)
    ]
    for thread in threads:
        thread.start()
    try:
        run(len(jobs) - 1)
    finally:
        for thread in threads:
            thread.join()
    for error in errors:
        if error is not None:
            raise error
    return [result for result in results if result is not None]
