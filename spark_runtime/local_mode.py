"""Local mode: the job from the command line, its execution record in a file.

So a pipeline can be developed and its snapshots tested on a laptop, with no cluster: the
snapshots go to the embedded store in a local directory
(:class:`~snapshot_store.directory.DirectorySnapshotStore`) unless ``--hazelcast`` names
members, and the record file (:class:`~spark_runtime.file_record_store.FileRecordStore`) gives
the guarantees the SnapshotJob status gives in Kubernetes: every start claims it with a new
execution id, which fences any older driver still running. What the operator does in a cluster
(passing on a suspend or an export, listing exports) goes through the job's directory
(:mod:`spark_runtime.local_jobs`).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import IO

from pydantic import ValidationError

from snapshot_protocol import JobIdentity
from snapshotjob_contract.base import explain
from snapshotjob_contract.spec import ExpiredOffsetsPolicy, ProcessingGuarantee, SnapshotChainsSpec
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import (
    DriverSettings,
    ExportPoll,
    ExportRequest,
    PublishExport,
    TerminationPoll,
)
from spark_runtime.driver_settings import chain_policy
from spark_runtime.execution import BadInput, JobConfig
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.local_jobs import LOCAL_NAMESPACE, LocalJobDir, check_job_name, job_name_of


def key_value_pairs(items: Sequence[str], what: str) -> dict[str, str]:
    """Reads ``key=value`` options (``--arg``, ``--conf``) into a dict; later keys win.

    Raises:
        BadInput: If an item has no ``=`` or no key.
    """
    pairs = {}
    for item in items:
        key, separator, value = item.partition("=")
        if not separator or not key:
            raise BadInput(f"{what} {item!r} is not key=value")
        pairs[key] = value
    return pairs


def local_config(ns: argparse.Namespace, job_dir: LocalJobDir | None = None) -> JobConfig:
    """Builds the job from the command line.

    Only the pipeline is required. Without ``--hazelcast`` the snapshots go to the embedded
    store in the state directory; without ``--record-file`` and ``--job-uid`` the record and
    the uid are the job directory's (:class:`~spark_runtime.local_jobs.LocalJobDir`).

    Raises:
        BadInput: If a required option is missing or malformed.
    """
    module = pipeline_module(ns)
    job_dir = job_dir or job_dir_of(ns)
    try:
        args = json.loads(ns.args_json)
    except ValueError as error:
        raise BadInput(f"--args-json is not JSON: {error}") from error
    if not isinstance(args, dict):
        raise BadInput("--args-json must be a JSON object")
    args.update(key_value_pairs(ns.arg, "--arg"))
    chains = _snapshot_chains(ns)
    if ns.hazelcast:
        store = StoreAddress(tuple(ns.hazelcast.split(",")), ns.cluster_name)
    elif ns.incremental_snapshots:
        raise BadInput(
            "--incremental-snapshots needs the Hazelcast store (its deltas are written by the "
            "executors' JVMs): add --hazelcast, or leave it out to snapshot in full"
        )
    else:
        store = StoreAddress.embedded(str(job_dir.store_dir.resolve()))
    settings = DriverSettings(
        job=JobIdentity(
            ns.job_uid or job_dir.job_uid(),
            LOCAL_NAMESPACE,
            ns.backup_count,
            incremental=ns.incremental_snapshots,
        ),
        guarantee=ProcessingGuarantee(ns.guarantee),
        snapshot_interval_ms=ns.snapshot_interval_ms,
        state_partitions=ns.state_partitions,
        store=store,
        suspend_on_failure=ns.suspend_on_failure,
        initial_snapshot_name=ns.initial_snapshot_name or None,
        split_brain_protection=ns.split_brain_protection,
        store_lost_s=ns.store_lost_seconds,
        source_lost_s=ns.source_lost_seconds,
        chain_policy=chain_policy(chains),
        epoch_timeout_s=float(ns.epoch_timeout_seconds),
        sink_timeout_s=float(ns.sink_timeout_seconds),
        expired_offsets=ExpiredOffsetsPolicy(ns.expired_offsets),
    )
    return JobConfig(module, args, settings, ns.master, key_value_pairs(ns.conf, "--conf"))


def pipeline_module(ns: argparse.Namespace) -> str:
    """The pipeline's module name: ``--pipeline``, or the positional file or module.

    Raises:
        BadInput: If neither is given, both are, or the file does not exist.
    """
    given = [value for value in (ns.pipeline, ns.pipeline_path) if value]
    if len(given) != 1:
        raise BadInput(
            "Name the pipeline once: a file (python -m spark_runtime run my_pipeline.py) or a "
            "module on the path (--pipeline my_package.my_pipeline)"
        )
    pipeline = given[0]
    if not pipeline.endswith(".py"):
        return str(pipeline)
    path = Path(pipeline)
    if not path.is_file():
        raise BadInput(f"Pipeline file {pipeline} does not exist")
    if not path.stem.isidentifier():
        raise BadInput(
            f"Pipeline file {pipeline}: {path.stem!r} cannot be imported as a module; "
            "rename the file to a Python identifier (letters, digits, '_')"
        )
    return path.stem


def job_dir_of(ns: argparse.Namespace) -> LocalJobDir:
    """The job's directory: ``--name`` (else the pipeline's name) under ``--state-dir``.

    Raises:
        BadInput: If the name is not a DNS label.
    """
    try:
        name = check_job_name(ns.name or job_name_of(ns.pipeline or ns.pipeline_path or ""))
    except ValueError as error:
        raise BadInput(str(error)) from error
    return LocalJobDir(Path(ns.state_dir), name)


def import_path_of(ns: argparse.Namespace) -> Path | None:
    """The directory to import a pipeline file from; None for a module on the path."""
    pipeline = ns.pipeline_path or ""
    return Path(pipeline).resolve().parent if pipeline.endswith(".py") else None


def _snapshot_chains(ns: argparse.Namespace) -> SnapshotChainsSpec | None:
    """``--max-deltas`` and ``--max-delta-percent``, checked as spec.snapshotChains is."""
    given = {
        name: value
        for name, value in (("maxDeltas", ns.max_deltas), ("maxDeltaPercent", ns.max_delta_percent))
        if value is not None
    }
    if not given:
        return None
    if not ns.incremental_snapshots:
        raise BadInput(
            "--max-deltas and --max-delta-percent bound the chains of incremental snapshots: "
            "add --incremental-snapshots, or leave them out"
        )
    try:
        return SnapshotChainsSpec.model_validate(given)
    except ValidationError as error:
        raise BadInput(f"Invalid snapshot chain bounds: {explain(error)}") from error


class LocalMode:
    """The :class:`~spark_runtime.execution.Mode` of a driver started by hand or by a test.

    The command line's requests (``python -m spark_runtime suspend`` and ``export``) reach
    the driver through the job directory, and its exports are listed there.

    Args:
        config: The job.
        records: The record file, claimed for this execution.
        job_dir: The job's directory, whose driver lock this execution holds.
    """

    def __init__(
        self, config: JobConfig, records: FileRecordStore, job_dir: LocalJobDir | None = None
    ) -> None:
        self.config = config
        self.records = records
        self.job_dir = job_dir
        self.app_name = f"snapshotjob-{config.settings.job.uid}"
        self.poll_termination: TerminationPoll | None = None
        self.poll_export: ExportPoll | None = None
        self.publish_export: PublishExport | None = None
        self._lock: IO[bytes] | None = None
        self._served_exports: set[str] = set()
        if job_dir is not None:
            self.poll_termination = job_dir.take_termination_request
            self.poll_export = self._take_export_request
            self.publish_export = job_dir.add_export

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> LocalMode:
        """Reads the job from the command line, takes the job's driver lock and claims the
        record file.

        Without ``--execution-id`` the claim uses a fresh id. A pipeline given as a file is
        imported from its directory, by the driver and by the Python workers of its tasks.

        Raises:
            BadInput: If a required option is missing or malformed.
        """
        job_dir = job_dir_of(ns)
        config = local_config(ns, job_dir)
        import_path = import_path_of(ns)
        if import_path is not None:
            sys.path.insert(0, str(import_path))
            # Spark's Python workers inherit the environment of the JVM, which inherits this.
            inherited = os.environ.get("PYTHONPATH")
            os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, [str(import_path), inherited]))
        lock = job_dir.hold_driver_lock()
        job_dir.forget_requests()
        execution_id = ns.execution_id or uuid.uuid4().hex
        records = FileRecordStore.claim(ns.record_file or job_dir.record_file, execution_id)
        mode = cls(config, records, job_dir)
        mode._lock = lock
        return mode

    def _take_export_request(self) -> ExportRequest | None:
        """The pending export request, once per request id (the driver serves what it gets)."""
        assert self.job_dir is not None
        request = self.job_dir.export_request()
        if request is None or request.request_id in self._served_exports:
            return None
        self._served_exports.add(request.request_id)
        return request

    def start(self) -> None:
        """Nothing to listen to: requests are polled from the job directory."""

    def stop(self) -> None:
        """Nothing to stop; the driver lock goes with the process."""
