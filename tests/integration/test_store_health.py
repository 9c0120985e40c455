"""The operator's store health reads against the session's real 3-member Hazelcast cluster.

:class:`snapshot_operator.store_health.StoreHealthReader` keeps HTTP connections to the members
alive between reads. These tests check what that must not change: every read is answered by
a member now (a killed member's kept connection is not an answer, a restarted one is reached
again), a hung member costs one timeout and not two, and reads from many threads at once
each get a document. The connections are counted from this process's own sockets
(``/proc/self/fd`` against ``/proc/net/tcp``), against those the test process held before
(the session's Hazelcast clients).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from snapshot_operator.store_health import IDLE_CONNECTIONS_PER_MEMBER, StoreHealthReader
from testbed.hazelcast import HazelcastCluster

pytestmark = pytest.mark.integration

TIMEOUT = 1.0


@pytest.fixture
def reader() -> Iterator[StoreHealthReader]:
    health = StoreHealthReader()
    yield health
    health.close()


def _connections_to(port: int) -> int:
    """This process's established TCP connections to ``port`` on loopback."""
    inodes = set()
    for fd in Path("/proc/self/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    count = 0
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        remote_port = int(fields[2].split(":")[1], 16)
        established = fields[3] == "01"
        if established and remote_port == port and fields[9] in inodes:
            count += 1
    return count


def test_reads_share_one_connection_per_member(
    healthy_hazelcast: HazelcastCluster, reader: StoreHealthReader
) -> None:
    members = healthy_hazelcast.members()
    first_port = healthy_hazelcast.nodes[0].port
    before = _connections_to(first_port)
    for _ in range(20):
        document = reader.read_health(members, TIMEOUT)
        assert document is not None and document["clusterSize"] == 3
    assert _connections_to(first_port) == before + 1
    reader.close()
    assert _connections_to(first_port) == before


def test_a_killed_members_kept_connection_is_not_an_answer(
    healthy_hazelcast: HazelcastCluster, reader: StoreHealthReader
) -> None:
    members = healthy_hazelcast.members()
    idle_through_restart = StoreHealthReader()
    try:
        assert reader.read_health(members[:1], TIMEOUT) is not None
        assert idle_through_restart.read_health(members[:1], TIMEOUT) is not None
        healthy_hazelcast.kill(0)
        assert reader.read_health(members[:1], TIMEOUT) is None
        # The others answer, given time: their cluster-safety check may wait on the loss.
        answered = reader.read_health(members, 10 * TIMEOUT)
        assert answered is not None and answered["nodeState"] == "ACTIVE"
        healthy_hazelcast.restart(0)
        # Its kept connection died with the member: the restarted member is asked anew.
        assert idle_through_restart.read_health(members[:1], TIMEOUT) is not None
    finally:
        idle_through_restart.close()


def test_a_hung_member_costs_one_timeout(
    healthy_hazelcast: HazelcastCluster, reader: StoreHealthReader
) -> None:
    members = healthy_hazelcast.members()
    assert reader.read_health(members[:1], TIMEOUT) is not None
    healthy_hazelcast.pause(0)
    # Only the hung member is asked: with one member hung, the others' health answers may
    # wait on it too (their cluster-safety check asks every member), which is not what this
    # test measures.
    started = time.monotonic()
    document = reader.read_health(members[:1], TIMEOUT)
    elapsed = time.monotonic() - started
    assert document is None
    assert TIMEOUT * 0.9 <= elapsed < TIMEOUT * 1.8
    healthy_hazelcast.resume(0)
    assert reader.read_health(members[:1], TIMEOUT) is not None


def test_reads_from_many_threads_at_once(
    healthy_hazelcast: HazelcastCluster, reader: StoreHealthReader
) -> None:
    members = healthy_hazelcast.members()
    before = _connections_to(healthy_hazelcast.nodes[0].port)
    answers: list[bool] = []
    lock = threading.Lock()

    def read_many() -> None:
        for _ in range(25):
            ok = reader.read_health(members, TIMEOUT) is not None
            with lock:
                answers.append(ok)

    threads = [threading.Thread(target=read_many) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == [True] * 200
    kept = _connections_to(healthy_hazelcast.nodes[0].port) - before
    assert 1 <= kept <= IDLE_CONNECTIONS_PER_MEMBER
