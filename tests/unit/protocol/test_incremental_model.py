"""A model of incremental snapshots, checked against zombies, failures and lost chunks.

docs/concepts/protocol.md, "Incremental snapshots (design)", argues that chains of a full version
and deltas keep the protocol's invariants when discards spare every *live* chunk. This
model checks the argument before the runtime implements it. It plays a keyed state of
``KEYS`` keys over ``PARTITIONS`` partitions, a chunk store (a dict from ``ChunkKey`` to the
rows a chunk holds), the stored record (the restore point's id and chains) and executions
that take snapshots with :mod:`snapshot_protocol.incremental`'s plan, one partition write
at a time:

* taking step 3 discards, below the new id, what the execution's restore point does not
  list; step 8a, below the new id, what the new restore point does not list; step 8b only
  the failed snapshot's own id;
* a restart replaces the current execution; the old one becomes a zombie that goes on
  writing its snapshot's chunks and discarding with its own bound and live set, but can no
  longer move the record (fencing, I9);
* a chunk of the restore point can be lost (a store fault); the next snapshot writes the
  partitions whose chains lost a chunk in full (taking step 4's presence check).

After every step: I2 (every chunk the stored record lists exists, unless a fault took it),
I14 (every stored chain within the policy's bounds) and I15 (the stored chains restore
exactly the state the snapshot was taken of; with a chunk lost, the restore fails instead
of returning anything else).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from snapshot_protocol.chunks import ChunkKey
from snapshot_protocol.incremental import (
    Chain,
    ChainPolicy,
    Version,
    Write,
    discardable,
    full_whatever_changed,
    live_keys,
    next_chains,
    plan_snapshot,
)

pytestmark = pytest.mark.unit

PARTITIONS = 4
KEYS = 16
OPERATOR = "sums"
POLICY = ChainPolicy(max_deltas=3, delta_ratio=0.5)
"""Small bounds, so that chains reach them within a run."""

Rows = dict[int, int | None]
"""A chunk's rows: key to value, None a tombstone (deltas only)."""


class CorruptError(Exception):
    """A chunk the chains list is missing: the restore fails (I10)."""


@dataclass
class Pending:
    """A snapshot an execution is taking."""

    snapshot_id: int
    plan: dict[int, Write]
    state: dict[int, int]
    dirty: dict[int, Rows]
    lost_before: frozenset[ChunkKey]
    written: dict[int, Version] = field(default_factory=dict)

    def next_partition(self) -> int | None:
        due = [p for p, w in self.plan.items() if w is not Write.KEEP and p not in self.written]
        return min(due) if due else None


@dataclass
class Execution:
    """A driver: the chains of its restore point, its state, what changed since."""

    chains: dict[int, Chain]
    state: dict[int, int]
    dirty: dict[int, Rows] = field(default_factory=dict)
    pending: Pending | None = None


def restore(store: dict[ChunkKey, Rows], chains: dict[int, Chain]) -> dict[int, int]:
    """Applies every chain: the full version, then the deltas in order."""
    state: dict[int, int] = {}
    for chain in chains.values():
        partition: dict[int, int] = {}
        for version in chain.versions:
            for key in version.chunks:
                if key not in store:
                    raise CorruptError(str(key))
                rows = store[key]
                if version.full:
                    partition = {k: v for k, v in rows.items() if v is not None}
                    continue
                for k, v in rows.items():
                    if v is None:
                        partition.pop(k, None)
                    else:
                        partition[k] = v
        state |= partition
    return state


class IncrementalSnapshots(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.store: dict[ChunkKey, Rows] = {}
        self.record: tuple[int, dict[int, Chain]] | None = None
        self.truth: dict[int, dict[int, int]] = {}
        self.last_id = 0  # the stored ongoing snapshot id: ids are allocated above it
        self.current = Execution(chains={}, state={})
        self.zombies: list[Execution] = []
        self.lost: set[ChunkKey] = set()  # chunks a store fault removed

    # The state changes between snapshots.

    @rule(key=st.integers(0, KEYS - 1), value=st.one_of(st.none(), st.integers(0, 9)))
    def update(self, key: int, value: int | None) -> None:
        execution = self.current
        if value is None:
            execution.state.pop(key, None)
        else:
            execution.state[key] = value
        execution.dirty.setdefault(key % PARTITIONS, {})[key] = value

    # Taking a snapshot, one step at a time.

    @precondition(lambda self: self.current.pending is None)
    @rule()
    def begin(self) -> None:
        execution = self.current
        self.last_id += 1  # step 2: the new id is stored safely
        snapshot_id = self.last_id
        self._discard(snapshot_id - 1, live_keys([execution.chains]))  # step 3
        changed = {p: len(rows) for p, rows in execution.dirty.items() if rows}
        damaged = {  # step 4's presence check of the inherited chunks
            p
            for p, chain in execution.chains.items()
            if any(k not in self.store for v in chain.versions for k in v.chunks)
        }
        # As the runtime plans: the partitions written in full whatever changed start
        # beside the delta of the others, which alone says what else changed.
        early = full_whatever_changed(execution.chains, PARTITIONS, POLICY, snapshot_id, damaged)
        later = {p: size for p, size in changed.items() if p not in early}
        plan = plan_snapshot(execution.chains, later, PARTITIONS, POLICY, snapshot_id, damaged)
        assert early <= {p for p, w in plan.items() if w is Write.FULL}, (early, plan)
        execution.pending = Pending(
            snapshot_id, plan, dict(execution.state), execution.dirty, frozenset(self.lost)
        )
        execution.dirty = {}

    @precondition(lambda self: self.current.pending is not None)
    @rule(every=st.booleans())
    def write(self, every: bool) -> None:
        """One partition's chunks, or (so that runs reach their end often) all that remain."""
        pending = self.current.pending
        while pending is not None and pending.next_partition() is not None:
            self._write(self.current)
            if not every:
                break

    @precondition(
        lambda self: (
            self.current.pending is not None and self.current.pending.next_partition() is None
        )
    )
    @rule()
    def succeed(self) -> None:
        execution = self.current
        pending = execution.pending
        assert pending is not None
        chains = next_chains(execution.chains, pending.plan, pending.written)
        # A chunk lost before the snapshot began is not inherited: it heals the chains.
        inherited_loss = (live_keys([chains]) - self.store.keys()) & pending.lost_before
        assert not inherited_loss, f"snapshot {pending.snapshot_id} inherits {inherited_loss}"
        self.record = (pending.snapshot_id, chains)  # step 7: the record names it
        self.truth[pending.snapshot_id] = pending.state
        self._discard(pending.snapshot_id - 1, live_keys([chains]))  # step 8a
        execution.chains = chains
        execution.pending = None

    @precondition(lambda self: self.current.pending is not None)
    @rule()
    def fail(self) -> None:
        execution = self.current
        pending = execution.pending
        assert pending is not None
        for key in [k for k in self.store if k.snapshot_id == pending.snapshot_id]:
            del self.store[key]  # step 8b: only this snapshot's own chunks
        # Its changes are in no recorded snapshot: the next one must carry them.
        for partition, rows in execution.dirty.items():
            pending.dirty.setdefault(partition, {}).update(rows)
        execution.dirty = pending.dirty
        execution.pending = None

    # Executions replaced, zombies going on.

    def _restorable(self) -> bool:
        return self.record is None or live_keys([self.record[1]]) <= self.store.keys()

    @precondition(lambda self: self._restorable())
    @rule()
    def restart(self) -> None:
        self.zombies.append(self.current)
        if self.record is None:
            self.current = Execution(chains={}, state={})
            return
        _, chains = self.record
        self.current = Execution(chains=dict(chains), state=restore(self.store, chains))

    @precondition(lambda self: any(z.pending is not None for z in self.zombies))
    @rule(data=st.data())
    def zombie_acts(self, data: st.DataObject) -> None:
        zombie = data.draw(st.sampled_from([z for z in self.zombies if z.pending is not None]))
        pending = zombie.pending
        assert pending is not None
        match data.draw(st.sampled_from(["write", "discard", "fail"])):
            case "write":
                self._write(zombie)
            case "discard":  # its step 3 again, with its own bound and restore point
                self._discard(pending.snapshot_id - 1, live_keys([zombie.chains]))
            case "fail":
                for key in [k for k in self.store if k.snapshot_id == pending.snapshot_id]:
                    del self.store[key]
                zombie.pending = None

    @precondition(lambda self: self.record is not None)
    @rule(data=st.data())
    def lose_a_chunk(self, data: st.DataObject) -> None:
        assert self.record is not None
        listed = sorted(live_keys([self.record[1]]) & self.store.keys(), key=str)
        if listed:
            key = data.draw(st.sampled_from(listed))
            del self.store[key]
            self.lost.add(key)

    # Helpers.

    def _write(self, execution: Execution) -> None:
        pending = execution.pending
        assert pending is not None
        partition = pending.next_partition()
        if partition is None:
            return
        full = pending.plan[partition] is Write.FULL
        rows: Rows = (
            {k: v for k, v in pending.state.items() if k % PARTITIONS == partition}
            if full
            else dict(pending.dirty[partition])
        )
        key = ChunkKey(pending.snapshot_id, OPERATOR, partition, 0)
        self.store[key] = rows
        pending.written[partition] = Version(pending.snapshot_id, full, (key,), max(len(rows), 1))

    def _discard(self, bound: int, live: frozenset[ChunkKey]) -> None:
        for key in discardable(list(self.store), bound, live):
            del self.store[key]

    # Invariants.

    @invariant()
    def i2_the_restore_point_is_whole(self) -> None:
        if self.record is None:
            return
        missing = live_keys([self.record[1]]) - self.store.keys()
        discarded = missing - self.lost
        assert not discarded, f"chunks of snapshot {self.record[0]} discarded: {discarded}"

    @invariant()
    def i14_chains_are_bounded(self) -> None:
        if self.record is None:
            return
        for partition, chain in self.record[1].items():
            assert chain.deltas <= POLICY.max_deltas, (partition, chain)
            assert chain.delta_bytes <= POLICY.delta_ratio * chain.full_bytes, (partition, chain)

    @invariant()
    def i15_chains_restore_the_snapshots_state(self) -> None:
        if self.record is None:
            return
        snapshot_id, chains = self.record
        if not self._restorable():
            with pytest.raises(CorruptError):  # a lost chunk fails the restore, never misleads it
                restore(self.store, chains)
            return
        assert restore(self.store, chains) == self.truth[snapshot_id]


TestIncrementalSnapshots = IncrementalSnapshots.TestCase
TestIncrementalSnapshots.settings = settings(
    max_examples=400, stateful_step_count=50, deadline=None
)


@pytest.mark.parametrize("partitions", [4, 8, 64])
def test_a_steady_load_spreads_the_full_rewrites(partitions: int) -> None:
    """Every partition changed at every snapshot: after a warm-up, each snapshot rewrites
    about ``partitions / (1 + max_deltas)`` partitions in full, however few there are, and
    no chain reaches the bound (the cost docs/concepts/protocol.md states)."""
    policy = ChainPolicy(max_deltas=16, delta_ratio=0.5)
    chains: dict[int, Chain] = {}
    fulls: list[int] = []
    for snapshot_id in range(1, 200):
        changed = dict.fromkeys(range(partitions), 1)
        plan = plan_snapshot(chains, changed, partitions, policy, snapshot_id)
        written = {
            p: Version(snapshot_id, w is Write.FULL, (ChunkKey(snapshot_id, "s", p, 0),), 100)
            if w is Write.FULL
            else Version(snapshot_id, False, (ChunkKey(snapshot_id, "s", p, 0),), 1)
            for p, w in plan.items()
            if w is not Write.KEEP
        }
        chains = next_chains(chains, plan, written)
        fulls.append(sum(w is Write.FULL for w in plan.values()))
        assert max(chain.deltas for chain in chains.values()) <= policy.max_deltas
    steady = fulls[50:]
    assert max(steady) <= math.ceil(partitions / (1 + policy.max_deltas)), steady
    assert sum(steady) / len(steady) <= partitions / (1 + policy.max_deltas) + 0.1, steady


def test_an_empty_partition_is_kept_without_a_write_until_a_change_fills_it() -> None:
    """A partition with no rows at the restore point has no chain (a writer puts no chunk for
    it): a snapshot keeps it empty without writing it, even at its turn, and writes it in full
    once a change puts rows in it (a delta would have no full version to apply to). Without
    a restore point to build on, every partition is written."""
    policy = ChainPolicy(max_deltas=2)
    chains = {0: Chain((Version(1, True, (ChunkKey(1, "s", 0, 0),), 100),))}
    for snapshot_id in range(2, 2 + 2 * (1 + policy.max_deltas)):  # every partition's turn
        plan = plan_snapshot(chains, {}, 2, policy, snapshot_id, empty={1})
        assert plan[1] is Write.KEEP, (snapshot_id, plan)
        kept = {p: chains[p] for p, w in plan.items() if w is Write.KEEP and p in chains}
        if plan[0] is Write.KEEP:
            assert next_chains(chains, plan, {}) == kept
    assert plan_snapshot(chains, {1: 10}, 2, policy, 2, empty={1})[1] is Write.FULL
    assert plan_snapshot({}, {}, 2, policy, 2)[1] is Write.FULL


@st.composite
def _chains(draw: st.DrawFn, partitions: int, before: int) -> dict[int, Chain]:
    """Chains of up to ``partitions`` partitions, their versions' ids below ``before``."""
    chains: dict[int, Chain] = {}
    for partition in range(partitions):
        if not draw(st.booleans()):
            continue
        ids = draw(st.lists(st.integers(1, before - 1), min_size=1, max_size=6, unique=True))
        versions = tuple(
            Version(
                snapshot_id,
                i == 0,
                (ChunkKey(snapshot_id, "s", partition, 0),),
                draw(st.integers(1, 1000)),
            )
            for i, snapshot_id in enumerate(sorted(ids))
        )
        chains[partition] = Chain(versions)
    return chains


@given(data=st.data())
def test_the_partitions_written_in_full_whatever_changed_are_full_in_every_plan(
    data: st.DataObject,
) -> None:
    """The runtime starts the partitions :func:`full_whatever_changed` names before it writes
    the delta of the others, and writes no delta for them: each must be FULL in the plan of
    any change, with or without its own: a change never takes a reason for a full write
    away (:func:`plan_snapshot` is monotone in ``changed``)."""
    partitions = data.draw(st.integers(1, 8), label="partitions")
    snapshot_id = data.draw(st.integers(2, 60), label="snapshot_id")
    policy = ChainPolicy(
        max_deltas=data.draw(st.integers(0, 5), label="max_deltas"),
        delta_ratio=data.draw(st.floats(0, 2), label="delta_ratio"),
    )
    chains = data.draw(_chains(partitions, snapshot_id), label="chains")
    damaged = data.draw(st.sets(st.sampled_from(sorted(chains) or [0])), label="damaged")
    damaged &= chains.keys()
    empty = data.draw(st.sets(st.integers(0, partitions - 1)), label="empty") - chains.keys()
    changed = data.draw(
        st.dictionaries(st.integers(0, partitions - 1), st.integers(1, 2000)), label="changed"
    )
    early = full_whatever_changed(chains, partitions, policy, snapshot_id, damaged, empty)

    def fulls(changes: dict[int, int]) -> set[int]:
        plan = plan_snapshot(chains, changes, partitions, policy, snapshot_id, damaged, empty)
        return {p for p, write in plan.items() if write is Write.FULL}

    assert early <= fulls(changed)
    assert early <= fulls({p: size for p, size in changed.items() if p not in early})
