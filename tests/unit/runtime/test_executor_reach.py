"""The executors' store check: what one executor task tries, and the message that names it.

The check itself (the tasks on real executors, a real NetworkPolicy in the way) runs on kind in
``tests/e2e/test_network_policy_kind.py``; here the task's connections go to loopback sockets.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from spark_runtime.executor_reach import Unreached, try_members, unreached_message


@pytest.fixture
def listening() -> Iterator[str]:
    """A loopback ``host:port`` that accepts connections."""
    server = socket.create_server(("127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{server.getsockname()[1]}"
    finally:
        server.close()


@pytest.fixture
def closed() -> str:
    """A loopback ``host:port`` nothing listens on (a connection is refused)."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
    return f"127.0.0.1:{port}"


def test_a_task_names_each_member_it_could_not_connect_to(listening: str, closed: str) -> None:
    assert try_members([listening], 2.0, 7) == []
    (failed,) = try_members([listening, closed], 2.0, 7)
    assert failed.member == closed and failed.executor == socket.gethostname()
    assert failed.error.startswith("ConnectionRefusedError")


def test_the_message_names_members_and_what_to_look_at_within_what_the_operator_keeps() -> None:
    member = "sj-snapshotjob-operator-hazelcast-0.sj-snapshotjob-operator-hazelcast.team-a.svc:5701"
    unreached = [
        Unreached(f"np-blocked-executors-exec-{i % 2}", member.replace("-0.", f"-{i}."), error)
        for i in range(9)
        for error in ("TimeoutError: timed out " + "x" * 200,)
    ]
    message = unreached_message(unreached)
    assert message.startswith("The executors cannot reach the snapshot store, though the driver")
    example = "e.g. to sj-snapshotjob-operator-hazelcast-0:5701: TimeoutError: timed out"
    assert f"9 connections from 2 executor(s) failed, {example}" in message
    assert "spark-role=executor" in message and "snapshotjob.io/store" in message
    # The operator passes on the last 400 characters of a driver's message.
    assert len(message) <= 400, len(message)
    assert "10.244.1.7:5701" in unreached_message([Unreached("e", "10.244.1.7:5701", "refused")])
