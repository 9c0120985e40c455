"""Chains in validation records, the chain map, and discards that keep the restore point.

docs/concepts/protocol.md, "Incremental snapshots": a format 3 record lists, per state partition, a
full version and deltas, some of them inherited from earlier snapshots. These tests drive the
pure checks and the coordinator against the in-memory fakes of ``fakes.py``; the rule machine
``test_invariants.py::TestIncrementalSnapshotProtocol`` checks the same under faults and
zombies.
"""

from __future__ import annotations

import json
import logging

import pytest

from snapshot_protocol import ChunkDescriptor, ChunkKey, SnapshotCorrupted, ValidationRecord
from snapshot_protocol.chunks import (
    chain_problem,
    check_descriptors,
    discarded_keys,
    validate_snapshot,
    validation_record_key,
)
from snapshot_protocol.incremental import Write, chains_of

from .fakes import INCREMENTAL_JOB, INTERVAL_MS, Cluster, Driver, FakeKeyedState

pytestmark = pytest.mark.unit


def chunk(snapshot_id: int, partition: int, seq: int = 0, delta: bool = False) -> ChunkDescriptor:
    return ChunkDescriptor.of(ChunkKey(snapshot_id, "state", partition, seq), b"v", 1, delta)


def record(snapshot_id: int, *chunks: ChunkDescriptor) -> ValidationRecord:
    return ValidationRecord(snapshot_id, chunks, 1, 1, 0, "uid")


def test_a_record_with_chains_is_format_3_and_reads_back() -> None:
    written = record(5, chunk(3, 0), chunk(4, 0, delta=True), chunk(5, 0, delta=True), chunk(5, 1))
    data = json.loads(json.dumps(written.to_dict()))
    assert data["formatVersion"] == 3
    assert data["chunks"][1][4] == "delta"
    assert len(data["chunks"][0]) == len(data["chunks"][3]) == 4
    assert ValidationRecord.from_dict(data) == written
    assert chain_problem(written) is None
    chains = chains_of(written.chunks)
    assert [(v.snapshot_id, v.full) for v in chains[0].versions] == [
        (3, True),
        (4, False),
        (5, False),
    ]
    assert chains[1].deltas == 0


def test_a_record_whose_format_does_not_match_its_chunks_is_malformed() -> None:
    data = record(5, chunk(4, 0)).to_dict()
    with pytest.raises(ValueError, match="says format 2 but lists chains"):
        ValidationRecord.from_dict({**data, "formatVersion": 2})
    with pytest.raises(ValueError, match="says format 3 but lists no chain"):
        ValidationRecord.from_dict({**record(5, chunk(5, 0)).to_dict(), "formatVersion": 3})


@pytest.mark.parametrize(
    ("chunks", "problem"),
    [
        ((chunk(4, 0, delta=True), chunk(5, 0, delta=True)), "starts with a delta (snapshot 4)"),
        ((chunk(4, 0), chunk(5, 0)), "full versions of snapshots 4 and 5 in one chain"),
        ((chunk(5, 0, 0), chunk(5, 0, 1, delta=True)), "full and delta chunks of snapshot 5"),
        ((chunk(6, 0),), "chunk '6/state/0/0' of a later snapshot"),
    ],
)
def test_a_broken_chain_is_corruption_named_in_the_record(
    chunks: tuple[ChunkDescriptor, ...], problem: str
) -> None:
    cluster = Cluster()
    map_name = "__sj.b1.chain.uid"
    broken = record(5, *chunks)
    cluster.snapshots.maps[map_name] = {validation_record_key(5): broken}
    with pytest.raises(SnapshotCorrupted) as error:
        validate_snapshot(cluster.snapshots, map_name, 5)
    assert problem in error.value.problem
    assert "operator 'state' partition 0" in error.value.problem or "later" in problem


def test_a_discard_keeps_the_chains_of_the_snapshots_it_is_told_to_keep() -> None:
    keep = record(3, chunk(1, 0), chunk(2, 0, delta=True), chunk(3, 1))
    stored = [
        "1/state/0/0",
        "1/state/1/0",
        "1/validation-record",
        "2/state/0/0",
        "2/validation-record",
        "3/state/1/0",
        "3/validation-record",
        "4/state/0/0",
        "not-a-snapshot",
    ]
    assert discarded_keys(stored, 3, [keep]) == [
        "1/state/1/0",
        "1/validation-record",
        "2/validation-record",
    ]
    assert discarded_keys(stored, 3) == [key for key in stored if key[0] in "123"]


def test_a_participant_may_report_only_chunks_it_inherits_unchanged() -> None:
    previous = (chunk(3, 0), chunk(4, 0, delta=True))
    check_descriptors([*previous, chunk(5, 0, delta=True)], 5, "state", previous)
    altered = ChunkDescriptor(previous[0].key, 2, 1, previous[0].checksum)
    for foreign in (altered, chunk(2, 0)):
        with pytest.raises(ValueError, match="foreign chunk"):
            check_descriptors([foreign], 5, "state", previous)
    with pytest.raises(ValueError, match="foreign chunk"):
        check_descriptors([previous[0]], 5, "state")


def run_snapshot(cluster: Cluster, driver: Driver, items: int) -> None:
    driver.pipeline.process(items)
    cluster.clock.now += INTERVAL_MS
    assert driver.coordinator.take_snapshot().successful
    driver.coordinator.finish_snapshot()


def test_an_incremental_job_inherits_unchanged_partitions_and_restores_the_chain() -> None:
    cluster = Cluster(INCREMENTAL_JOB)
    driver = cluster.start_driver()
    driver.coordinator.restore()
    run_snapshot(cluster, driver, 21)  # every key: the first snapshot is full
    # Item 21 has key 0, in partition 0 of 3: partitions 1 and 2 are inherited.
    run_snapshot(cluster, driver, 1)
    state = driver.pipeline.state
    assert state.writes[-1] == {0: Write.DELTA, 1: Write.KEEP, 2: Write.KEEP}
    map_name = "__sj.b1.chain.1c6f-uid"
    latest = validate_snapshot(cluster.snapshots, map_name, 1)
    assert latest.format_version == 3
    inherited = [c.key for c in latest.chunks if c.key.snapshot_id == 0]
    assert {(k.operator, k.partition) for k in inherited} == {("state", p) for p in range(3)}
    # The record's totals and the status count what the snapshot wrote, not what it lists.
    own = [c for c in latest.chunks if c.key.snapshot_id == 1]
    assert (
        latest.num_bytes == sum(c.num_bytes for c in own) < sum(c.num_bytes for c in latest.chunks)
    )
    stats = cluster.records.record.snapshot_stats
    assert stats is not None and stats.num_chunks == len(own)
    # Step 8a left the restore point's chain whole in the one map.
    assert cluster.records.record.data_map_index == 2
    restarted = cluster.start_driver()
    restarted.coordinator.restore()
    assert restarted.pipeline.state.counts == FakeKeyedState.expected_counts(range(22))


def test_a_lost_chunk_of_the_restore_point_makes_the_next_snapshot_full(
    caplog: pytest.LogCaptureFixture,
) -> None:
    cluster = Cluster(INCREMENTAL_JOB)
    driver = cluster.start_driver()
    driver.coordinator.restore()
    run_snapshot(cluster, driver, 21)
    del cluster.snapshots.maps["__sj.b1.chain.1c6f-uid"]["0/state/2/0"]
    with caplog.at_level(logging.WARNING, "snapshot_protocol.coordinator"):
        run_snapshot(cluster, driver, 1)
    assert driver.pipeline.state.writes[-1] == dict.fromkeys(range(3), Write.FULL)
    assert "Restore point lost chunks, snapshot written in full snapshotId=1 base=0" in caplog.text
    restarted = cluster.start_driver()
    restarted.coordinator.restore()
    assert restarted.pipeline.state.counts == FakeKeyedState.expected_counts(range(22))


def test_a_lost_delta_fails_the_restore_naming_the_snapshot_that_wrote_it() -> None:
    cluster = Cluster(INCREMENTAL_JOB)
    driver = cluster.start_driver()
    driver.coordinator.restore()
    run_snapshot(cluster, driver, 21)
    run_snapshot(cluster, driver, 3)  # keys 0, 1, 2: a delta in every partition
    run_snapshot(cluster, driver, 1)  # key 3 (partition 0); it is partition 2's turn
    assert driver.pipeline.state.writes[-1] == {0: Write.DELTA, 1: Write.KEEP, 2: Write.FULL}
    del cluster.snapshots.maps["__sj.b1.chain.1c6f-uid"]["1/state/1/0"]
    restarted = cluster.start_driver()
    with pytest.raises(SnapshotCorrupted) as error:
        restarted.coordinator.restore()
    assert error.value.snapshot_id == 2
    assert "'1/state/1/0'" in error.value.problem
