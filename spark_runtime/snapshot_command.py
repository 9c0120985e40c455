"""``python -m spark_runtime snapshot list|inspect|validate|read``: snapshots in any store.

Why a command: after an incident the first questions are which snapshots a job has, what is
in them, whether they would restore, and into which pipeline. The answers come from the
validation records and the same checks a restore makes (:mod:`snapshot_protocol.inspection`),
from Hazelcast, from a durable copy in object storage or from a local job's embedded store
(``--store-dir``). Only ``validate --pipeline`` starts
Spark (to define the pipeline, without opening its sinks). ``read`` prints a state operator's
rows (:mod:`spark_runtime.snapshot_reader`). Exit codes are the driver's: 0 when the snapshot
is sound, 65 corrupted, 66 not found, 78 incompatible, 69 when the store could not be read,
2 for a wrong command line.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from snapshot_protocol import PipelineShape, SnapshotCorrupted, SnapshotIncompatible
from snapshot_protocol.chunks import ValidationRecord, check_compatible
from snapshot_protocol.errors import SnapshotStoreError
from snapshot_protocol.inspection import SnapshotSummary, summarize, verify_snapshot
from snapshot_protocol.ports import SnapshotStore
from snapshot_store.directory import DirectorySnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import export_map_name
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.local_jobs import LOCAL_NAMESPACE

if TYPE_CHECKING:
    import pyarrow as pa

DEFAULT_CLUSTER_NAME = "snapshotjob"
"""``--cluster-name``: the store's cluster name in a default install of the chart
(``hazelcast.clusterName`` in charts/snapshotjob-operator/values.yaml), so the command reaches
that store with ``--hazelcast`` alone; a wrong name waits for the client's connect timeout and
fails. ``tests/unit/test_install_defaults.py`` fails when the two differ."""
DEFAULT_REGION = "us-east-1"
"""``--region``: the chart's ``durableStorage.region``, as ``spec.durableStorage.region``."""
DEFAULT_PREFIX = ""
"""``--prefix``: the chart's ``durableStorage.prefix``, the copies at the bucket's root."""
DEFAULT_EXPORT_NAMESPACE = "default"
"""``--namespace``: where ``--export`` looks when no namespace is given."""


def add_parser(commands: Any) -> None:
    """Adds ``snapshot`` and its subcommands to the program's subparsers."""
    snapshot = commands.add_parser("snapshot", help="list, inspect or validate snapshots")
    actions = snapshot.add_subparsers(dest="action", required=True)
    for name, helptext in (
        ("list", "every snapshot id with a validation record in the map"),
        ("inspect", "one snapshot's validation record, summed by participant"),
        ("validate", "everything a restore checks: the record, every chunk and its checksum"),
        ("read", "a state operator's rows at a snapshot, every chunk verified"),
    ):
        action = actions.add_parser(name, help=helptext)
        where = action.add_mutually_exclusive_group(required=True)
        where.add_argument("--map", help="the snapshot map (or prefix, in object storage)")
        where.add_argument("--export", help="an exported snapshot's name (with --namespace)")
        action.add_argument(
            "--namespace",
            help=f"the export's namespace (default: {DEFAULT_EXPORT_NAMESPACE}; "
            f"{LOCAL_NAMESPACE} with --store-dir)",
        )
        if name != "list":
            action.add_argument("--snapshot-id", type=int, help="default: the newest")
        action.add_argument(
            "--hazelcast",
            help="comma-separated host[:port] of Hazelcast members (port 5701 if none), e.g. "
            "the chart's headless Service, <name>-hazelcast.<namespace>, from inside the cluster",
        )
        action.add_argument(
            "--cluster-name",
            default=DEFAULT_CLUSTER_NAME,
            help="Hazelcast cluster name (the chart's hazelcast.clusterName)",
        )
        action.add_argument("--s3-endpoint", help="S3 API endpoint URL (instead of Hazelcast)")
        action.add_argument(
            "--store-dir",
            help="a local job's embedded store (.snapshotjob/store), instead of Hazelcast",
        )
        action.add_argument("--bucket", help="the bucket of the durable copies")
        action.add_argument("--prefix", default=DEFAULT_PREFIX, help="where under the bucket")
        action.add_argument("--region", default=DEFAULT_REGION, help="the bucket's region")
        action.add_argument("-o", "--output", choices=["text", "json"], default="text")
        if name == "validate":
            action.add_argument(
                "--pipeline",
                help="also check that this pipeline module could restore the snapshot "
                "(defined with --arg and --args-json, its sinks not opened)",
            )
            action.add_argument("--arg", action="append", default=[], help="key=value")
            action.add_argument("--args-json", default="{}", help="the pipeline's arguments")
            action.add_argument(
                "--compatibility-only",
                action="store_true",
                help="only check that --pipeline could restore the newest snapshot of the "
                "maps in --map (comma-separated), from its validation record, reading no "
                "chunk: the operator's upgrade check of a running job, whose maps change "
                "while it looks",
            )
        if name == "read":
            action.add_argument("--operator", required=True, help="the state operator's name")
            action.add_argument("--limit", type=int, default=20, help="rows to print (0: all)")


def run_snapshot_command(ns: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    """Runs one ``snapshot`` subcommand; returns its exit code."""
    namespace = ns.namespace or (LOCAL_NAMESPACE if ns.store_dir else DEFAULT_EXPORT_NAMESPACE)
    map_name = ns.map or export_map_name(namespace, ns.export)
    try:
        store, close = _open_store(ns)
    except (SnapshotStoreError, ValueError) as error:
        print(f"Cannot open the snapshot store: {error}", file=sys.stderr)
        return int(
            DriverExit.BAD_INPUT if isinstance(error, ValueError) else DriverExit.TRANSIENT_FAILURE
        )
    try:
        return _run(ns, store, map_name, out)
    except SnapshotCorrupted as error:
        print(str(error), file=sys.stderr)
        return int(DriverExit.SNAPSHOT_CORRUPTED)
    except SnapshotIncompatible as error:
        print(str(error), file=sys.stderr)
        return int(DriverExit.SNAPSHOT_INCOMPATIBLE)
    except ValueError as error:  # NotAStateTable, a pipeline that cannot be defined
        print(str(error), file=sys.stderr)
        return int(DriverExit.BAD_INPUT)
    except SnapshotStoreError as error:
        print(f"Cannot read map {map_name}: {error}", file=sys.stderr)
        return int(DriverExit.TRANSIENT_FAILURE)
    finally:
        close()


def _run(ns: argparse.Namespace, store: SnapshotStore, map_name: str, out: TextIO) -> int:
    if ns.action == "list":
        ids = _snapshot_ids(store, map_name)
        summaries = []
        for listed in ids:
            record = store.get_validation_record(map_name, listed)
            if record is not None:
                summaries.append(summarize(record))
        _print_list(map_name, summaries, ns.output, out)
        return 0
    if ns.action == "validate" and ns.compatibility_only:
        return _check_compatibility(ns, store, map_name.split(","), out)
    snapshot_id: int | None = ns.snapshot_id
    if snapshot_id is None:
        snapshot_id = store.latest_snapshot_id(map_name)
        if snapshot_id is None:
            print(f"No snapshot with a validation record in map {map_name}", file=sys.stderr)
            return int(DriverExit.SNAPSHOT_NOT_FOUND)
    if ns.action == "inspect":
        record = store.get_validation_record(map_name, snapshot_id)
        if record is None:
            print(
                f"Snapshot {snapshot_id} has no validation record in map {map_name}",
                file=sys.stderr,
            )
            return int(DriverExit.SNAPSHOT_NOT_FOUND)
        _print_one(map_name, summarize(record), ns.output, out, verified=False)
        return 0
    if ns.action == "read":
        # Arrow and PySpark's types, only for the command that decodes state rows.
        from spark_runtime.snapshot_reader import read_state_table

        table = read_state_table(store, map_name, ns.operator, snapshot_id)
        _print_rows(map_name, snapshot_id, ns.operator, table, ns.limit, ns.output, out)
        return 0
    summary = verify_snapshot(store, map_name, snapshot_id)
    if ns.pipeline:
        record = store.get_validation_record(map_name, snapshot_id)
        assert record is not None  # verify_snapshot found it
        check_compatible(map_name, record, pipeline_shape(ns, record.shape.state_partitions))
    _print_one(map_name, summary, ns.output, out, verified=True, pipeline=ns.pipeline)
    return 0


_NEWEST_ATTEMPTS = 3
"""Reads of the newest validation record: one may be cleared between its id and its read."""


def _check_compatibility(
    ns: argparse.Namespace, store: SnapshotStore, map_names: list[str], out: TextIO
) -> int:
    """Checks ``--pipeline`` against the newest validation record of ``map_names``.

    The record is read first, right after connecting, and held: a running job with a short
    interval rewrites its maps within seconds, far less than Spark takes to start for the
    definition. Every snapshot since the job's last rollout has its current pipeline's shape,
    so the newest one stands for the restore point.
    """
    if not ns.pipeline:
        raise ValueError("--compatibility-only needs --pipeline")
    for _ in range(_NEWEST_ATTEMPTS):
        newest: tuple[str, ValidationRecord] | None = None
        for name in map_names:
            latest = store.latest_snapshot_id(name)
            record = None if latest is None else store.get_validation_record(name, latest)
            if record is not None and (
                newest is None or record.snapshot_id > newest[1].snapshot_id
            ):
                newest = (name, record)
        if newest is not None:
            break
    if newest is None:
        print(f"No snapshot with a validation record in {', '.join(map_names)}", file=sys.stderr)
        return int(DriverExit.SNAPSHOT_NOT_FOUND)
    map_name, record = newest
    check_compatible(map_name, record, pipeline_shape(ns, record.shape.state_partitions))
    out.write(
        f"Compatible: pipeline {ns.pipeline} can restore snapshot {record.snapshot_id} of "
        f"map {map_name}\n"
    )
    return 0


def pipeline_shape(ns: argparse.Namespace, state_partitions: int) -> PipelineShape:
    """Defines the pipeline module of ``--pipeline`` (sinks not opened) and returns its shape.

    Raises:
        ValueError: If the module, its arguments or its definition are wrong.
    """
    from spark_runtime.chunk_io import StoreAddress
    from spark_runtime.execution import BadInput, load_definition
    from spark_runtime.local_mode import key_value_pairs
    from spark_runtime.pipeline import Pipeline
    from spark_runtime.session import spark_session
    from spark_runtime.state import StateContext

    try:
        args = json.loads(ns.args_json)
        args.update(key_value_pairs(ns.arg, "--arg"))
        define = load_definition(ns.pipeline)
    except (BadInput, ValueError, AttributeError) as error:
        raise ValueError(f"Cannot load pipeline {ns.pipeline}: {error}") from error
    partitions = max(state_partitions, 1)
    spark = spark_session("snapshot-validate", master="local[1]", shuffle_partitions=partitions)
    pipeline = Pipeline(
        spark,
        StateContext(spark, partitions, StoreAddress((), "")),
        ProcessingGuarantee.EXACTLY_ONCE,
        "snapshot-validate",
        args,
        open_sinks=False,
    )
    try:
        pipeline.define(define)
    except Exception as error:
        raise ValueError(f"Pipeline {ns.pipeline} cannot be defined: {error}") from error
    return pipeline.shape(partitions)


def _snapshot_ids(store: SnapshotStore, map_name: str) -> list[int]:
    lister = getattr(store, "snapshot_ids", None)
    if lister is not None:
        return list(lister(map_name))
    latest = store.latest_snapshot_id(map_name)
    return [] if latest is None else [latest]


def _open_store(ns: argparse.Namespace) -> tuple[SnapshotStore, Any]:
    if sum(map(bool, (ns.hazelcast, ns.s3_endpoint, ns.store_dir))) != 1:
        raise ValueError("Give exactly one of --hazelcast, --s3-endpoint and --store-dir")
    if ns.store_dir:
        if not Path(ns.store_dir).is_dir():
            raise ValueError(f"--store-dir {ns.store_dir} is not a directory")
        return DirectorySnapshotStore(ns.store_dir), lambda: None
    if ns.hazelcast:
        from snapshot_store.hazelcast import HazelcastSnapshotStore, connect

        hazelcast = connect(ns.hazelcast.split(","), ns.cluster_name)
        return HazelcastSnapshotStore(hazelcast), hazelcast.shutdown
    if not ns.bucket:
        raise ValueError("--s3-endpoint needs --bucket")
    from snapshot_store.s3 import S3SnapshotStore, connect_s3

    s3 = connect_s3(ns.s3_endpoint, ns.region)
    return S3SnapshotStore(s3, ns.bucket, ns.prefix), s3.close


def _when(millis: int) -> str:
    return datetime.fromtimestamp(millis / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _print_list(map_name: str, summaries: list[SnapshotSummary], output: str, out: TextIO) -> None:
    if output == "json":
        json.dump({"map": map_name, "snapshots": [asdict(s) for s in summaries]}, out, indent=2)
        out.write("\n")
        return
    out.write(f"MAP {map_name}\n")
    out.write(f"{'SNAPSHOT':>8}  {'CREATED':20}  {'CHUNKS':>6}  {'BYTES':>12}  {'KEYS':>10}  JOB\n")
    for s in summaries:
        out.write(
            f"{s.snapshot_id:>8}  {_when(s.creation_time):20}  {s.num_chunks:>6}  "
            f"{s.num_bytes:>12}  {s.num_keys:>10}  {s.job_uid}\n"
        )


def _print_rows(
    map_name: str,
    snapshot_id: int,
    operator: str,
    table: pa.Table,
    limit: int,
    output: str,
    out: TextIO,
) -> None:
    rows = table.to_pylist()
    shown = rows if limit <= 0 else rows[:limit]
    if output == "json":
        document = {
            "map": map_name,
            "snapshotId": snapshot_id,
            "operator": operator,
            "numRows": len(rows),
            "rows": shown,
        }
        json.dump(document, out, indent=2, default=str)
        out.write("\n")
        return
    out.write(
        f"Operator {operator} of snapshot {snapshot_id} in map {map_name}: {len(rows)} rows, "
        f"every chunk verified\n"
    )
    if not shown:
        return
    columns = table.column_names
    out.write("\t".join(columns) + "\n")
    for row in shown:
        out.write("\t".join(str(row[column]) for column in columns) + "\n")
    if len(shown) < len(rows):
        out.write(f"... {len(rows) - len(shown)} more (--limit 0 prints all)\n")


def _print_one(
    map_name: str,
    summary: SnapshotSummary,
    output: str,
    out: TextIO,
    *,
    verified: bool,
    pipeline: str | None = None,
) -> None:
    if output == "json":
        document = {"map": map_name, "verified": verified, **asdict(summary)}
        if pipeline:
            document["compatibleWith"] = pipeline
        json.dump(document, out, indent=2)
        out.write("\n")
        return
    out.write(
        f"Snapshot {summary.snapshot_id} in map {map_name}: job {summary.job_uid}, created "
        f"{_when(summary.creation_time)}, {summary.num_chunks} chunks, {summary.num_bytes} bytes, "
        f"{summary.num_keys} keys, {summary.state_partitions} state partitions, pipeline "
        f"fingerprint {summary.fingerprint}\n"
    )
    for op in summary.operators:
        out.write(
            f"  {op.operator}: {op.description}; {op.partitions} partitions, {op.chunks} chunks, "
            f"{op.num_bytes} bytes, {op.num_keys} keys\n"
        )
    if verified:
        out.write(
            f"Valid: the validation record, all {summary.num_chunks} chunks present and every "
            "checksum verified\n"
        )
    if pipeline:
        out.write(f"Compatible: pipeline {pipeline} can restore it\n")
