"""The driver's durable copies of exports (spark_runtime.durable), on the protocol's fakes.

Both stores are the in-memory fakes of ``tests/unit/protocol/fakes.py``; copies to a real S3
server, made by a driver process, are tested in
``tests/integration/test_driver_kubernetes.py``.
"""

from __future__ import annotations

import logging

import pytest

from snapshot_protocol import validate_snapshot
from snapshot_protocol.chunks import validation_record_id
from snapshotjob_contract.environment import (
    ENV_DURABLE_BUCKET,
    ENV_DURABLE_ENDPOINT,
    ENV_DURABLE_PREFIX,
    ENV_DURABLE_REGION,
)
from spark_runtime.durable import COPY_ATTEMPTS, DurableCopies, DurableStorage
from tests.unit.protocol.fakes import Cluster, Fault, Op
from tests.unit.protocol.snapshots import MAP, write_snapshot

pytestmark = pytest.mark.unit

STORAGE = DurableStorage(bucket="snapshots", prefix="team-a/jobs")


def _source(*snapshot_ids: int) -> Cluster:
    cluster = Cluster()
    for snapshot_id in snapshot_ids:
        cluster.records.record = cluster.records.record.start_new_snapshot(snapshot_id)
        write_snapshot(cluster, snapshot_id, 3)
    return cluster


def _target() -> Cluster:
    target = Cluster()
    target.snapshots.foreign_maps.add(MAP)  # the copies keep the exporting job's ids
    return target


def test_a_copy_is_verified_and_its_location_named() -> None:
    source, target = _source(0), _target()
    copies = DurableCopies(STORAGE, target.snapshots, sleep=lambda s: None)

    location = copies.copy_export(source.snapshots, "golden", MAP, 0)

    assert location == f"s3://snapshots/team-a/jobs/{MAP}/0"
    assert validate_snapshot(target.snapshots, MAP, 0) == validate_snapshot(
        source.snapshots, MAP, 0
    )


def test_a_newer_copy_of_the_same_export_replaces_the_older() -> None:
    source, target = _source(0, 4), _target()
    copies = DurableCopies(STORAGE, target.snapshots, sleep=lambda s: None)

    copies.copy_export(source.snapshots, "golden", MAP, 0)
    copies.copy_export(source.snapshots, "golden", MAP, 4)

    assert target.snapshots.latest_snapshot_id(MAP) == 4
    assert target.snapshots.get_validation_record(MAP, 0) is None
    assert all(key.startswith("4/") for key in target.snapshots.maps[MAP]), sorted(
        target.snapshots.maps[MAP]
    )


def test_a_failed_write_is_tried_again_a_bounded_number_of_times(
    caplog: pytest.LogCaptureFixture,
) -> None:
    source, target = _source(0), _target()
    waits: list[float] = []
    copies = DurableCopies(STORAGE, target.snapshots, sleep=waits.append)

    target.faults.arm([(Op.CHUNK_PUT, 1, Fault.FAILED)])
    assert copies.copy_export(source.snapshots, "golden", MAP, 0) is not None
    assert waits == [2.0]

    waits.clear()
    target.snapshots.maps.clear()
    target.faults.arm([(Op.VALIDATION_PUT, n, Fault.FAILED) for n in range(COPY_ATTEMPTS)])
    with caplog.at_level(logging.ERROR, logger="spark_runtime"):
        assert copies.copy_export(source.snapshots, "golden", MAP, 0) is None
    assert len(waits) == COPY_ATTEMPTS - 1
    assert "Durable copy failed name=golden snapshotId=0 location=s3://snapshots/" in caplog.text
    assert f"attempts={COPY_ATTEMPTS}" in caplog.text
    assert target.snapshots.get_validation_record(MAP, 0) is None


def test_a_corrupted_export_is_not_copied_nor_tried_again(caplog: pytest.LogCaptureFixture) -> None:
    source, target = _source(0), _target()
    chunk = next(
        key for key in sorted(source.snapshots.maps[MAP]) if validation_record_id(key) is None
    )
    source.snapshots.maps[MAP][chunk] = b"datX"
    waits: list[float] = []
    copies = DurableCopies(STORAGE, target.snapshots, sleep=waits.append)

    with caplog.at_level(logging.ERROR, logger="spark_runtime"):
        assert copies.copy_export(source.snapshots, "golden", MAP, 0) is None

    assert waits == []
    assert "Durable copy refused name=golden snapshotId=0 reason=SnapshotCorrupted" in caplog.text
    assert target.snapshots.latest_snapshot_id(MAP) is None


def test_the_storage_comes_from_the_environment_the_operator_sets() -> None:
    assert DurableStorage.from_environment({}) is None
    assert DurableStorage.from_environment({ENV_DURABLE_PREFIX: "x"}) is None
    storage = DurableStorage.from_environment(
        {
            ENV_DURABLE_BUCKET: "snapshots",
            ENV_DURABLE_PREFIX: "/team-a/",
            ENV_DURABLE_ENDPOINT: "http://s3.storage:9000",
            ENV_DURABLE_REGION: "eu-west-1",
        }
    )
    assert storage == DurableStorage("snapshots", "team-a", "http://s3.storage:9000", "eu-west-1")
    assert DurableStorage("b").location("m", 7) == "s3://b/m/7"


def test_the_automatic_snapshot_is_copied_first_at_once_then_at_most_once_per_interval() -> None:
    source, target = _source(0, 1, 2, 3), _target()
    target.snapshots.foreign_maps.add("copies")
    storage = DurableStorage("snapshots", snapshot_copy_interval_s=60)
    copies = DurableCopies(storage, target.snapshots, sleep=lambda s: None)
    clock = iter([0.0, 30.0, 61.0, 200.0])

    def now() -> float:
        return next(clock)

    made = [copies.copy_snapshot_if_due(source.snapshots, MAP, n, "copies", now) for n in range(3)]

    assert made == [True, False, True]
    # Only the newest copy is kept.
    assert target.snapshots.latest_snapshot_id("copies") == 2
    assert target.snapshots.get_validation_record("copies", 0) is None
    # A failed copy is not counted: the next snapshot is copied even within the interval.
    target.faults.arm([(Op.VALIDATION_PUT, 0, Fault.FAILED)])
    assert copies.copy_snapshot_if_due(source.snapshots, MAP, 3, "copies", now) is False
    assert copies.copy_snapshot_if_due(source.snapshots, MAP, 3, "copies", lambda: 201.0)
    assert target.snapshots.latest_snapshot_id("copies") == 3


def test_a_terminal_snapshot_is_copied_whatever_the_interval() -> None:
    source, target = _source(0, 1), _target()
    target.snapshots.foreign_maps.add("copies")
    storage = DurableStorage("snapshots", snapshot_copy_interval_s=3600)
    copies = DurableCopies(storage, target.snapshots, sleep=lambda s: None)

    assert copies.copy_snapshot_if_due(source.snapshots, MAP, 0, "copies", lambda: 0.0)
    assert copies.copy_snapshot(source.snapshots, MAP, 1, "copies")
    assert target.snapshots.latest_snapshot_id("copies") == 1


def test_without_an_interval_no_snapshot_is_copied() -> None:
    source, target = _source(0), _target()
    copies = DurableCopies(STORAGE, target.snapshots, sleep=lambda s: None)
    assert copies.copy_snapshot_if_due(source.snapshots, MAP, 0, "copies") is False
    assert copies.copy_snapshot(source.snapshots, MAP, 0, "copies") is False
    assert not target.snapshots.maps.get("copies")
