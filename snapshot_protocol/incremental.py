"""The plan of incremental snapshots: chains of a full version and deltas per state partition.

docs/concepts/protocol.md, "Incremental snapshots", says why and how; this module is the part of it
that decides, with no I/O, so the runtime (``spark_runtime/state/increments.py``), the test
fakes' keyed state and the model (``tests/unit/protocol/test_incremental_model.py``) use the
same rules:

* :func:`plan_snapshot`: which partitions a snapshot writes in full, which as a delta, which
  it leaves as they are, keeping every chain within :class:`ChainPolicy`'s bounds and
  spreading the full rewrites over snapshots by giving each partition a turn;
* :func:`full_whatever_changed`: the partitions a plan writes in full before the delta is
  known, so that a writer can start them beside the delta;
* :func:`next_chains`: the chains the snapshot's validation record lists once it is written;
* :func:`live_keys` and :func:`discardable`: what a discard may remove (an entry at most the
  bound and listed by no live chain), the rule that keeps the restore point whole against
  zombies (docs/concepts/protocol.md, "Where the chunks live and what may be discarded");
* :func:`chains_of`: a participant's chains, read back from the chunks a validation record
  lists for it (:attr:`~snapshot_protocol.chunks.ChunkWriter.previous`).
"""

from __future__ import annotations

import enum
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from snapshot_protocol.chunks import ChunkDescriptor, ChunkKey
from snapshotjob_contract.spec import DEFAULT_MAX_DELTA_PERCENT, DEFAULT_MAX_DELTAS


class Write(enum.Enum):
    """What a snapshot writes for one state partition."""

    FULL = "full"
    """Every key of the partition: the chain starts again with this version."""
    DELTA = "delta"
    """The newest row of every key updated since the last snapshot (no operator that takes
    deltas removes keys, so a delta holds no tombstones)."""
    KEEP = "keep"
    """Nothing: the partition did not change, and its chain is listed as it is."""


@dataclass(frozen=True)
class Version:
    """The chunks one snapshot wrote for one partition.

    Attributes:
        snapshot_id: The snapshot that wrote them (their keys carry it).
        full: A full version; a delta otherwise.
        chunks: The chunks' keys, in the order a restore reads them.
        num_bytes: Their total size.
    """

    snapshot_id: int
    full: bool
    chunks: tuple[ChunkKey, ...]
    num_bytes: int


@dataclass(frozen=True)
class Chain:
    """A partition as a snapshot lists it: a full version, then deltas in snapshot order.

    Raises:
        ValueError: If the chain does not start with its only full version, or its
            versions are not in increasing snapshot order.
    """

    versions: tuple[Version, ...]

    def __post_init__(self) -> None:
        if not self.versions or not self.versions[0].full:
            raise ValueError("A chain starts with a full version")
        if any(version.full for version in self.versions[1:]):
            raise ValueError("A chain has one full version, its first")
        ids = [version.snapshot_id for version in self.versions]
        if ids != sorted(set(ids)):
            raise ValueError(f"A chain's versions are in increasing snapshot order: {ids}")

    @property
    def deltas(self) -> int:
        """How many deltas follow the full version."""
        return len(self.versions) - 1

    @property
    def full_bytes(self) -> int:
        """The full version's size."""
        return self.versions[0].num_bytes

    @property
    def delta_bytes(self) -> int:
        """The deltas' total size."""
        return sum(version.num_bytes for version in self.versions[1:])


@dataclass(frozen=True)
class ChainPolicy:
    """How long a chain may grow before its partition is written in full again.

    Attributes:
        max_deltas: Most deltas after a full version (a restore reads ``1 + max_deltas``
            versions of a partition at most).
        delta_ratio: Most bytes of deltas, as a fraction of the full version's.
    """

    max_deltas: int = DEFAULT_MAX_DELTAS
    delta_ratio: float = DEFAULT_MAX_DELTA_PERCENT / 100

    def __post_init__(self) -> None:
        if self.max_deltas < 0 or self.delta_ratio < 0:
            raise ValueError(f"A chain policy's bounds are not negative: {self}")

    def allows(self, chain: Chain, delta_bytes: int) -> bool:
        """Whether one more delta of ``delta_bytes`` keeps the chain within the bounds."""
        return (
            chain.deltas + 1 <= self.max_deltas
            and chain.delta_bytes + delta_bytes <= self.delta_ratio * chain.full_bytes
        )

    def is_turn(self, partition: int, snapshot_id: int, partitions: int) -> bool:
        """Whether snapshot ``snapshot_id`` cuts ``partition``'s chain early, so that the full
        rewrites spread evenly: each partition has its turn once every ``1 + max_deltas``
        snapshot ids, the partitions' turns spaced apart, so about
        ``partitions / (1 + max_deltas)`` partitions are rewritten per snapshot, however few
        partitions there are."""
        period = 1 + self.max_deltas
        spacing = max(1, period // max(1, partitions))
        return (snapshot_id + partition * spacing) % period == 0


def chains_of(chunks: Iterable[ChunkDescriptor]) -> dict[int, Chain]:
    """Reads one participant's chains from its chunks in a validation record, by partition.

    Raises:
        ValueError: If the chunks do not form chains (a record that passed
            :func:`~snapshot_protocol.chunks.validate_snapshot` always does).
    """
    by_version: dict[int, dict[int, list[ChunkDescriptor]]] = {}
    for chunk in chunks:
        by_version.setdefault(chunk.key.partition, {}).setdefault(chunk.key.snapshot_id, []).append(
            chunk
        )
    chains: dict[int, Chain] = {}
    for partition, versions in by_version.items():
        chains[partition] = Chain(
            tuple(
                Version(
                    snapshot_id,
                    not listed[0].delta,
                    tuple(sorted(chunk.key for chunk in listed)),
                    sum(chunk.num_bytes for chunk in listed),
                )
                for snapshot_id, listed in sorted(versions.items())
            )
        )
    return chains


def plan_snapshot(
    chains: Mapping[int, Chain],
    changed: Mapping[int, int],
    partitions: int,
    policy: ChainPolicy,
    snapshot_id: int,
    damaged: Collection[int] = (),
    empty: Collection[int] = (),
) -> dict[int, Write]:
    """Decides what a snapshot writes for every state partition.

    Args:
        chains: The previous snapshot's chains by partition (empty: none, all full).
        changed: The partitions with updates since then, with the delta's estimated bytes.
        partitions: The state partition count.
        policy: The chains' bounds.
        snapshot_id: The snapshot's id, which says whose turn it is to be cut early
            (:meth:`ChainPolicy.is_turn`).
        damaged: Partitions whose chain lost a chunk (the presence check of taking step 4):
            inheriting it would make this snapshot unrestorable too.
        empty: Partitions without a chain because the previous snapshot holds no rows of
            them (a writer puts no chunk for an empty partition).

    Returns:
        A write for each partition ``0 .. partitions - 1``: KEEP for an empty partition that
        nothing changed (it is still empty, and the record lists nothing for it, as before);
        FULL where there is no chain, it is damaged, a delta would break a bound, or it is
        the partition's turn and its chain has or would get a delta (so a chain is cut at
        every turn and never waits a whole period for the next); DELTA for the other changed
        partitions; KEEP for the rest.
    """
    plan: dict[int, Write] = {}
    for partition in range(partitions):
        chain = chains.get(partition)
        if chain is None and partition in empty and partition not in changed:
            plan[partition] = Write.KEEP
        elif (
            chain is None
            or partition in damaged
            or (partition in changed and not policy.allows(chain, changed[partition]))
            or (
                (chain.deltas > 0 or partition in changed)
                and policy.is_turn(partition, snapshot_id, partitions)
            )
        ):
            plan[partition] = Write.FULL
        elif partition in changed:
            plan[partition] = Write.DELTA
        else:
            plan[partition] = Write.KEEP
    return plan


def full_whatever_changed(
    chains: Mapping[int, Chain],
    partitions: int,
    policy: ChainPolicy,
    snapshot_id: int,
    damaged: Collection[int] = (),
    empty: Collection[int] = (),
) -> frozenset[int]:
    """The partitions :func:`plan_snapshot` writes in full whatever changed.

    A writer may start writing these before it knows what changed, beside the delta of the
    others, and write no delta for them: their full version replaces the chain anyway. They
    are the partitions a snapshot with no change writes in full (no chain though not empty,
    damaged, or their turn while their chain has a delta): a change only ever adds a reason
    to write a partition in full, never removes one, so each of them is FULL in the plan of
    any change too (``tests/unit/protocol/test_incremental_model.py`` checks it). The
    others' writes depend on the delta: a chain at a bound is rewritten only if its
    partition changed, and a turn cuts a chain without deltas only if a change would give it
    one.

    Args:
        chains: As :func:`plan_snapshot`'s.
        partitions: The state partition count.
        policy: The chains' bounds.
        snapshot_id: The snapshot's id.
        damaged: As :func:`plan_snapshot`'s.
        empty: As :func:`plan_snapshot`'s.

    Returns:
        The partitions written in full by ``plan_snapshot(chains, changed, ...)`` for every
        ``changed``.
    """
    plan = plan_snapshot(chains, {}, partitions, policy, snapshot_id, damaged, empty)
    return frozenset(partition for partition, write in plan.items() if write is Write.FULL)


def next_chains(
    chains: Mapping[int, Chain], plan: Mapping[int, Write], written: Mapping[int, Version]
) -> dict[int, Chain]:
    """The chains a snapshot lists once it wrote ``written`` as ``plan`` said.

    Raises:
        ValueError: If ``written`` does not match the plan (a version for a KEEP, none for a
            FULL or DELTA, a delta marked full or the other way round).
    """
    result: dict[int, Chain] = {}
    for partition, write in plan.items():
        version = written.get(partition)
        if write is Write.KEEP:
            if version is not None:
                raise ValueError(f"Partition {partition} is kept but a version was written")
            if partition in chains:  # else an empty partition, kept empty
                result[partition] = chains[partition]
            continue
        if version is None or version.full != (write is Write.FULL):
            raise ValueError(f"Partition {partition} needs a {write.value} version")
        if write is Write.FULL:
            result[partition] = Chain((version,))
        else:
            result[partition] = Chain((*chains[partition].versions, version))
    return result


def live_keys(chains: Iterable[Mapping[int, Chain]]) -> frozenset[ChunkKey]:
    """Every chunk the given snapshots' chains list: what no discard may remove."""
    return frozenset(
        key
        for by_partition in chains
        for chain in by_partition.values()
        for version in chain.versions
        for key in version.chunks
    )


def discardable(
    stored: Iterable[ChunkKey], bound: int, live: frozenset[ChunkKey]
) -> frozenset[ChunkKey]:
    """The stored chunks a discard removes: snapshot id at most ``bound``, and not live."""
    return frozenset(key for key in stored if key.snapshot_id <= bound and key not in live)
