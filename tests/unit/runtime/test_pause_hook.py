"""The driver's pause hook: what a ``pause`` failpoint does in a real driver process.

The hook stops its own process with SIGSTOP; here ``os.kill`` is replaced by a recorder, so
the test checks which signal goes to which process without stopping the test run. The real
stop and SIGCONT are exercised by ``tests/integration/test_zombie_fencing.py``.
"""

from __future__ import annotations

import logging
import os
import signal

import pytest

from snapshot_protocol import FailpointAction, Failpoints
from spark_runtime import execution

pytestmark = pytest.mark.unit


def test_pause_here_stops_its_own_process_and_logs_around_the_stop(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(execution.os, "kill", lambda pid, sig: sent.append((pid, sig)))
    failpoints = Failpoints(
        {"take.before_step_5": FailpointAction.PAUSE}, pause=execution.pause_here
    )

    with caplog.at_level(logging.INFO, logger="spark_runtime"):
        failpoints.hit("take.before_step_5")

    assert sent == [(os.getpid(), signal.SIGSTOP)]
    messages = [record.getMessage() for record in caplog.records]
    assert messages == [
        f"Failpoint pausing failpoint=take.before_step_5 pid={os.getpid()}",
        f"Failpoint resumed failpoint=take.before_step_5 pid={os.getpid()}",
    ]
