"""Local mode: the job from the command line, its execution record in a file.

So a pipeline can be developed and its snapshots tested without a cluster: the record file
(:class:`~spark_runtime.file_record_store.FileRecordStore`) gives the guarantees the
SnapshotJob status gives in Kubernetes, and every start claims it with a new execution id,
which fences any older driver still running. No operator sends requests, and exports are
not listed anywhere.
"""

from __future__ import annotations

import argparse
import json
import uuid
from collections.abc import Sequence

from pydantic import ValidationError

from snapshot_protocol import JobIdentity
from snapshotjob_contract.base import explain
from snapshotjob_contract.spec import ProcessingGuarantee, SnapshotChainsSpec
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import DriverSettings, ExportPoll, PublishExport, TerminationPoll
from spark_runtime.driver_settings import chain_policy
from spark_runtime.execution import BadInput, JobConfig
from spark_runtime.file_record_store import FileRecordStore


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


def local_config(ns: argparse.Namespace) -> JobConfig:
    """Builds the job from the command line.

    Raises:
        BadInput: If a required option is missing or malformed.
    """
    missing = [
        option
        for option, value in (
            ("--pipeline", ns.pipeline),
            ("--record-file", ns.record_file),
            ("--hazelcast", ns.hazelcast),
            ("--job-uid", ns.job_uid),
        )
        if not value
    ]
    if missing:
        raise BadInput(f"Local mode needs {', '.join(missing)}")
    try:
        args = json.loads(ns.args_json)
    except ValueError as error:
        raise BadInput(f"--args-json is not JSON: {error}") from error
    if not isinstance(args, dict):
        raise BadInput("--args-json must be a JSON object")
    args.update(key_value_pairs(ns.arg, "--arg"))
    chains = _snapshot_chains(ns)
    settings = DriverSettings(
        job=JobIdentity(ns.job_uid, "local", ns.backup_count, incremental=ns.incremental_snapshots),
        guarantee=ProcessingGuarantee(ns.guarantee),
        snapshot_interval_ms=ns.snapshot_interval_ms,
        state_partitions=ns.state_partitions,
        store=StoreAddress(tuple(ns.hazelcast.split(",")), ns.cluster_name),
        suspend_on_failure=ns.suspend_on_failure,
        initial_snapshot_name=ns.initial_snapshot_name or None,
        split_brain_protection=ns.split_brain_protection,
        store_lost_s=ns.store_lost_seconds,
        source_lost_s=ns.source_lost_seconds,
        chain_policy=chain_policy(chains),
    )
    return JobConfig(ns.pipeline, args, settings, ns.master, key_value_pairs(ns.conf, "--conf"))


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

    Args:
        config: The job.
        records: The record file, claimed for this execution.
    """

    def __init__(self, config: JobConfig, records: FileRecordStore) -> None:
        self.config = config
        self.records = records
        self.app_name = f"snapshotjob-{config.settings.job.uid}"
        self.poll_termination: TerminationPoll | None = None
        self.poll_export: ExportPoll | None = None
        self.publish_export: PublishExport | None = None

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> LocalMode:
        """Reads the job from the command line and claims the record file.

        Without ``--execution-id`` the claim uses a fresh id.

        Raises:
            BadInput: If a required option is missing or malformed.
        """
        config = local_config(ns)
        execution_id = ns.execution_id or uuid.uuid4().hex
        return cls(config, FileRecordStore.claim(ns.record_file, execution_id))

    def start(self) -> None:
        """Nothing to listen to: no operator."""

    def stop(self) -> None:
        """Nothing to stop."""
