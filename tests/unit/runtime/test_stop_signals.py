"""The stop-signal watchdog: a driver reports its exit before the grace period ends.

Real signals are sent to this process (SIGTERM, SIGINT); the handlers pytest had are put back
after each test.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest

from snapshotjob_contract import DRIVER_GRACE_SECONDS, EXIT_REPORT_AFTER_SIGNAL_SECONDS
from spark_runtime.driver_settings import StopSignals

pytestmark = pytest.mark.unit

OVERDUE_S = 0.3


@pytest.fixture(autouse=True)
def _restore_handlers() -> Iterator[None]:
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)}
    yield
    for sig, handler in saved.items():
        signal.signal(sig, handler)
    signal.set_wakeup_fd(-1)


class Reports:
    """Counts the watchdog's calls, and when the first came."""

    def __init__(self) -> None:
        self.calls = 0
        self.at: float | None = None
        self.called = threading.Event()

    def __call__(self) -> None:
        self.calls += 1
        self.at = time.monotonic()
        self.called.set()


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_not_served_in_time_is_reported_once(signum: int) -> None:
    reports = Reports()
    signals = StopSignals(on_overdue=reports, overdue_after_s=OVERDUE_S)
    signals.install()
    sent = time.monotonic()
    os.kill(os.getpid(), signum)
    assert reports.called.wait(5)
    assert signals.received
    assert reports.at is not None and reports.at - sent >= OVERDUE_S
    time.sleep(OVERDUE_S * 2)
    assert reports.calls == 1


def test_a_signal_another_thread_caught_is_reported_while_the_main_thread_waits() -> None:
    """The kernel may hand a process signal to any thread; the main thread, blocked in a
    C-level wait, then runs no Python handler until the wait ends. The report must not wait."""
    reports = Reports()
    signals = StopSignals(on_overdue=reports, overdue_after_s=OVERDUE_S)
    signals.install()

    def catch_one() -> None:
        time.sleep(0.2)  # The main thread is in its wait by now.
        signal.pthread_kill(threading.get_ident(), signal.SIGTERM)

    catcher = threading.Thread(target=catch_one)
    catcher.start()
    # Blocked in a lock wait the signal does not interrupt, as a driver waiting for a step.
    assert reports.called.wait(5), "reported only once the main thread's wait ended"
    catcher.join()
    assert signals.received


def test_a_signal_served_in_time_is_not_reported() -> None:
    reports = Reports()
    signals = StopSignals(on_overdue=reports, overdue_after_s=OVERDUE_S)
    signals.install()
    os.kill(os.getpid(), signal.SIGTERM)
    assert signals.received
    signals.served()
    assert not reports.called.wait(OVERDUE_S * 3)


def test_no_signal_no_report() -> None:
    reports = Reports()
    StopSignals(on_overdue=reports, overdue_after_s=OVERDUE_S).install()
    assert not reports.called.wait(OVERDUE_S * 3)


def test_a_failing_report_only_logs(caplog: pytest.LogCaptureFixture) -> None:
    def refuse() -> None:
        raise RuntimeError("API server unreachable")

    signals = StopSignals(on_overdue=refuse, overdue_after_s=OVERDUE_S)
    signals.install()
    os.kill(os.getpid(), signal.SIGTERM)
    deadline = time.monotonic() + 5
    while "Could not report the overdue stop" not in caplog.text:
        assert time.monotonic() < deadline, caplog.text
        time.sleep(0.05)
    assert signals.received


def test_the_report_leaves_time_for_its_own_retries() -> None:
    # The record store tries a report for up to 5 s; the kubelet kills at the grace period.
    assert EXIT_REPORT_AFTER_SIGNAL_SECONDS + 5 < DRIVER_GRACE_SECONDS
