"""Peak memory of the scale curve's processes, sampled from ``/proc``.

``bench.scale_curve`` reports what each point took in the driver JVM, its Python workers, the
driver's Python process and the Hazelcast members; none of them reports it, so this samples
their resident sets while a point runs and reads each one's ``VmHWM`` at its end. Linux only.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path


def parse_status(text: str) -> dict[str, int]:
    """The ``kB`` fields of a ``/proc/<pid>/status`` (``VmRSS``, ``VmHWM``, ...) in bytes."""
    fields: dict[str, int] = {}
    for line in text.splitlines():
        name, _, value = line.partition(":")
        parts = value.split()
        if len(parts) == 2 and parts[1] == "kB" and parts[0].isdigit():
            fields[name] = int(parts[0]) * 1024
    return fields


def parent_of(stat: str) -> int:
    """The parent pid in a ``/proc/<pid>/stat`` line (the command may hold spaces and ``)``)."""
    return int(stat.rsplit(")", 1)[1].split()[1])


def descendants(children: Mapping[int, Sequence[int]], root: int) -> list[int]:
    """Every process below ``root`` in a pid -> children map, nearest first."""
    found: list[int] = []
    queue = list(children.get(root, ()))
    while queue:
        pid = queue.pop(0)
        found.append(pid)
        queue.extend(children.get(pid, ()))
    return found


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def _status(pid: int) -> dict[str, int]:
    text = _read(f"/proc/{pid}/status")
    return parse_status(text) if text is not None else {}


def _pss(pid: int) -> int:
    """The process's proportional set size: shared pages split among their sharers, so the
    forked Python workers' sum counts the daemon's pages once."""
    text = _read(f"/proc/{pid}/smaps_rollup")
    return parse_status(text).get("Pss", 0) if text is not None else 0


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            stat = _read(f"/proc/{entry}/stat")
            if stat is not None:
                children.setdefault(parent_of(stat), []).append(int(entry))
    return children


def _cmdline(pid: int) -> str:
    return (_read(f"/proc/{pid}/cmdline") or "").replace("\0", " ")


def _reset_peak(pid: int) -> None:
    """Resets the process's ``VmHWM`` to its current RSS (Linux ``clear_refs`` 5)."""
    try:
        with open(f"/proc/{pid}/clear_refs", "w", encoding="ascii") as handle:
            handle.write("5")
    except OSError:
        pass  # not permitted or gone: the sampled peak still counts


@dataclass
class Peaks:
    """Peak resident memory during a point, in bytes.

    Attributes:
        driver_jvm: The driver JVM (in local mode also the executors' JVM).
        workers: The Python workers together (the sum of their proportional set sizes), at
            the sampled moment they held most.
        worker_max: The largest single Python worker.
        driver_python: This process (the driver's Python side, the raw baseline's client).
        member_max: The largest Hazelcast member.
        workers_phase: The step of the point during which ``workers`` was sampled.
    """

    driver_jvm: int = 0
    workers: int = 0
    worker_max: int = 0
    driver_python: int = 0
    member_max: int = 0
    workers_phase: str = ""


class MemoryWatch:
    """Samples the resident memory of the driver JVM, its Python workers and the members.

    Args:
        jvm_pid: The driver JVM.
        member_pids: The Hazelcast members.
        interval: Seconds between samples.
    """

    def __init__(self, jvm_pid: int, member_pids: Sequence[int], interval: float = 0.5) -> None:
        self.jvm_pid = jvm_pid
        self.member_pids = list(member_pids)
        self.interval = interval
        self.phase = ""
        self._peaks = Peaks()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def workers(self) -> list[int]:
        """The driver JVM's Python workers (``pyspark.daemon`` and its forks) now."""
        return [pid for pid in descendants(_children(), self.jvm_pid) if "pyspark" in _cmdline(pid)]

    def _sample(self) -> None:
        jvm = _status(self.jvm_pid).get("VmRSS", 0)
        pids = self.workers()
        workers = [_status(pid).get("VmRSS", 0) for pid in pids]
        shared_out = sum(_pss(pid) for pid in pids)
        members = [_status(pid).get("VmRSS", 0) for pid in self.member_pids]
        own = _status(os.getpid()).get("VmRSS", 0)
        with self._lock:
            peaks = self._peaks
            peaks.driver_jvm = max(peaks.driver_jvm, jvm)
            if shared_out > peaks.workers:
                peaks.workers, peaks.workers_phase = shared_out, self.phase
            peaks.worker_max = max([peaks.worker_max, *workers])
            peaks.member_max = max([peaks.member_max, *members])
            peaks.driver_python = max(peaks.driver_python, own)

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self._sample()

    @contextmanager
    def point(self) -> Iterator[Peaks]:
        """Watches one point; the yielded peaks are complete when the block ends."""
        for pid in [self.jvm_pid, *self.member_pids, *self.workers(), os.getpid()]:
            _reset_peak(pid)
        self._peaks = result = Peaks()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="memory-watch", daemon=True)
        self._thread.start()
        try:
            yield result
        finally:
            self._stop.set()
            self._thread.join()
            self._sample()
            # VmHWM catches what happened between two samples.
            with self._lock:
                result.driver_jvm = max(result.driver_jvm, _status(self.jvm_pid).get("VmHWM", 0))
                result.driver_python = max(
                    result.driver_python, _status(os.getpid()).get("VmHWM", 0)
                )
                for pid in self.workers():
                    result.worker_max = max(result.worker_max, _status(pid).get("VmHWM", 0))
                for pid in self.member_pids:
                    result.member_max = max(result.member_max, _status(pid).get("VmHWM", 0))


def member_pids(hazelcast_dir: Path) -> list[int]:
    """The pids of the members whose configs live in ``hazelcast_dir``."""
    marker = f"-Dhazelcast.config={hazelcast_dir}"
    return [
        int(entry)
        for entry in os.listdir("/proc")
        if entry.isdigit() and marker in _cmdline(int(entry))
    ]


def mem_available() -> int:
    """``MemAvailable`` of ``/proc/meminfo`` in bytes."""
    return parse_status(_read("/proc/meminfo") or "").get("MemAvailable", 0)
