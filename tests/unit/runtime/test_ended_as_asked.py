"""A driver that ended as asked (TERMINATED, 64) exits 0, and says why where it is read.

The process's status goes through one mapping (``process_exit_status``): 0 for TERMINATED,
every other code as it is. The meaning travels in the termination message, which starts
``Ended as asked:`` and names the mode and the terminal snapshot; the operator, reading it
from the Pod as the kubelet hands it over, takes the exit 0 for 64. A local ``suspend`` does
not see the driver's exit at all: it knows the job suspended from the record the driver marks.
"""

from __future__ import annotations

import argparse
import io
import threading
import time
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace
from typing import Any, cast

import pytest

from snapshot_operator.reconcile.exits import driver_exit_code
from snapshot_operator.reconcile.observe import parse_driver_pod
from snapshot_protocol import ExecutionEnd, SnapshotOutcome
from snapshotjob_contract.exits import ENDED_AS_ASKED_PREFIX, DriverExit, process_exit_status
from snapshotjob_contract.modes import SnapshotKind, TerminationMode
from snapshotjob_contract.record import ExecutionRecord
from spark_runtime import cli
from spark_runtime.driver import Driver
from spark_runtime.execution import ended_as_asked_message, write_termination_message
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.local_command import run_request_command
from spark_runtime.local_jobs import LocalJobDir

pytestmark = pytest.mark.unit


@pytest.mark.parametrize("code", list(DriverExit), ids=lambda c: c.name)
def test_only_terminated_changes_on_its_way_to_the_process_status(code: DriverExit) -> None:
    expected = 0 if code is DriverExit.TERMINATED else code.value
    assert process_exit_status(code) == expected
    assert isinstance(process_exit_status(code), int) and 0 <= expected <= 255


@pytest.mark.parametrize(
    ("ended", "status"),
    [
        (DriverExit.TERMINATED, 0),
        (DriverExit.COMPLETED, 0),
        (DriverExit.FAILED, 1),
        (DriverExit.FENCED, 77),
        (DriverExit.INTERRUPTED, 143),
    ],
    ids=lambda value: getattr(value, "name", str(value)),
)
def test_the_driver_process_exits_0_when_it_ended_as_asked(
    monkeypatch: pytest.MonkeyPatch, ended: DriverExit, status: int
) -> None:
    monkeypatch.setattr(cli, "open_mode", lambda ns: object())
    monkeypatch.setattr(cli, "run", lambda mode, metrics_port=None: ended)

    assert cli.main(["run", "pipeline.py"]) == status


def _driver(end: ExecutionEnd | None, outcome: SnapshotOutcome | None) -> Driver:
    """A driver whose execution ended with ``end``, after the snapshot ``outcome``."""
    coordinator = SimpleNamespace(execution_end=end, last_outcome=outcome)
    return cast(Driver, SimpleNamespace(coordinator=coordinator))


def _outcome(kind: SnapshotKind, export_name: str | None = None) -> SnapshotOutcome:
    return SnapshotOutcome(7, kind, "map", export_name, successful=True, failure=None)


@pytest.mark.parametrize(
    ("mode", "outcome", "expected"),
    [
        (
            TerminationMode.SUSPEND_GRACEFUL,
            _outcome(SnapshotKind.TERMINAL),
            "mode=SUSPEND_GRACEFUL snapshotId=7",
        ),
        (
            TerminationMode.CANCEL_GRACEFUL,
            _outcome(SnapshotKind.TERMINAL_EXPORTED, "golden"),
            "mode=CANCEL_GRACEFUL snapshotId=7 exportName=golden",
        ),
        # Without snapshots (processingGuarantee NONE) a graceful request is served forcefully.
        (TerminationMode.SUSPEND_FORCEFUL, None, "mode=SUSPEND_FORCEFUL"),
        (
            TerminationMode.RESTART_FORCEFUL,
            _outcome(SnapshotKind.AUTOMATIC),
            "mode=RESTART_FORCEFUL",
        ),
    ],
)
def test_the_termination_message_names_the_mode_and_the_terminal_snapshot(
    mode: TerminationMode, outcome: SnapshotOutcome | None, expected: str
) -> None:
    message = ended_as_asked_message(_driver(ExecutionEnd("served", mode), outcome))

    assert message == ENDED_AS_ASKED_PREFIX + expected


def test_the_operator_reads_the_message_as_written_as_an_end_as_asked(tmp_path: Path) -> None:
    termination_log = tmp_path / "termination-log"
    termination_log.touch()  # the kubelet creates it in the container
    driver = _driver(
        ExecutionEnd("served", TerminationMode.SUSPEND_GRACEFUL), _outcome(SnapshotKind.TERMINAL)
    )
    assert write_termination_message(ended_as_asked_message(driver), str(termination_log))
    terminated = {"exitCode": 0, "reason": "Completed", "message": termination_log.read_text()}
    raw: dict[str, Any] = {
        "metadata": {"name": "job-driver-2", "labels": {"snapshotjob.io/execution-id": "e2"}},
        "status": {
            "phase": "Succeeded",
            "containerStatuses": [{"name": "driver", "state": {"terminated": terminated}}],
        },
    }

    pod = parse_driver_pod(raw)

    assert pod is not None and pod.exit_code == 0
    assert driver_exit_code(pod, None) == DriverExit.TERMINATED
    assert driver_exit_code(replace(pod, termination_message=None), None) == 0, "no word"


def _play_a_driver(job: LocalJobDir, suspends: bool) -> threading.Thread:
    """A driver that holds the job's lock until it takes the suspend request, then stops:
    suspended (its record marked) if ``suspends``, else completed before it served it."""
    records = FileRecordStore.claim(job.record_file, "exec-1")
    records.write_standard(ExecutionRecord())
    lock = job.hold_driver_lock()

    def serve() -> None:
        deadline = time.monotonic() + 10
        while job.take_termination_request() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        if suspends:
            records.write_standard(ExecutionRecord().suspended_because("SUSPEND_GRACEFUL"))
        lock.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    return thread


@pytest.mark.parametrize("suspends", [True, False], ids=["suspended", "completed-first"])
def test_a_local_suspend_knows_from_the_record_whether_the_job_suspended(
    tmp_path: Path, suspends: bool, capsys: pytest.CaptureFixture[str]
) -> None:
    job = LocalJobDir(tmp_path, "job")
    driver = _play_a_driver(job, suspends)
    ns = argparse.Namespace(
        command="suspend",
        name="job",
        pipeline_path=None,
        state_dir=tmp_path,
        timeout=10.0,
        export=None,
    )
    out = io.StringIO()

    code = run_request_command(ns, out)
    driver.join(timeout=10)

    if suspends:
        assert code == 0, capsys.readouterr().err
        assert "suspended at snapshot" in out.getvalue()
    else:
        assert code == 1
        assert "stopped without suspending" in capsys.readouterr().err
