"""Runs the real driver process (``python -m spark_runtime run``) in local mode.

Chaos tests, the demo and the benchmark must stop the driver the way a node failure would
(SIGKILL of the Python process, its Spark JVM and Python workers together), so the driver runs
as a separate process group; this starts it, kills it, and reads its log to tell how far it got.
Zombie tests need two executions of one job at once: a driver that stopped itself at a
``pause`` failpoint is let go of (:meth:`DriverHarness.detach`) while the harness starts its
replacement, and is sent ``SIGCONT`` later. It lived in ``spark_runtime.devtools`` until the
test bed became a package of its own: test tooling stays out of the product's wheel.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from snapshotjob_contract.record import ExecutionRecord
from testbed.processes import start_in_own_session

REPO = Path(__file__).resolve().parents[1]
"""The checkout, put on the driver's PYTHONPATH so it finds example pipeline modules."""

_LOG_TIME_FORMAT = "%Y-%m-%d %H:%M:%S,%f"


def log_time(text: str, needle: str) -> datetime | None:
    """When the first log line holding ``needle`` was written, from the driver's log format.

    The driver logs ``<asctime> <level> <logger> <message>``, e.g.
    ``2026-11-23 00:30:01,123 INFO spark_runtime Snapshot done ...``; local time, like
    :meth:`datetime.now`.
    """
    for line in text.splitlines():
        if needle in line:
            try:
                return datetime.strptime(line[:23], _LOG_TIME_FORMAT)
            except ValueError:
                continue
    return None


def _stopped(pid: int) -> bool:
    """Whether the process is stopped by a signal (state ``T`` in ``/proc/<pid>/stat``)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rpartition(")")[2].split()[0] == "T"


@dataclass
class DetachedDriver:
    """An execution the harness let go of so that it could start the next one: a zombie.

    Attributes:
        name: ``driver-NNN``, as its log file is named.
        process: The driver's Python process (the leader of its process group).
        log: Its log file.
        exit_code: Its exit code once it ended.
    """

    name: str
    process: subprocess.Popen[bytes]
    log: Path
    exit_code: int | None = None

    def log_text(self) -> str:
        """Its log."""
        return self.log.read_text(errors="replace")

    def stopped(self) -> bool:
        """Whether it is stopped (by its own ``pause`` failpoint or a ``SIGSTOP``)."""
        return self.process.poll() is None and _stopped(self.process.pid)

    def resume(self) -> None:
        """Lets it carry on with ``SIGCONT``."""
        os.kill(self.process.pid, signal.SIGCONT)

    def wait(self, timeout: float = 300.0) -> int:
        """Waits for it to end and returns its exit code; SIGKILLs it after ``timeout``."""
        try:
            self.exit_code = self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"{self.name} did not end in {timeout}s; log {self.log}") from None
        return self.exit_code

    def kill(self) -> None:
        """SIGKILLs its whole process group, stopped or not."""
        if self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGKILL)
        self.exit_code = self.process.wait()


@dataclass
class DriverHarness:
    """Starts executions of one local-mode job, one at a time.

    Attributes:
        workdir: Record file and driver logs go here.
        members: ``host:port`` of the Hazelcast members.
        cluster_name: The Hazelcast cluster's name.
        job_uid: The job's uid (names its maps and transactions).
        pipeline: The pipeline module.
        args: The pipeline's arguments.
        guarantee: The processing guarantee.
        snapshot_interval_ms: Snapshot interval.
        state_partitions: Keyed state partitions.
        backup_count: Synchronous backups of the job's snapshot maps (``--backup-count``).
        extra_args: More driver options.
        environment: More environment variables of the driver, e.g. the ``SJ_KAFKA_*`` the
            operator sets from ``spec.kafka``.
        wrap: Turns the driver's command line into the one to start, e.g.
            :meth:`testbed.netns.Host.argv` to run the driver in a network host.
        starts: How many executions were started.
        exit_codes: Exit codes of the executions that ended.
    """

    workdir: Path
    members: list[str]
    cluster_name: str
    job_uid: str
    pipeline: str
    args: dict[str, object]
    guarantee: str = "EXACTLY_ONCE"
    snapshot_interval_ms: int = 1000
    state_partitions: int = 4
    backup_count: int = 1
    extra_args: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    wrap: Callable[[list[str]], list[str]] | None = None
    starts: int = 0
    exit_codes: list[int] = field(default_factory=list)
    _process: subprocess.Popen[bytes] | None = field(default=None, init=False, repr=False)
    _log: Path | None = field(default=None, init=False, repr=False)

    def command(self) -> list[str]:
        """The driver's command line."""
        return [
            sys.executable,
            "-m",
            "spark_runtime",
            "run",
            "--pipeline",
            self.pipeline,
            "--args-json",
            json.dumps(self.args),
            "--record-file",
            str(self.workdir / "record.json"),
            "--hazelcast",
            ",".join(self.members),
            "--cluster-name",
            self.cluster_name,
            "--job-uid",
            self.job_uid,
            "--guarantee",
            self.guarantee,
            "--snapshot-interval-ms",
            str(self.snapshot_interval_ms),
            "--state-partitions",
            str(self.state_partitions),
            "--backup-count",
            str(self.backup_count),
            *self.extra_args,
        ]

    def start(self, failpoints: str | None = None) -> None:
        """Starts an execution (with ``SJ_FAILPOINTS`` if given)."""
        assert self._process is None or self._process.poll() is not None, "driver running"
        self.starts += 1
        self._log = self.workdir / f"driver-{self.starts:03d}.log"
        env = {**os.environ, "PYTHONPATH": str(REPO), **self.environment}
        env.pop("SJ_FAILPOINTS", None)
        if failpoints:
            env["SJ_FAILPOINTS"] = failpoints
        with self._log.open("wb") as out:
            # Not tied to this process: a chaos run kills the driver, never the other way.
            command = self.command()
            self._process = start_in_own_session(
                f"driver-{self.starts:03d}",
                self.wrap(command) if self.wrap else command,
                out,
                env=env,
                cwd=REPO,
                tie_to_parent=False,
            )

    def running(self) -> bool:
        """Whether the current execution is alive."""
        return self._process is not None and self._process.poll() is None

    def wait_paused(self, failpoint: str, timeout: float = 180.0) -> None:
        """Waits until the current execution stopped itself at the ``pause`` failpoint.

        Raises:
            AssertionError: If the driver ended or did not stop there in ``timeout`` seconds.
        """
        needle = f"Failpoint pausing failpoint={failpoint} "
        assert self.wait_for_log(needle, timeout=timeout), (
            f"driver ended before pausing at {failpoint}:\n{self.log_tail()}"
        )
        assert self._process is not None
        deadline = time.monotonic() + 30
        while not _stopped(self._process.pid):
            assert time.monotonic() < deadline and self.running(), (
                f"driver logged the pause at {failpoint} but did not stop:\n{self.log_tail()}"
            )
            time.sleep(0.1)

    def resume(self) -> None:
        """Lets the current execution carry on after a ``pause`` failpoint (``SIGCONT``)."""
        assert self._process is not None, "no execution started"
        os.kill(self._process.pid, signal.SIGCONT)

    def detach(self) -> DetachedDriver:
        """Lets go of the current execution, running or stopped, so the next can start."""
        assert self._process is not None and self._log is not None, "no execution started"
        detached = DetachedDriver(f"driver-{self.starts:03d}", self._process, self._log)
        self._process = None
        self._log = None
        return detached

    def record(self) -> ExecutionRecord:
        """The execution record in the job's record file, as the next execution will read it."""
        document = json.loads((self.workdir / "record.json").read_text())
        return ExecutionRecord.from_dict(document.get("executionRecord"))

    def log_text(self) -> str:
        """The current execution's log."""
        return self._log.read_text(errors="replace") if self._log else ""

    def wait_for_log(self, needle: str, count: int = 1, timeout: float = 120.0) -> bool:
        """Waits until the log holds ``needle`` ``count`` times; False if the driver ended."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.log_text().count(needle) >= count:
                return True
            if not self.running():
                return self.log_text().count(needle) >= count
            time.sleep(0.2)
        raise TimeoutError(f"driver log never had {needle!r} x{count}: {self._log}")

    def kill(self) -> bool:
        """SIGKILLs the driver's whole process group (Python, JVM, Python workers).

        Returns:
            Whether it was still running.
        """
        assert self._process is not None
        alive = self._process.poll() is None
        if alive:
            os.killpg(self._process.pid, signal.SIGKILL)
        self.exit_codes.append(self._process.wait())
        return alive

    def wait(self, timeout: float = 300.0) -> int:
        """Waits for the execution to end and returns its exit code."""
        assert self._process is not None
        try:
            code = self._process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            raise AssertionError(f"driver did not end in {timeout}s; log {self._log}") from None
        self.exit_codes.append(code)
        return code

    def log_tail(self, lines: int = 60) -> str:
        """The end of the current execution's log, for assertion messages."""
        return "\n".join(self.log_text().splitlines()[-lines:])
