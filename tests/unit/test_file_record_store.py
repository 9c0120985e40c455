"""The local record store: durable replace, fencing of older executions, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from snapshot_protocol.errors import RecordStoreError, ZombieExecution
from snapshotjob_contract.record import ExecutionRecord
from spark_runtime.file_record_store import FileRecordStore


def _record(snapshot_id: int) -> ExecutionRecord:
    return ExecutionRecord(
        snapshot_id=snapshot_id, ongoing_snapshot_id=snapshot_id, data_map_index=snapshot_id % 2
    )


def test_a_new_job_reads_the_initial_record(tmp_path: Path) -> None:
    store = FileRecordStore.claim(tmp_path / "job" / "record.json", "exec-1")
    assert store.read() == ExecutionRecord()


def test_safe_write_survives_a_new_store_object(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    FileRecordStore.claim(path, "exec-1").write_safe(_record(4))
    assert FileRecordStore(path, "any reader").read().snapshot_id == 4
    assert not list(tmp_path.glob(".record.json.*.tmp")), "no partial file left behind"


def test_claim_keeps_the_record_and_fences_the_older_execution(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    old = FileRecordStore.claim(path, "exec-1")
    old.write_safe(_record(2))

    new = FileRecordStore.claim(path, "exec-2")
    assert new.read().snapshot_id == 2
    with pytest.raises(ZombieExecution, match="exec-2"):
        old.write_safe(_record(3))
    old.write_standard(_record(3))  # best effort: refused quietly
    assert new.read().snapshot_id == 2


def test_a_damaged_file_is_reported_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "record.json"
    path.write_text("{not json")
    with pytest.raises(RecordStoreError, match="delete it to start the job without state"):
        FileRecordStore(path, "exec-1").read()
