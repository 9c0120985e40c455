"""The operator's requests to a running driver, read from the SnapshotJob status.

The operator asks a driver to stop (``status.termination``) or to export a snapshot
(``status.exportRequest``) by writing the job's status, the same object whose
``status.executionRecord`` :mod:`spark_runtime.kube_record_store` keeps. The driver only
serves requests at epoch boundaries, so a background thread reads the job every few seconds
and the driver's loop picks up what it found without waiting on the API server.

Each request carries a ``requestId`` and is handed over once: the operator leaves a request
in place until it sees its effect (it clears ``termination`` once the execution stopped and
``exportRequest`` once the export is listed in ``status.exportedSnapshots``), so the same
request is read many times; an export that timed out is asked for again under a new id.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from pydantic import ValidationError

from snapshot_protocol import TerminationRequest
from snapshotjob_contract.base import explain
from snapshotjob_contract.status import ExportRequestStatus, TerminationStatus
from spark_runtime.driver import ExportRequest

# The driver's own messages have always come from this logger, whichever module logs them.
_log = logging.getLogger("spark_runtime")


class OperatorRequestPoller:
    """Polls ``status.termination`` and ``status.exportRequest`` in a background thread.

    Args:
        fetch: Returns the SnapshotJob object.
        interval_s: Time between polls.
    """

    def __init__(self, fetch: Callable[[], Mapping[str, Any]], interval_s: float = 2.0) -> None:
        self._fetch = fetch
        self._interval_s = interval_s
        self._request: TerminationRequest | None = None
        self._export: ExportRequest | None = None
        self._seen: set[str] = set()
        self._seen_exports: set[str] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="operator-requests", daemon=True)

    def start(self) -> None:
        """Starts polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stops polling."""
        self._stop.set()

    def poll_termination(self) -> TerminationRequest | None:
        """Returns a new termination request once; None otherwise."""
        with self._lock:
            request, self._request = self._request, None
            return request

    def poll_export(self) -> ExportRequest | None:
        """Returns a new export request once; None otherwise."""
        with self._lock:
            request, self._export = self._export, None
            return request

    def observe(self, job: Mapping[str, Any]) -> None:
        """Takes the requests out of one read of the SnapshotJob.

        Both requests are read through the contract's status models, the ones the operator
        writes them with; a request that does not parse is logged once and ignored, since
        the operator escalates a graceful request that is not served.
        """
        status = job.get("status") or {}
        export = _first_sight(
            status.get("exportRequest"), self._seen_exports, ExportRequestStatus, "export"
        )
        if export is not None:
            _log.info("Export requested requestId=%s name=%s", export.request_id, export.name)
            with self._lock:
                self._export = ExportRequest(export.name, export.request_id)
        termination = _first_sight(
            status.get("termination"), self._seen, TerminationStatus, "termination"
        )
        if termination is not None:
            request = TerminationRequest(termination.mode, termination.export_name)
            _log.info(
                "Termination requested requestId=%s mode=%s",
                termination.request_id,
                request.mode.name,
            )
            with self._lock:
                self._request = request

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.observe(self._fetch())
            except Exception as error:  # the API server may be briefly unreachable
                _log.warning("Could not read the operator's requests error=%s", error)


_Request = TypeVar("_Request", TerminationStatus, ExportRequestStatus)


def _first_sight(
    raw: Mapping[str, Any] | None, seen: set[str], model: type[_Request], what: str
) -> _Request | None:
    """Parses a request the first time its ``requestId`` is seen; None if seen or invalid.

    The operator leaves a request in place until it sees its effect, so every poll reads it
    again: only the first read counts, a bad request included (it is logged once).
    """
    if not raw:
        return None
    request_id = str(raw.get("requestId", ""))
    if request_id in seen:
        return None
    seen.add(request_id)
    try:
        return model.model_validate(raw)
    except ValidationError as error:
        _log.error(
            "Ignoring bad %s request requestId=%s error=%s", what, request_id, explain(error)
        )
        return None
