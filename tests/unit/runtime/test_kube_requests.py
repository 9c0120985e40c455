"""The operator's termination and export requests, each handed to the driver once."""

from __future__ import annotations

from typing import Any

from snapshot_protocol import TerminationMode
from spark_runtime.driver import ExportRequest
from spark_runtime.kube_requests import OperatorRequestPoller


def _status(request_id: str, mode: str, export: str | None = None) -> dict[str, Any]:
    termination = {
        "mode": mode,
        "requestId": request_id,
        "requestedAt": "2026-01-01T00:00:00Z",
        "reason": "SuspendRequested",
    }
    if export is not None:
        termination["exportName"] = export
    return {"status": {"termination": termination}}


def test_each_termination_request_is_handed_over_once() -> None:
    poller = OperatorRequestPoller(dict)
    poller.observe(_status("r1", "CANCEL_GRACEFUL", "final"))
    request = poller.poll_termination()
    assert request is not None
    assert request.mode is TerminationMode.CANCEL_GRACEFUL
    assert request.export_name == "final"
    poller.observe(_status("r1", "CANCEL_GRACEFUL", "final"))
    assert poller.poll_termination() is None
    poller.observe({"status": {}})
    assert poller.poll_termination() is None


def test_malformed_termination_requests_are_ignored() -> None:
    poller = OperatorRequestPoller(dict)
    poller.observe(_status("r2", "RESTART_SOMETIMES"))
    poller.observe(_status("r3", "SUSPEND_FORCEFUL", "export-of-a-forceful-stop"))
    no_time = _status("r4", "SUSPEND_GRACEFUL")
    del no_time["status"]["termination"]["requestedAt"]
    poller.observe(no_time)
    assert poller.poll_termination() is None
    # The same ids are not read again, even once they would parse: each is handed over once.
    poller.observe(_status("r4", "SUSPEND_GRACEFUL"))
    assert poller.poll_termination() is None


def _export_status(request_id: str, name: str) -> dict[str, Any]:
    return {
        "status": {
            "exportRequest": {
                "name": name,
                "requestId": request_id,
                "requestedAt": "2026-01-01T00:00:00Z",
            }
        }
    }


def test_each_export_request_is_handed_over_once() -> None:
    poller = OperatorRequestPoller(dict)
    poller.observe(_export_status("e1", "nightly"))
    assert poller.poll_export() == ExportRequest("nightly", "e1")
    assert poller.poll_termination() is None  # not a termination request
    poller.observe(_export_status("e1", "nightly"))
    assert poller.poll_export() is None
    # The operator timed out and asks again under a new id.
    poller.observe(_export_status("e2", "nightly"))
    assert poller.poll_export() == ExportRequest("nightly", "e2")


def test_export_and_termination_requests_are_read_from_one_status() -> None:
    poller = OperatorRequestPoller(dict)
    both = _export_status("e1", "nightly")
    both["status"]["termination"] = _status("t1", "SUSPEND_GRACEFUL")["status"]["termination"]
    poller.observe(both)
    request = poller.poll_termination()
    assert request is not None and request.mode is TerminationMode.SUSPEND_GRACEFUL
    assert poller.poll_export() == ExportRequest("nightly", "e1")


def test_export_request_without_a_name_is_ignored() -> None:
    poller = OperatorRequestPoller(dict)
    poller.observe({"status": {"exportRequest": {"requestId": "e1"}}})
    assert poller.poll_export() is None
