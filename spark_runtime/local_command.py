"""``python -m spark_runtime suspend`` and ``export``: what the operator does, for local jobs.

Why: in a cluster a user suspends or exports a job by editing its spec, and the operator passes
the request to the driver. A local job has no operator, so these commands leave the request in
the job's directory (:class:`~spark_runtime.local_jobs.LocalJobDir`), where its driver looks
at every epoch boundary, and wait for the outcome:

- ``suspend``: the driver takes a terminal snapshot (exported too with ``--export NAME``),
  commits the output, marks the record suspended and exits with 0 (it ended as asked, which
  is no failure); ``run`` with the same pipeline resumes from it.
- ``export --as NAME``: the running driver takes an export-only snapshot and goes on.

Both need a running driver: only the driver knows that a snapshot's output is committed
(the terminal snapshot's second phase), which a job started from the export relies on.

An export is started from with ``run other_pipeline.py --from-export NAME``; it lives in the
state directory's store, which every job run from that directory shares.
"""

from __future__ import annotations

import argparse
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import ExecutionRecord
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.local_jobs import DEFAULT_STATE_DIR, LocalJobDir, check_job_name, job_name_of

REQUEST_COMMANDS = ("suspend", "export")

_POLL_S = 0.2


def add_state_dir_argument(parser: argparse.ArgumentParser) -> None:
    """``--state-dir``, shared by ``run``, ``suspend`` and ``export``."""
    parser.add_argument(
        "--state-dir",
        type=Path,
        default=DEFAULT_STATE_DIR,
        help="local mode: where jobs keep their records, uids and the embedded snapshot store "
        f"(default: {DEFAULT_STATE_DIR} in the current directory)",
    )


def add_request_parsers(commands: Any) -> None:
    """Adds ``suspend`` and ``export`` to the program's subparsers."""
    suspend = commands.add_parser(
        "suspend", help="local mode: a terminal snapshot, then the driver stops"
    )
    export = commands.add_parser("export", help="local mode: export a job's snapshot under a name")
    for parser in (suspend, export):
        parser.add_argument(
            "pipeline_path",
            nargs="?",
            metavar="PIPELINE",
            help="the pipeline the job runs (its name is the job's), or give --name",
        )
        parser.add_argument("--name", help="the job's name (default: the pipeline's)")
        add_state_dir_argument(parser)
        parser.add_argument(
            "--timeout",
            type=float,
            default=120.0,
            help="seconds to wait for the driver (default: 120)",
        )
    suspend.add_argument("--export", metavar="NAME", help="also export the terminal snapshot")
    export.add_argument("--as", dest="export_name", metavar="NAME", required=True)


def run_request_command(ns: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Runs ``suspend`` or ``export``; returns the exit code (0 done, 1 not done, 2 bad input)."""
    try:
        job_dir = _job_dir(ns)
    except ValueError as error:
        print(str(error), file=sys.stderr)
        return int(DriverExit.BAD_INPUT)
    if ns.command == "suspend":
        return _suspend(job_dir, ns.export, ns.timeout, out)
    return _export(job_dir, ns.export_name, ns.timeout, out)


def _job_dir(ns: argparse.Namespace) -> LocalJobDir:
    if not ns.name and not ns.pipeline_path:
        raise ValueError("Name the job: the pipeline it runs (my_pipeline.py) or --name")
    job_dir = LocalJobDir(ns.state_dir, check_job_name(ns.name or job_name_of(ns.pipeline_path)))
    if not job_dir.record_file.is_file():
        raise ValueError(
            f"No local job {job_dir.name} in {ns.state_dir}: run it first "
            "(python -m spark_runtime run ...), from the same directory or with --state-dir"
        )
    return job_dir


def _suspend(job_dir: LocalJobDir, export_name: str | None, timeout_s: float, out: TextIO) -> int:
    if not job_dir.driver_running():
        print(
            f"Job {job_dir.name} is not running: its last snapshot is what the next run "
            "restores, so there is nothing to suspend",
            file=sys.stderr,
        )
        return 1
    before = {e.name: e.created_at for e in job_dir.exports()}
    job_dir.request_suspend(export_name)
    out.write(f"Asked job {job_dir.name} to suspend; waiting for its terminal snapshot\n")
    deadline = time.monotonic() + timeout_s
    while job_dir.driver_running():
        if time.monotonic() > deadline:
            print(
                f"Job {job_dir.name} still runs after {timeout_s:.0f} s; its driver's log says "
                "why (the request stays until a driver takes it)",
                file=sys.stderr,
            )
            return 1
        time.sleep(_POLL_S)
    record = _record(job_dir)
    if not record.suspended:
        # The driver is no child of this process, and it exits 0 for a completion too: the
        # record, which the driver marks as it suspends, tells whether it did.
        print(
            f"Job {job_dir.name} stopped without suspending (it completed, or failed, before "
            "it could); see its driver's log",
            file=sys.stderr,
        )
        return 1
    if export_name is not None and not _new_export(job_dir, export_name, before):
        print(
            f"Job {job_dir.name} stopped but exported no snapshot {export_name}; see its "
            "driver's log",
            file=sys.stderr,
        )
        return 1
    exported = f", exported as {export_name}" if export_name else ""
    out.write(
        f"Job {job_dir.name} suspended at snapshot {record.snapshot_id}{exported}; run it "
        "again to resume\n"
    )
    return 0


def _export(job_dir: LocalJobDir, export_name: str, timeout_s: float, out: TextIO) -> int:
    if not job_dir.driver_running():
        print(
            f"Job {job_dir.name} is not running: an export is taken by its driver. Run it and "
            "export it, or stop a running job with: suspend --export NAME",
            file=sys.stderr,
        )
        return 1
    before = {e.name: e.created_at for e in job_dir.exports()}
    job_dir.request_export(export_name)
    out.write(f"Asked job {job_dir.name} for an export-only snapshot {export_name}\n")
    deadline = time.monotonic() + timeout_s
    while (export := _new_export(job_dir, export_name, before)) is None:
        if not job_dir.driver_running() or time.monotonic() > deadline:
            print(
                f"Job {job_dir.name} exported no snapshot {export_name} (its driver "
                f"{'stopped' if not job_dir.driver_running() else 'is busy'}); see its log",
                file=sys.stderr,
            )
            return 1
        time.sleep(_POLL_S)
    out.write(
        f"Exported snapshot {export.snapshot_id} of job {job_dir.name} as {export_name} "
        f"({export.num_bytes} bytes)\n"
    )
    return 0


def _record(job_dir: LocalJobDir) -> ExecutionRecord:
    return FileRecordStore(job_dir.record_file, "").read()


def _new_export(
    job_dir: LocalJobDir, name: str, before: dict[str, datetime]
) -> ExportedSnapshot | None:
    for export in job_dir.exports():
        if export.name == name and export.created_at != before.get(name):
            return export
    return None
