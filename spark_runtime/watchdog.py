"""The driver's step watchdog: ends an execution whose epoch or sink call outlives its timeout.

A wedged step cannot be interrupted from Python: a sink blocked in a socket read, a Spark job
waiting for executors that never come back, a lock another thread never releases. So the
watchdog does not try to undo the step. A thread of its own notices the step's deadline pass
and hands the overrun to ``on_overdue``, which in a driver process reports exit 70
(``STALLED``) and ends the process (:func:`spark_runtime.execution.run`): a crash at any
moment is safe, the next execution restores the last snapshot (docs/concepts/protocol.md),
and the restart goes through the restart policy. Without ``on_overdue`` (a driver inside a
test process) nothing is watched.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter, SnapshotRef
from snapshot_protocol.ports import ChunkReader, Participant

_log = logging.getLogger(__name__)

Overdue = Callable[[str], None]
"""Told why the step is overdue (its name and timeout), once; it is expected to end the
process."""


class StepWatchdog:
    """Watches one step at a time against its deadline, from a daemon thread.

    Args:
        on_overdue: Called once, from the watchdog's thread, when a step outlives its timeout;
            None watches nothing.
        poll_s: How often the thread looks at the clock.
        clock: Monotonic seconds.
    """

    def __init__(
        self,
        on_overdue: Overdue | None,
        *,
        poll_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._on_overdue = on_overdue
        self._poll_s = poll_s
        self._clock = clock
        self._lock = threading.Lock()
        self._step: tuple[str, float, float] | None = None
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired: str | None = None
        """The message of the overrun that was handed on, if one was."""

    @contextmanager
    def step(self, what: str, timeout_s: float) -> Iterator[None]:
        """Watches the block as one step: ``what`` overdue once it runs ``timeout_s`` seconds.

        Steps do not nest: a step inside another watches the inner one, then the outer again.
        """
        if self._on_overdue is None:
            yield
            return
        self._start()
        with self._lock:
            outer = self._step
            self._step = (what, timeout_s, self._clock() + timeout_s)
        try:
            yield
        finally:
            with self._lock:
                self._step = outer

    def close(self) -> None:
        """Stops watching; a step still open is no longer watched."""
        self._closed.set()

    def _start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._watch, name="step-watchdog", daemon=True)
            self._thread.start()

    def _watch(self) -> None:
        while not self._closed.wait(self._poll_s):
            with self._lock:
                step = self._step
            if step is None or self._clock() < step[2]:
                continue
            what, timeout_s, _ = step
            self.fired = (
                f"{what} outlived its timeout timeoutSeconds={timeout_s:g}: the driver ended "
                "the execution, which restarts from the last snapshot (spec.stallDetection)"
            )
            _log.error("Step outlived its timeout step=%s timeoutSeconds=%g", what, timeout_s)
            assert self._on_overdue is not None
            self._on_overdue(self.fired)
            return


class WatchedSink:
    """A sink's snapshot participant whose calls (prepare, commit, restore) are watched steps.

    Args:
        participant: The sink's participant.
        watchdog: The execution's watchdog.
        timeout_s: How long one call may take (``spec.stallDetection.sinkTimeoutSeconds``).
    """

    def __init__(self, participant: Participant, watchdog: StepWatchdog, timeout_s: float) -> None:
        self._participant = participant
        self._watchdog = watchdog
        self._timeout_s = timeout_s

    @property
    def name(self) -> str:
        """The sink's operator name."""
        return self._participant.name

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """The 1st phase, watched."""
        with self._watchdog.step(self._call("prepare", snapshot_id), self._timeout_s):
            return self._participant.save_and_prepare(snapshot_id, writer, export_only)

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """The 2nd phase, watched."""
        with self._watchdog.step(self._call("commit", snapshot_id), self._timeout_s):
            self._participant.commit_finish(snapshot_id, success)

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        """Restore step 5, watched."""
        with self._watchdog.step(self._call("restore", through_snapshot_id), self._timeout_s):
            self._participant.restore(snapshot, reader, through_snapshot_id)

    def _call(self, what: str, snapshot_id: int) -> str:
        return f"Sink {self.name} {what} snapshotId={snapshot_id}"
