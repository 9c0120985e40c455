"""The execution record in the SnapshotJob status: the product's linearizable store.

Jet keeps its JobExecutionRecord in an IMap and has to make writes "safe" by repeating them
until no backup is in doubt. Here the record lives in ``status.executionRecord`` of the
SnapshotJob, i.e. in etcd, and a write is safe once the API server answered 2xx
(docs/concepts/protocol.md, "The execution record" and "Safe and standard writes"). What remains of
Jet's
``writeJobExecutionRecordSafe`` is the loop around the outcomes that are not yet determinate:

* 409 Conflict: someone else (the operator, usually) changed the object since our read. Re-read
  and re-apply; the status patch carries the ``resourceVersion`` of the read, so it can never
  overwrite a change it did not see.
* A time-out or broken connection: the patch may or may not have been applied. Re-read: if the
  stored record is ours, it was; otherwise write again.
* ``status.execution.id`` differs from ours: a newer execution owns the job and this driver is a
  zombie. Checking the id and writing happen against the same ``resourceVersion``, so the fence
  is atomic.

The driver also appends the snapshots it exports to ``status.exportedSnapshots``
(:meth:`KubernetesRecordStore.append_exported_snapshot`), with the same optimistic lock and
fence, so a zombie can never report an export as the current execution's.

Once its pipeline runs the driver reports it in ``status.pipelineStarted``
(:meth:`KubernetesRecordStore.report_pipeline_started`), fenced in the same way: the operator
shows the job RUNNING only from then on.

Only this module writes to the API server on the runtime's behalf.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import urllib3.exceptions
from kubernetes.client import CustomObjectsApi
from kubernetes.client.exceptions import ApiException

from snapshot_protocol.errors import (
    IndeterminateRecordWrite,
    RecordStoreError,
    ZombieExecution,
)
from snapshotjob_contract.record import ExecutionRecord
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)


# Errors after which a request may or may not have reached etcd.
_IN_DOUBT = (
    urllib3.exceptions.TimeoutError,
    urllib3.exceptions.ProtocolError,
    urllib3.exceptions.MaxRetryError,
    ConnectionError,
    TimeoutError,
)


class KubernetesRecordStore:
    """The :class:`~snapshot_protocol.ports.RecordStore` port on the SnapshotJob status.

    Args:
        api: A client for custom objects.
        namespace: The SnapshotJob's namespace.
        name: The SnapshotJob's name.
        execution_id: This driver's fencing token, as the operator wrote it to
            ``status.execution.id`` before starting the driver.
        deadline_s: How long ``write_safe`` keeps trying before it gives up as indeterminate.
        request_timeout_s: Time-out of each API request.
        sleep: Waits between attempts; injected so tests need not wait.
    """

    def __init__(
        self,
        api: CustomObjectsApi,
        namespace: str,
        name: str,
        execution_id: str,
        *,
        deadline_s: float = 30.0,
        request_timeout_s: float = 10.0,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self._api = api
        self.namespace = namespace
        self.name = name
        self.execution_id = execution_id
        self._deadline_s = deadline_s
        self._timeout = request_timeout_s
        self._sleep = sleep

    def read(self) -> ExecutionRecord:
        """The record in the job's status (a new job's record when there is none).

        Raises:
            RecordStoreError: If the job could not be read.
        """
        status = self._get()["status"]
        return ExecutionRecord.from_dict(status.get("executionRecord"))

    def write_safe(self, record: ExecutionRecord) -> None:
        """Write the record and return only once the API server has stored it.

        Raises:
            ZombieExecution: If the job belongs to another execution.
            IndeterminateRecordWrite: If the outcome is still in doubt at the deadline.
            RecordStoreError: If the write was refused, or failed determinately until the
                deadline.
        """
        wanted = record.to_dict()
        deadline = time.monotonic() + self._deadline_s
        attempt = 0
        in_doubt = False
        while True:
            attempt += 1
            try:
                current = self._get()
            except RecordStoreError:
                if time.monotonic() >= deadline:
                    raise self._give_up(in_doubt, attempt) from None
                self._sleep(_backoff(attempt))
                continue
            self._check_fence(current["status"])
            # Whether after a write in doubt or a late one, a stored record equal to ours
            # means the write is done: the record carries its own timestamp. (Compared as
            # records: a merge patch stores null fields by leaving them out.)
            if ExecutionRecord.from_dict(current["status"].get("executionRecord")) == record:
                log.info(
                    "Record write resolved as applied job=%s/%s executionId=%s attempts=%d",
                    self.namespace,
                    self.name,
                    self.execution_id,
                    attempt,
                )
                return
            try:
                self._patch(wanted, current["resourceVersion"])
                return
            except ApiException as exc:
                if exc.status == 409:
                    log.info(
                        "Record write conflicted, retrying job=%s/%s attempt=%d",
                        self.namespace,
                        self.name,
                        attempt,
                    )
                    # A conflict is determinate: our patch was not applied.
                    in_doubt = False
                    continue
                if exc.status is not None and exc.status >= 500:
                    # The server may have stored it before failing; find out by re-reading.
                    in_doubt = True
                else:
                    raise RecordStoreError(
                        f"The API server refused the record write for SnapshotJob "
                        f"{self.namespace}/{self.name}: {exc.status} {exc.reason}"
                    ) from exc
            except _IN_DOUBT as exc:
                log.warning(
                    "Record write in doubt, re-reading job=%s/%s attempt=%d error=%s",
                    self.namespace,
                    self.name,
                    attempt,
                    exc,
                )
                in_doubt = True
            if time.monotonic() >= deadline:
                raise self._give_up(in_doubt, attempt)
            self._sleep(_backoff(attempt))

    def write_standard(self, record: ExecutionRecord) -> None:
        """One attempt, errors logged and swallowed (Jet's writeJobExecutionRecord).

        Used at taking step 7b of docs/concepts/protocol.md.
        """
        try:
            current = self._get()
            self._check_fence(current["status"])
            self._patch(record.to_dict(), current["resourceVersion"])
        except (ApiException, RecordStoreError, ZombieExecution, *_IN_DOUBT) as exc:
            log.warning(
                "Ignored failed record write job=%s/%s error=%s", self.namespace, self.name, exc
            )

    def append_exported_snapshot(
        self,
        *,
        name: str,
        snapshot_id: int,
        num_bytes: int,
        created_at: datetime,
        terminal: bool,
        durable_location: str | None = None,
    ) -> None:
        """Adds an export to ``status.exportedSnapshots``, replacing one of the same name.

        The list is a map keyed by ``name``: other entries are kept. The patch replaces the
        whole list, so it carries the ``resourceVersion`` of the read it was built from (a 409
        means someone else changed the status: re-read and rebuild), and it is fenced by
        ``status.execution.id`` like the record writes. After a write in doubt the re-read
        shows whether the entry is already there.

        Args:
            name: The export name.
            snapshot_id: The exported snapshot's id.
            num_bytes: Total bytes of its chunks.
            created_at: When the export completed (stored as RFC 3339 UTC).
            terminal: Whether the execution stops after it (a terminal exported snapshot).
            durable_location: Where its verified copy in object storage is, if one was made.

        Raises:
            ZombieExecution: If the job belongs to another execution.
            RecordStoreError: If the write was refused, or not done by the deadline.
        """
        entry = {
            "name": name,
            "snapshotId": snapshot_id,
            "numBytes": num_bytes,
            "createdAt": created_at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "terminal": terminal,
        }
        if durable_location is not None:
            entry["durableLocation"] = durable_location
        deadline = time.monotonic() + self._deadline_s
        attempt = 0
        while True:
            attempt += 1
            try:
                current = self._get()
                status = current["status"]
                self._check_fence(status)
                exported = [dict(e) for e in status.get("exportedSnapshots") or []]
                if entry in exported:
                    break
                exported = [e for e in exported if e.get("name") != name] + [entry]
                self._patch_status({"exportedSnapshots": exported}, current["resourceVersion"])
                break
            except ApiException as exc:
                retry = exc.status == 409 or (exc.status is not None and exc.status >= 500)
                if not retry:
                    raise RecordStoreError(
                        f"The API server refused the export entry for SnapshotJob "
                        f"{self.namespace}/{self.name}: {exc.status} {exc.reason}"
                    ) from exc
                error: Exception = exc
            except (RecordStoreError, *_IN_DOUBT) as exc:
                error = exc
            log.info(
                "Export entry write not done, retrying job=%s/%s name=%s attempt=%d error=%s",
                self.namespace,
                self.name,
                name,
                attempt,
                error,
            )
            if time.monotonic() >= deadline:
                raise RecordStoreError(
                    f"Could not add export '{name}' to SnapshotJob {self.namespace}/{self.name} "
                    f"after {attempt} attempts in {self._deadline_s:.0f}s: {error}"
                )
            self._sleep(_backoff(attempt))
        log.info(
            "Exported snapshot recorded job=%s/%s name=%s snapshotId=%d numBytes=%d terminal=%s",
            self.namespace,
            self.name,
            name,
            snapshot_id,
            num_bytes,
            terminal,
        )

    def report_pipeline_started(self) -> None:
        """Writes ``status.pipelineStarted`` with this execution's id: the pipeline runs.

        Raises:
            ZombieExecution: If the job belongs to another execution.
            RecordStoreError: If the write was refused, or not done by the deadline.
        """
        report = {
            "executionId": self.execution_id,
            # To the microsecond: the operator counts the run from it.
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        self._report("pipelineStarted", report, "running pipeline", self._deadline_s)

    def report_exit(self, exit_code: int, message: str | None, deadline_s: float = 5.0) -> None:
        """Writes ``status.driverExit``: how this execution's driver is about to exit.

        The Pod's own exit code is gone with the Pod when it is deleted right after its
        containers stop (a drain's eviction, ``kubectl delete pod``); this report outlives it,
        so the operator can tell an interrupted driver from a lost one. Tried for a few seconds
        only: the Pod's grace period is running.

        Raises:
            ZombieExecution: If the job belongs to another execution.
            RecordStoreError: If the write was refused, or not done by the deadline.
        """
        report: dict[str, Any] = {
            "executionId": self.execution_id,
            "exitCode": exit_code,
            "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        }
        if message:
            report["message"] = message[-512:]
        self._report("driverExit", report, f"exit code {exit_code}", deadline_s)

    def _report(self, field: str, report: dict[str, Any], what: str, deadline_s: float) -> None:
        """Writes one status field of this execution's reports, fenced, once per execution.

        A merge patch of that one field under the ``resourceVersion`` of a fenced read; a 409
        or an answer in doubt is read and written again (writing it twice is harmless).
        """
        deadline = time.monotonic() + deadline_s
        attempt = 0
        while True:
            attempt += 1
            try:
                current = self._get()
                status = current["status"]
                self._check_fence(status)
                if (status.get(field) or {}).get("executionId") == self.execution_id:
                    return
                self._patch_status({field: report}, current["resourceVersion"])
                log.info(
                    "Reported the %s job=%s/%s executionId=%s",
                    what,
                    self.namespace,
                    self.name,
                    self.execution_id,
                )
                return
            except ApiException as exc:
                retry = exc.status == 409 or (exc.status is not None and exc.status >= 500)
                if not retry:
                    raise RecordStoreError(
                        f"The API server refused the report of the {what} for SnapshotJob "
                        f"{self.namespace}/{self.name}: {exc.status} {exc.reason}"
                    ) from exc
                error: Exception = exc
            except (RecordStoreError, *_IN_DOUBT) as exc:
                error = exc
            if time.monotonic() >= deadline:
                raise RecordStoreError(
                    f"Could not report the {what} of SnapshotJob "
                    f"{self.namespace}/{self.name} after {attempt} attempts: {error}"
                )
            self._sleep(_backoff(attempt))

    # --- plumbing -----------------------------------------------------------------------------

    def _get(self) -> dict[str, Any]:
        try:
            job: dict[str, Any] = self._api.get_namespaced_custom_object(  # type: ignore[assignment]
                GROUP,
                VERSION,
                self.namespace,
                PLURAL,
                self.name,
                _request_timeout=self._timeout,
            )
        except ApiException as exc:
            raise RecordStoreError(
                f"Could not read SnapshotJob {self.namespace}/{self.name}: "
                f"{exc.status} {exc.reason}"
            ) from exc
        except _IN_DOUBT as exc:
            raise RecordStoreError(
                f"Could not read SnapshotJob {self.namespace}/{self.name}: {exc}"
            ) from exc
        return {
            "resourceVersion": job["metadata"]["resourceVersion"],
            "status": job.get("status") or {},
        }

    def _check_fence(self, status: dict[str, Any]) -> None:
        owner = (status.get("execution") or {}).get("id")
        if owner != self.execution_id:
            raise ZombieExecution(
                f"Execution {self.execution_id} is fenced: SnapshotJob "
                f"{self.namespace}/{self.name} belongs to execution {owner}"
            )

    def _patch(self, record: dict[str, Any], resource_version: str) -> None:
        self._patch_status({"executionRecord": record}, resource_version)

    def _patch_status(self, status: dict[str, Any], resource_version: str) -> None:
        body = {"metadata": {"resourceVersion": resource_version}, "status": status}
        self._api.patch_namespaced_custom_object_status(
            GROUP,
            VERSION,
            self.namespace,
            PLURAL,
            self.name,
            body,
            _content_type="application/merge-patch+json",
            _request_timeout=self._timeout,
        )

    def _give_up(self, in_doubt: bool, attempts: int) -> RecordStoreError:
        where = f"SnapshotJob {self.namespace}/{self.name}"
        if in_doubt:
            return IndeterminateRecordWrite(
                f"Could not determine whether the record write to {where} was applied "
                f"after {attempts} attempts in {self._deadline_s:.0f}s"
            )
        return RecordStoreError(
            f"The record write to {where} failed {attempts} times in {self._deadline_s:.0f}s"
        )


def _backoff(attempt: int) -> float:
    return float(min(0.05 * 2 ** (attempt - 1), 2.0))
