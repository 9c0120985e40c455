"""A local job's directory (spark_runtime.local_jobs): its uid, driver lock, requests, exports.

The commands that use it against a real driver are tested in
``tests/integration/test_laptop_loop.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from snapshotjob_contract.modes import TerminationMode
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.local_jobs import LocalJobDir, check_job_name, job_name_of

pytestmark = pytest.mark.unit


def test_a_job_is_named_after_its_pipeline_and_keeps_its_uid(tmp_path: Path) -> None:
    assert job_name_of("pipelines/my_pipeline.py") == "my-pipeline"
    assert job_name_of("examples.word_count") == "word-count"
    assert check_job_name("word-count") == "word-count"
    with pytest.raises(ValueError, match="not a DNS label"):
        check_job_name("Word_Count")
    job = LocalJobDir(tmp_path, "word-count")
    uid = job.job_uid()
    assert uid.startswith("word-count-") and len(uid) == len("word-count-") + 8
    assert LocalJobDir(tmp_path, "word-count").job_uid() == uid
    assert LocalJobDir(tmp_path, "other").job_uid() != uid
    assert job.store_dir == LocalJobDir(tmp_path, "other").store_dir == tmp_path / "store"


def test_a_driver_runs_while_it_holds_the_lock(tmp_path: Path) -> None:
    job = LocalJobDir(tmp_path, "job")
    assert not job.driver_running()
    lock = job.hold_driver_lock()
    second = job.hold_driver_lock()  # a newer driver is not refused: it fences the older
    assert job.driver_running()
    lock.close()
    assert job.driver_running()
    second.close()
    assert not job.driver_running()


def test_a_suspend_request_is_taken_once_and_old_requests_are_forgotten(tmp_path: Path) -> None:
    job = LocalJobDir(tmp_path, "job")
    assert job.take_termination_request() is None
    job.request_suspend("golden")
    request = job.take_termination_request()
    assert request is not None
    assert (request.mode, request.export_name) == (TerminationMode.SUSPEND_GRACEFUL, "golden")
    assert job.take_termination_request() is None
    job.request_suspend(None)
    job.request_export("mid")
    job.forget_requests()
    assert job.take_termination_request() is None and job.export_request() is None


def test_an_export_closes_its_request_and_replaces_one_of_the_same_name(tmp_path: Path) -> None:
    job = LocalJobDir(tmp_path, "job")
    request_id = job.request_export("mid")
    pending = job.export_request()
    assert pending is not None and (pending.name, pending.request_id) == ("mid", request_id)

    def export(name: str, snapshot_id: int) -> ExportedSnapshot:
        return ExportedSnapshot(
            name=name,
            snapshot_id=snapshot_id,
            num_bytes=10,
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            terminal=False,
        )

    job.add_export(export("mid", 2))
    assert job.export_request() is None
    job.add_export(export("golden", 3))
    job.add_export(export("mid", 4))
    assert [(e.name, e.snapshot_id) for e in job.exports()] == [("golden", 3), ("mid", 4)]
