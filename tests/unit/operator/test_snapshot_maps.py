"""The operator's store clients: one per store, and connecting to one never blocks another.

Connecting is what takes long (up to the 30 s connect timeout of an unreachable external
store), so it must be locked per store: a global lock would hold every other job's copy and
cleanup, and the worker threads they run in, behind one dead store.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import pytest

from snapshot_operator import snapshot_maps
from snapshot_operator.snapshot_maps import SnapshotMaps

pytestmark = pytest.mark.filterwarnings("error")


class _Lifecycle:
    def __init__(self) -> None:
        self.running = True

    def is_running(self) -> bool:
        return self.running


class _Client:
    def __init__(self, members: Sequence[str]) -> None:
        self.members = tuple(members)
        self.lifecycle_service = _Lifecycle()

    def shutdown(self) -> None:
        """Nothing to release."""


def test_a_store_that_is_slow_to_connect_does_not_hold_back_another(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    release = threading.Event()
    connects: list[tuple[str, ...]] = []

    def connect(members: Sequence[str], cluster_name: str, **_: Any) -> _Client:
        connects.append(tuple(members))
        if tuple(members) == ("dead:5701",):
            assert release.wait(10), "never released"
        return _Client(members)

    monkeypatch.setattr(snapshot_maps, "connect", connect)
    monkeypatch.setattr(snapshot_maps, "HazelcastSnapshotStore", lambda client: client)
    maps = SnapshotMaps()
    stuck = threading.Thread(target=maps._store, args=(["dead:5701"], "external"), daemon=True)
    stuck.start()
    while ("dead:5701",) not in connects:
        threading.Event().wait(0.01)

    done = threading.Thread(target=maps._store, args=(["hz-0:5701"], "snapshotjob"))
    done.start()
    done.join(5)

    assert not done.is_alive(), "the healthy store waited for the dead one"
    release.set()
    stuck.join(5)
    maps._store(["hz-0:5701"], "snapshotjob")
    maps._store(["dead:5701"], "external")
    assert sorted(connects) == [("dead:5701",), ("hz-0:5701",)], "one client per store"
    maps.close()


def test_a_client_that_shut_down_is_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """A client gives up after its connect timeout without a member; the next use reconnects."""
    clients: list[_Client] = []

    def connect(members: Sequence[str], cluster_name: str, **_: Any) -> _Client:
        clients.append(_Client(members))
        return clients[-1]

    monkeypatch.setattr(snapshot_maps, "connect", connect)
    monkeypatch.setattr(snapshot_maps, "HazelcastSnapshotStore", lambda client: client)
    maps = SnapshotMaps()
    first = maps._store(["hz-0:5701"], "snapshotjob")
    assert maps._store(["hz-0:5701"], "snapshotjob") is first
    clients[0].lifecycle_service.running = False
    second = maps._store(["hz-0:5701"], "snapshotjob")
    assert second is not first and len(clients) == 2
