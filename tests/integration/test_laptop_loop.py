"""A pipeline author's loop with nothing but the installed wheel: run, ``kill -9``, run again.

The README's first example (``examples/first_pipeline.py``), run as a user runs it: a fresh
virtualenv with ``snapshotjob[runtime]`` (:mod:`tests.fixtures.fresh_venv`), the pipeline
file in an empty directory, ``python -m spark_runtime run first_pipeline.py``. No Hazelcast,
no Kubernetes, no checkout on the path: the snapshots go to the embedded store under
``.snapshotjob``. The driver is killed with ``SIGKILL`` after its second snapshot; the same
command restores, the job is exported while it runs and suspended with a terminal export, a
second job starts from the terminal export, and the first resumes. Every event id the sink
committed is counted: each job's ids exactly once.
"""

from __future__ import annotations

import collections
import csv
import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "first_pipeline.py"

END = 30_000
RATE = 500
"""The job counts to END at RATE a second: a minute paced, so a restore, an export and a
suspend fit in it; a restore after a pause catches up at once."""

_RESTORED_OFFSET = re.compile(r'Restored source name=numbers offset=\{"next": (\d+)')


def _user_environment() -> dict[str, str]:
    """The environment of a user's shell: none of the checkout's paths or virtualenv."""
    return {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "VIRTUAL_ENV", "SJ_FAILPOINTS")
    }


class Job:
    """``python -m spark_runtime`` of the fresh virtualenv, in the user's directory."""

    def __init__(self, python: Path, work: Path) -> None:
        self.python = python
        self.work = work
        self.runs = 0

    def start(self, *args: str) -> tuple[subprocess.Popen[bytes], Path]:
        """Starts ``run first_pipeline.py`` with ``args``; returns the process and its log."""
        self.runs += 1
        log = self.work / f"run-{self.runs}.log"
        command = [str(self.python), "-m", "spark_runtime", "run", "first_pipeline.py"]
        command += ["--snapshot-interval-ms", "1000", "--arg", f"end={END}"]
        command += ["--arg", f"rate={RATE}", *args]
        with open(log, "wb") as output:
            process = subprocess.Popen(
                command,
                cwd=self.work,
                env=_user_environment(),
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return process, log

    def command(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Runs ``python -m spark_runtime <args>`` to its end."""
        return subprocess.run(
            [str(self.python), "-m", "spark_runtime", *args],
            cwd=self.work,
            env=_user_environment(),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )


def _wait_for(log: Path, pattern: str, process: subprocess.Popen[bytes], timeout_s: float) -> str:
    """Waits for a line matching ``pattern`` in ``log``; returns the line."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            if re.search(pattern, line):
                return line
        assert process.poll() is None, f"driver ended rc={process.returncode}: {_tail(log)}"
        time.sleep(0.2)
    raise AssertionError(f"no line {pattern!r} within {timeout_s:.0f} s: {_tail(log)}")


def _tail(log: Path) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-30:])


def _wait_gone(session: int, timeout_s: float = 60) -> None:
    """Waits until no process of the killed driver's session is left (its Spark JVM ends
    when the pipe to its parent closes)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            os.killpg(session, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    os.killpg(session, signal.SIGKILL)
    raise AssertionError("a process of the killed driver outlived it")


def _event_ids(work: Path, job_uid: str) -> collections.Counter[int]:
    """Every event id in the job's committed output directories."""
    ids: collections.Counter[int] = collections.Counter()
    for part in (work / "out" / "events").glob(f"events-{job_uid}-*/part-*"):
        with open(part, newline="") as rows:
            ids.update(int(row[0]) for row in csv.reader(rows))
    return ids


def _assert_once(ids: collections.Counter[int], expected: range) -> None:
    repeated = {n: c for n, c in ids.items() if c > 1}
    missing = set(expected) - set(ids)
    strays = set(ids) - set(expected)
    assert (len(missing), len(repeated), len(strays)) == (0, 0, 0), (
        f"missing={sorted(missing)[:10]} ({len(missing)}) repeated={list(repeated.items())[:10]} "
        f"({len(repeated)}) strays={sorted(strays)[:10]} ({len(strays)})"
    )


def _final_sums(work: Path, job_uid: str) -> dict[int, tuple[int, int]]:
    """key -> (total, count) as the job's last committed output of each key says."""
    latest: dict[int, tuple[int, int]] = {}
    directories = (work / "out" / "sums").glob(f"sums-out-{job_uid}-*")
    for directory in sorted(directories, key=lambda d: int(d.name.rsplit("-", 1)[1])):
        for part in directory.glob("part-*"):
            with open(part, newline="") as rows:
                for key, total, count in csv.reader(rows):
                    latest[int(key)] = (int(total), int(count))
    return latest


def test_a_pipeline_file_survives_kill_9_suspend_and_export_with_only_the_wheel(
    runtime_venv: Path, tmp_path: Path
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(EXAMPLE, work / "first_pipeline.py")
    job = Job(runtime_venv, work)

    # 1. Run it; kill -9 the driver (the Python process alone, as a user would) after its
    # second snapshot.
    started = time.monotonic()
    first, log = job.start()
    _wait_for(log, r"Snapshot done snapshotId=0 ", first, 180)
    first_snapshot_s = time.monotonic() - started
    _wait_for(log, r"Snapshot done snapshotId=1 ", first, 60)
    first.kill()
    first.wait()
    _wait_gone(first.pid)
    uid = (work / ".snapshotjob" / "jobs" / "first-pipeline" / "job-uid").read_text().strip()
    print(f"first run: first snapshot {first_snapshot_s:.1f} s after the command")

    # 2. The same command restores the last snapshot; export the job as it runs, then
    # suspend it with a terminal export.
    second, log = job.start()
    restored = _wait_for(log, r"Restored snapshotId=\d+ ", second, 180)
    assert int(re.findall(r"snapshotId=(\d+)", restored)[0]) >= 1, restored
    _wait_for(log, r"Snapshot done snapshotId=\d+ ", second, 60)
    exported = job.command("export", "first_pipeline.py", "--as", "mid")
    assert exported.returncode == 0, exported.stderr
    assert "Exported snapshot" in exported.stdout
    suspended = job.command("suspend", "first_pipeline.py", "--export", "golden")
    assert suspended.returncode == 0, suspended.stderr
    # TERMINATED (64) is no failure: the process exits 0 and its log says it ended as asked.
    assert second.wait(timeout=60) == 0, _tail(log)
    assert "suspended at snapshot" in suspended.stdout
    at = re.findall(r"suspended at snapshot (\d+)", suspended.stdout)[0]
    ended = f"Ended as asked: mode=SUSPEND_GRACEFUL snapshotId={at} exportName=golden"
    assert ended in log.read_text(), _tail(log)

    # 3. A stopped job has no driver to take an export: the command says what to do.
    refused = job.command("export", "first_pipeline.py", "--as", "late")
    assert refused.returncode == 1
    assert "is not running" in refused.stderr and "suspend --export" in refused.stderr

    # 4. A second job starts from the terminal export and runs to the end.
    third, log = job.start("--name", "from-golden", "--from-export", "golden")
    assert third.wait(timeout=300) == 0, _tail(log)
    golden_offset = int(_RESTORED_OFFSET.findall(log.read_text())[0])
    assert 0 < golden_offset < END
    second_uid = (work / ".snapshotjob" / "jobs" / "from-golden" / "job-uid").read_text().strip()
    _assert_once(_event_ids(work, second_uid), range(golden_offset, END))

    # 5. The suspended job resumes from its terminal snapshot and completes.
    fourth, log = job.start()
    assert fourth.wait(timeout=300) == 0, _tail(log)
    assert int(_RESTORED_OFFSET.findall(log.read_text())[0]) == golden_offset
    _assert_once(_event_ids(work, uid), range(END))
    expected = {k: (sum(range(k, END, 10)), len(range(k, END, 10))) for k in range(10)}
    assert _final_sums(work, uid) == expected
    exports = {e["name"] for e in _exports(work)}
    assert exports == {"mid", "golden"}


def _exports(work: Path) -> list[dict[str, object]]:
    listed: list[dict[str, object]] = json.loads(
        (work / ".snapshotjob" / "jobs" / "first-pipeline" / "exports.json").read_text()
    )
    return listed
