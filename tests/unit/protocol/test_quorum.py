"""Split-brain protection of a running execution (docs/concepts/protocol.md, mechanism M9).

The driver reports the store members its client reaches at every epoch boundary; the
coordinator raises the record's quorum from them (only upward, written with the next record
write) and stops the execution without a snapshot below it. Apart from the quorum, a driver
that reaches no member at all stops after ``store_lost_ms`` rather than wait on operations
that can only time out. The real partitions are in ``tests/integration/test_partitions.py``.
"""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    CoordinatorState,
    IllegalTransition,
    TerminationMode,
)

from .fakes import Cluster, Driver

pytestmark = pytest.mark.unit

S = CoordinatorState
STORE_LOST_MS = 30_000


def _running(protection: bool = True) -> tuple[Cluster, Driver]:
    cluster = Cluster()
    driver = cluster.start_driver(split_brain_protection=protection)
    driver.coordinator.restore()
    assert driver.coordinator.state is S.RUNNING
    return cluster, driver


def _snapshot(driver: Driver) -> None:
    driver.pipeline.process(3)
    outcome = driver.coordinator.take_snapshot()
    driver.coordinator.finish_snapshot()
    assert outcome.successful


def test_the_quorum_is_raised_from_the_members_seen_and_written_with_the_next_snapshot() -> None:
    cluster, driver = _running()

    assert driver.coordinator.observe_members(5)
    assert cluster.records.record.quorum_size == 0, "in memory until the next record write"
    _snapshot(driver)

    assert cluster.records.record.quorum_size == 3, "more than half of 5"
    assert driver.coordinator.observe_members(3), "3 of a quorum of 3 still goes on"
    _snapshot(driver)
    assert cluster.records.record.quorum_size == 3, "never lowered"


def test_below_the_quorum_the_execution_stops_without_a_snapshot() -> None:
    cluster, driver = _running()
    assert driver.coordinator.observe_members(3)
    _snapshot(driver)
    ongoing = cluster.records.record.ongoing_snapshot_id

    assert not driver.coordinator.observe_members(1)

    coordinator = driver.coordinator
    assert coordinator.state is S.RESTART_REQUIRED
    end = coordinator.execution_end
    assert end is not None and end.quorum_lost and not end.transient
    assert end.mode is TerminationMode.RESTART_FORCEFUL
    assert "reaches 1 store members, fewer than the quorum of 2" in end.reason
    assert cluster.records.record.ongoing_snapshot_id == ongoing, "no snapshot was started"
    assert cluster.violations == []


def test_without_split_brain_protection_the_quorum_is_neither_raised_nor_checked() -> None:
    cluster, driver = _running(protection=False)

    assert driver.coordinator.observe_members(5)
    _snapshot(driver)
    assert driver.coordinator.observe_members(1)

    assert cluster.records.record.quorum_size == 0
    assert driver.coordinator.state is S.RUNNING


@pytest.mark.parametrize("protection", [False, True])
def test_no_member_at_all_stops_the_execution_after_the_store_lost_time(
    protection: bool,
) -> None:
    cluster, driver = _running(protection)
    coordinator = driver.coordinator
    if protection:
        # A quorum of 0 (no member ever seen) cannot be lost: only the lost store ends it.
        assert cluster.records.record.quorum_size == 0

    assert coordinator.observe_members(0)
    cluster.clock.now += STORE_LOST_MS - 100
    assert coordinator.observe_members(0), "still within the store lost time"
    cluster.clock.now += 200

    assert not coordinator.observe_members(0)
    end = coordinator.execution_end
    assert end is not None and end.transient and not end.quorum_lost
    assert "reached no store member for 30 s" in end.reason
    assert coordinator.state is S.RESTART_REQUIRED


def test_a_member_reached_again_resets_the_store_lost_time() -> None:
    cluster, driver = _running(protection=False)
    coordinator = driver.coordinator
    assert coordinator.observe_members(0)
    cluster.clock.now += STORE_LOST_MS - 100
    assert coordinator.observe_members(1)
    assert coordinator.observe_members(0)
    cluster.clock.now += STORE_LOST_MS - 100

    assert coordinator.observe_members(0)
    assert coordinator.state is S.RUNNING


def test_members_are_checked_only_while_running() -> None:
    _, driver = _running()
    driver.pipeline.process(3)
    driver.coordinator.take_snapshot()
    state = driver.coordinator.state

    with pytest.raises(IllegalTransition):
        driver.coordinator.observe_members(0)

    assert driver.coordinator.state is state
    assert driver.coordinator.record is not None
    assert driver.coordinator.record.quorum_size == 0
