"""The execution record in a local file, for running the runtime without Kubernetes.

Local mode needs the same guarantees the SnapshotJob status gives in Kubernetes: a write is
either wholly there or not at all, it survives a crash of the writer once ``write_safe``
returned, and a driver of an older execution can no longer move the record. So the file is
replaced by an atomic rename after an fsync of the new content (and of the directory), a lock
file serialises writers, and every write checks the execution id the file was claimed for.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from snapshot_protocol.errors import (
    IndeterminateRecordWrite,
    RecordStoreError,
    ZombieExecution,
)
from snapshotjob_contract.record import ExecutionRecord

log = logging.getLogger(__name__)


class FileRecordStore:
    """The :class:`~snapshot_protocol.ports.RecordStore` port on a local JSON file.

    The file holds ``{"execution": {"id": ...}, "executionRecord": {...}}``, the same shape as
    the SnapshotJob status, so a record can be moved between modes by hand.

    Args:
        path: The record file.
        execution_id: This execution's fencing token; writes are refused once the file was
            claimed by another execution.
    """

    def __init__(self, path: Path, execution_id: str) -> None:
        self.path = path
        self.execution_id = execution_id
        self._lock_path = path.with_name(path.name + ".lock")

    @classmethod
    def claim(cls, path: Path, execution_id: str) -> FileRecordStore:
        """Start a new execution: record its id in the file, fencing every older one.

        In Kubernetes the operator does this when it creates the driver Pod; locally the
        driver does it itself at start-up.
        """
        store = cls(path, execution_id)
        path.parent.mkdir(parents=True, exist_ok=True)
        with store._locked():
            document = store._load()
            document["execution"] = {"id": execution_id}
            store._replace(document)
        log.info("Claimed execution record path=%s executionId=%s", path, execution_id)
        return store

    def read(self) -> ExecutionRecord:
        """The stored record, or a new job's record when the file does not exist."""
        with self._locked():
            return ExecutionRecord.from_dict(self._load().get("executionRecord"))

    def write_safe(self, record: ExecutionRecord) -> None:
        """Write the record durably; returning means it is on disk.

        Raises:
            ZombieExecution: If another execution claimed the file.
            IndeterminateRecordWrite: If the data or directory fsync failed after the rename,
                so the record may or may not survive a crash.
            RecordStoreError: If the new file could not be written (nothing changed).
        """
        with self._locked():
            document = self._load()
            claimed = (document.get("execution") or {}).get("id")
            if claimed != self.execution_id:
                raise ZombieExecution(
                    f"Execution {self.execution_id} is fenced: record file {self.path} "
                    f"belongs to execution {claimed}"
                )
            document["executionRecord"] = record.to_dict()
            self._replace(document)

    def write_standard(self, record: ExecutionRecord) -> None:
        """Best-effort write; errors are logged and swallowed (docs/concepts/protocol.md, taking
        step 7b)."""
        try:
            self.write_safe(record)
        except (RecordStoreError, ZombieExecution) as exc:
            log.warning("Ignored failed record write path=%s error=%s", self.path, exc)

    # --- plumbing -----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        self._lock_path.parent.mkdir(parents=True, exist_ok=True)
        with self._lock_path.open("a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _load(self) -> dict[str, Any]:
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return {}
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise RecordStoreError(
                f"Record file {self.path} is not valid JSON ({exc}); restore it from a backup "
                "or delete it to start the job without state"
            ) from exc
        if not isinstance(document, dict):
            raise RecordStoreError(f"Record file {self.path} does not hold a JSON object")
        return document

    def _replace(self, document: dict[str, Any]) -> None:
        partial = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        try:
            with partial.open("w") as out:
                json.dump(document, out, indent=2, sort_keys=True)
                out.flush()
                os.fsync(out.fileno())
        except OSError as exc:
            partial.unlink(missing_ok=True)
            raise RecordStoreError(f"Could not write record file {partial}: {exc}") from exc
        os.replace(partial, self.path)
        try:
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise IndeterminateRecordWrite(
                f"Record file {self.path} was replaced but the directory fsync failed: {exc}"
            ) from exc
