"""The driver's step watchdog (spark_runtime/watchdog.py): an overrun is handed on once."""

from __future__ import annotations

import threading

from spark_runtime.watchdog import StepWatchdog


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _watchdog(clock: _Clock) -> tuple[StepWatchdog, list[str], threading.Event]:
    told: list[str] = []
    fired = threading.Event()

    def overdue(message: str) -> None:
        told.append(message)
        fired.set()

    return StepWatchdog(overdue, poll_s=0.01, clock=clock), told, fired


def test_a_step_past_its_timeout_is_handed_on_once_naming_it() -> None:
    clock = _Clock()
    watchdog, told, fired = _watchdog(clock)

    with watchdog.step("sink events commit_finish", 300):
        clock.now = 301
        assert fired.wait(5)
    watchdog.close()

    assert len(told) == 1
    assert "sink events commit_finish outlived its timeout timeoutSeconds=300" in told[0]
    assert watchdog.fired == told[0]


def test_steps_within_their_timeout_and_time_between_steps_are_not_overdue() -> None:
    clock = _Clock()
    watchdog, told, fired = _watchdog(clock)

    for epoch in range(3):
        with watchdog.step(f"epoch {epoch}", 10):
            clock.now += 9
        clock.now += 1000  # between steps: the loop's idle sleep, a snapshot's own steps
    assert not fired.wait(0.1)
    watchdog.close()

    assert told == []


def test_an_inner_step_is_watched_then_the_outer_one_again() -> None:
    clock = _Clock()
    watchdog, told, fired = _watchdog(clock)

    with watchdog.step("outer", 100):
        with watchdog.step("inner", 5):
            clock.now = 4
        clock.now = 50
        assert not fired.wait(0.1)
        clock.now = 101
        assert fired.wait(5)
    watchdog.close()

    assert told and told[0].startswith("outer outlived")


def test_without_a_handler_nothing_is_watched() -> None:
    watchdog = StepWatchdog(None)

    with watchdog.step("epoch 0", 0.001):
        pass

    assert watchdog.fired is None
