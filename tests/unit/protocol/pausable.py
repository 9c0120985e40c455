"""Coordinator calls that stop in the middle: the means by which the zombie model pauses a driver.

A driver the operator replaced is not dead; it continues exactly where it stopped, in the middle
of a coordinator call. To stop a call there, it runs in a thread of its own that hands control
back to the state machine at every *pause point*: every failpoint the coordinator passes, every
write to the snapshot maps, and the moment a sink's restore settles the job's transactions.
Only one thread ever runs at a time (a strict hand-off through two semaphores), so runs stay
deterministic and hypothesis can replay and shrink them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from snapshot_protocol import Failpoints

_current = threading.local()


def pause_point(point: str) -> None:
    """Hands control back to the machine if the calling thread is a pausable call."""
    call: PausableCall | None = getattr(_current, "call", None)
    if call is not None:
        call.pause(point)


class PausingFailpoints(Failpoints):
    """Failpoints that are also pause points of a driver whose call runs paused."""

    def hit(self, name: str) -> None:
        pause_point(name)
        super().hit(name)


class ZombieKilled(BaseException):
    """Ends a paused call at the end of a run; nothing in the protocol catches it."""


class PausableCall:
    """One coordinator call, run in its own thread, stopped at every pause point it passes.

    Args:
        name: For messages, e.g. ``take_snapshot()``.
        call: The call.
    """

    def __init__(self, name: str, call: Callable[[], object]) -> None:
        self.name = name
        self._call = call
        self._call_runs = threading.Semaphore(0)
        self._machine_runs = threading.Semaphore(0)
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._killed = False
        self.done = False
        self.error: BaseException | None = None
        self.paused_at = "its start"

    def _run(self) -> None:
        _current.call = self
        self._call_runs.acquire()
        try:
            if self._killed:
                raise ZombieKilled(self.name)
            self._call()
        except BaseException as error:
            self.error = error
        finally:
            self.done = True
            self.paused_at = "its end"
            self._machine_runs.release()

    def pause(self, point: str) -> None:
        """Called in the call's thread: waits until the machine lets it go on."""
        self.paused_at = point
        self._machine_runs.release()
        self._call_runs.acquire()
        if self._killed:
            raise ZombieKilled(point)

    def step(self) -> None:
        """Lets the call run to its next pause point or to its end."""
        assert not self.done
        if not self._thread.is_alive():
            self._thread.start()
        self._call_runs.release()
        self._machine_runs.acquire()

    def kill(self) -> None:
        """Ends the call where it is paused (the process is gone)."""
        if not self.done:
            self._killed = True
            self.step()
        if self._thread.is_alive():
            self._thread.join()
