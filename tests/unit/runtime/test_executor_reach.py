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


def test_the_message_names_executors_members_and_what_to_look_at() -> None:
    unreached = [Unreached(f"exec-{i}", f"m{i}:5701", "TimeoutError: timed out") for i in range(6)]
    message = unreached_message(unreached, "jobs")
    assert message.startswith("The executors cannot reach the snapshot store, though the driver")
    assert "exec-0 -> m0:5701: TimeoutError: timed out" in message
    assert "exec-4" not in message and "(and 2 more)" in message
    assert "policies in namespace jobs that select the executors (spark-role=executor)" in message
    assert "snapshotjob.io/store" in message
