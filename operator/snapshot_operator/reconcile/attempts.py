"""Counting failed attempts: the next ``exportFailure`` or ``startFailure`` from the last one.

The executor records a copy the store failed and a create the API server refused in the
status instead of raising (:mod:`snapshot_operator.copying`, :mod:`snapshot_operator.launching`),
so that the decision can back off and give up after a few attempts. What it records is judged
here: an attempt at the same export (or execution) as the recorded one counts on from it, any
other starts again at one. Pure: the caller hands in the recorded failure as read.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from snapshotjob_contract import ExportFailureStatus, StartFailureStatus


def next_export_failure(
    previous: Mapping[str, Any], export_name: str, message: str, now: datetime
) -> ExportFailureStatus:
    """The ``exportFailure`` to record after a failed copy to ``export_name``.

    Args:
        previous: The status's ``exportFailure`` as read, empty if none.
        export_name: The export the copy was for.
        message: What went wrong.
        now: The time of the failure.
    """
    attempts = int(previous.get("attempts", 0)) + 1 if previous.get("name") == export_name else 1
    return ExportFailureStatus(name=export_name, attempts=attempts, message=message, time=now)


def next_start_failure(
    previous: Mapping[str, Any], execution_id: str, refused: str, message: str, now: datetime
) -> StartFailureStatus:
    """The ``startFailure`` to record after a refused create for the execution ``execution_id``.

    Args:
        previous: The status's ``startFailure`` as read, empty if none.
        execution_id: The execution whose start was refused.
        refused: The object the API server refused, as ``Kind/name``.
        message: What the API server answered.
        now: The time of the failure.
    """
    attempts = (
        int(previous.get("attempts", 0)) + 1 if previous.get("executionId") == execution_id else 1
    )
    return StartFailureStatus(
        execution_id=execution_id, object=refused, attempts=attempts, message=message, time=now
    )
