"""A local job's directory: its record, its uid, whether a driver runs, requests and exports.

Why: without Kubernetes there is no SnapshotJob to hold a job's identity and status, and no
operator to pass a user's request to the driver. Running the same command again must find the
same job (its record, its uid, so its snapshots and sink transactions), and
``python -m spark_runtime suspend`` or ``export`` must reach the driver that runs it. All of it
lives in files under the state directory (``--state-dir``, ``.snapshotjob`` by default)::

    store/                      the embedded snapshot store (unless --hazelcast is given)
    jobs/<name>/record.json     the execution record (FileRecordStore)
    jobs/<name>/job-uid         the job's uid, made at its first run
    jobs/<name>/driver.lock     locked (shared) by every driver of the job while it runs
    jobs/<name>/request.json    a suspend request of the command line, until a driver takes it
    jobs/<name>/export.json     an export request, until the export is done
    jobs/<name>/exports.json    the exports the job's drivers took, newest last

Every file is replaced by an atomic rename, so a reader sees a whole one or the one before.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from snapshot_protocol import TerminationRequest
from snapshotjob_contract.modes import TerminationMode
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.driver_settings import ExportRequest

DEFAULT_STATE_DIR = Path(".snapshotjob")
"""Where local jobs keep their state when ``--state-dir`` is not given: beside the pipeline
the user runs, like a build tool's cache directory."""

LOCAL_NAMESPACE = "local"
"""The namespace of local jobs: their exports are ``__sj.export.local.<name>``."""

_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def job_name_of(pipeline: str) -> str:
    """The default job name of a pipeline file or module: its last part, as a DNS label
    (``my_pipeline.py`` runs as ``my-pipeline``)."""
    stem = Path(pipeline).stem if pipeline.endswith(".py") else pipeline.rsplit(".", 1)[-1]
    return re.sub(r"[^a-z0-9]+", "-", stem.lower()).strip("-")[:63] or "pipeline"


def check_job_name(name: str) -> str:
    """Returns ``name`` if it can name a local job (a DNS label, as a SnapshotJob's name).

    Raises:
        ValueError: If it cannot, saying what to give.
    """
    if not _NAME.match(name):
        raise ValueError(
            f"Job name {name!r} is not a DNS label: use lower-case letters, digits and '-', "
            "at most 63, starting and ending with a letter or digit"
        )
    return name


@dataclass(frozen=True)
class LocalJobDir:
    """The files of one local job.

    Attributes:
        state_dir: The state directory shared by the jobs run from one place.
        name: The job's name.
    """

    state_dir: Path
    name: str

    @property
    def path(self) -> Path:
        """The job's own directory."""
        return self.state_dir / "jobs" / self.name

    @property
    def store_dir(self) -> Path:
        """The embedded snapshot store, shared by the state directory's jobs (exports too)."""
        return self.state_dir / "store"

    @property
    def record_file(self) -> Path:
        """The execution record."""
        return self.path / "record.json"

    def job_uid(self) -> str:
        """The job's uid, made at its first run: ``<name>-<8 hex digits>``.

        A uid, not the name, names the job's snapshot maps and sink transactions, so a job
        deleted and made again under the same name never meets the old one's leftovers.
        """
        uid_file = self.path / "job-uid"
        if not uid_file.is_file():
            made = self.path / f".job-uid.{uuid.uuid4().hex}"
            _write_json_or_text(made, f"{self.name[:54]}-{uuid.uuid4().hex[:8]}\n")
            # A link fails if the file exists: of two first runs at once, one uid wins.
            with contextlib.suppress(FileExistsError):
                os.link(made, uid_file)
            made.unlink()
        return uid_file.read_text(encoding="utf-8").strip()

    # --- the running driver -----------------------------------------------------------------

    def hold_driver_lock(self) -> IO[bytes]:
        """Locks ``driver.lock`` (shared) for as long as the returned file stays open.

        The kernel drops the lock when the process ends, however it ends (``kill -9``), so
        :meth:`driver_running` never sees a driver that died. Shared: a newer driver started
        while an older one still runs fences the older, as in Kubernetes; it is not refused.
        """
        self.path.mkdir(parents=True, exist_ok=True)
        lock = open(self.path / "driver.lock", "ab")  # noqa: SIM115 - held until exit
        fcntl.flock(lock, fcntl.LOCK_SH)
        return lock

    def driver_running(self) -> bool:
        """Whether a driver of the job holds its lock now."""
        lock_file = self.path / "driver.lock"
        if not lock_file.exists():
            return False
        with open(lock_file, "ab") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(lock, fcntl.LOCK_UN)
            return False

    # --- requests of the command line -------------------------------------------------------

    def request_suspend(self, export_name: str | None) -> None:
        """Asks the running driver to take a terminal snapshot (exported as ``export_name``,
        if given) and stop."""
        document = {"mode": TerminationMode.SUSPEND_GRACEFUL.value, "exportName": export_name}
        _write_json_or_text(self.path / "request.json", document)

    def take_termination_request(self) -> TerminationRequest | None:
        """The suspend request, once: it is removed as it is read."""
        document = _read_json(self.path / "request.json")
        if document is None:
            return None
        (self.path / "request.json").unlink(missing_ok=True)
        return TerminationRequest(TerminationMode(document["mode"]), document.get("exportName"))

    def request_export(self, export_name: str) -> str:
        """Asks the running driver for an export-only snapshot; returns the request's id."""
        request_id = uuid.uuid4().hex
        _write_json_or_text(self.path / "export.json", {"name": export_name, "id": request_id})
        return request_id

    def export_request(self) -> ExportRequest | None:
        """The pending export request; the driver serves each request id once."""
        document = _read_json(self.path / "export.json")
        if document is None:
            return None
        return ExportRequest(document["name"], document["id"])

    def forget_requests(self) -> None:
        """Drops requests no driver took (made for a driver that ended before it read them):
        a new driver must not act on an old request."""
        for stale in ("request.json", "export.json"):
            (self.path / stale).unlink(missing_ok=True)

    # --- exports ----------------------------------------------------------------------------

    def exports(self) -> list[ExportedSnapshot]:
        """The exports the job's drivers took, oldest first."""
        listed = _read_json(self.path / "exports.json") or []
        return [ExportedSnapshot.model_validate(item) for item in listed]

    def add_export(self, export: ExportedSnapshot) -> None:
        """Lists an export (replacing one of the same name) and closes its request."""
        kept = [e for e in self.exports() if e.name != export.name]
        kept.append(export)
        _write_json_or_text(
            self.path / "exports.json",
            [e.model_dump(mode="json", by_alias=True, exclude_none=True) for e in kept],
        )
        pending = self.export_request()
        if pending is not None and pending.name == export.name:
            (self.path / "export.json").unlink(missing_ok=True)


def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None


def _write_json_or_text(path: Path, content: object) -> None:
    """Replaces ``path`` atomically with ``content`` (JSON unless it is a string)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    text = content if isinstance(content, str) else json.dumps(content, indent=2) + "\n"
    temporary = path.with_name(f".{path.name}.{uuid.uuid4().hex}")
    with open(temporary, "w", encoding="utf-8") as file:
        file.write(text)
        file.flush()
        os.fsync(file.fileno())
    os.replace(temporary, path)
