"""Counting failed attempts, and the identity a start from an export restores.

The judgement the executor's copy and start performers take from the decision: an attempt at
the recorded export (or execution) counts on, any other starts at one; only a completed export
of the asked-for name gives its identity.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from snapshot_operator.reconcile.attempts import next_export_failure, next_start_failure
from snapshot_operator.reconcile.exports import completed_export_identity

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)


def test_a_copy_failure_counts_on_for_the_same_export_and_starts_at_one_otherwise() -> None:
    first = next_export_failure({}, "daily", "Timeout: slow", NOW)
    assert (first.name, first.attempts, first.message, first.time) == (
        "daily",
        1,
        "Timeout: slow",
        NOW,
    )
    again = next_export_failure(first.to_json(), "daily", "Timeout: slow", NOW)
    assert again.attempts == 2
    other = next_export_failure(again.to_json(), "weekly", "Timeout: slow", NOW)
    assert other.attempts == 1


def test_a_start_failure_counts_on_for_the_same_execution_and_starts_at_one_otherwise() -> None:
    first = next_start_failure({}, "exec-1", "Pod/job-driver-1", "status=403 quota", NOW)
    assert (first.execution_id, first.object, first.attempts) == ("exec-1", "Pod/job-driver-1", 1)
    assert first.message == "status=403 quota"
    again = next_start_failure(first.to_json(), "exec-1", "Pod/job-driver-1", "x", NOW)
    assert again.attempts == 2
    other = next_start_failure(again.to_json(), "exec-2", "Pod/job-driver-2", "x", NOW)
    assert other.attempts == 1


def _export(name: str, phase: str, job_uid: str | None, snapshot_id: int | None) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if job_uid is not None:
        status["jobUid"] = job_uid
    if snapshot_id is not None:
        status["snapshotId"] = snapshot_id
    return {
        "metadata": {
            "name": name,
            "namespace": "default",
            "uid": f"uid-{name}",
            "creationTimestamp": "2026-01-01T00:00:00Z",
        },
        "spec": {"jobName": "wordcount"},
        "status": status,
    }


def test_only_a_completed_export_of_the_name_gives_its_identity() -> None:
    raws = [
        _export("other", "Completed", "job-1", 7),
        _export("daily", "InProgress", "job-1", None),
    ]
    assert completed_export_identity(raws, None) is None
    assert completed_export_identity(raws, "daily") is None
    raws.append(_export("daily-2", "Completed", "job-1", 9))
    assert completed_export_identity(raws, "daily-2") == ("job-1", 9)
