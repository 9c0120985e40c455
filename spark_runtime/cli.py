"""``python -m spark_runtime run``: the driver process, in local mode or in a Kubernetes Pod.

Both modes run the same :class:`~spark_runtime.driver.Driver`; they differ only in where the
job's settings and the execution record come from. Local mode takes everything from the
command line and keeps the record in a file (:class:`FileRecordStore`), so a pipeline can be
developed and its snapshots tested without a cluster. Kubernetes mode reads its SnapshotJob,
keeps the record in the job's status, watches ``status.termination`` and
``status.exportRequest`` for the operator's requests and lists its exports in
``status.exportedSnapshots``.

A :class:`FailpointCrash` (from ``SJ_FAILPOINTS``) ends the process with ``os._exit`` at once,
skipping every cleanup, because it stands for the process dying at that point.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, NoReturn, cast

from pyspark.sql import SparkSession

from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import (
    Build,
    Driver,
    DriverSettings,
    ExportedSnapshot,
    ExportRequest,
    StopSignals,
)
from spark_runtime.exit_codes import ExitCode
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.guarantee import Guarantee
from spark_runtime.hazelcast_store import HazelcastSnapshotStore, connect
from spark_runtime.protocol import (
    FailpointCrash,
    Failpoints,
    JobIdentity,
    RecordStore,
    TerminationMode,
    TerminationRequest,
)
from spark_runtime.session import spark_session

_log = logging.getLogger("spark_runtime")

DEFAULT_STATE_PARTITIONS = 8
"""``spec.statePartitions`` when the SnapshotJob does not set it."""

ENV_INITIAL_SNAPSHOT_NAME = "SJ_INITIAL_SNAPSHOT_NAME"
"""Set by the operator on the first execution's driver Pod while the job has no snapshot."""


class BadInput(Exception):  # noqa: N818 - names the condition, like the protocol's errors
    """The command line, pipeline module or SnapshotJob spec cannot be run."""


@dataclass
class JobConfig:
    """Everything one execution needs, from the command line or the SnapshotJob.

    Attributes:
        module: The pipeline module.
        args: The pipeline's arguments.
        settings: The driver's settings.
        master: The Spark master.
        spark_conf: Extra Spark configuration.
    """

    module: str
    args: dict[str, Any]
    settings: DriverSettings
    master: str
    spark_conf: dict[str, str] = field(default_factory=dict)


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m spark_runtime``."""
    root = argparse.ArgumentParser(prog="python -m spark_runtime", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one execution of a pipeline")
    run.add_argument("--kubernetes", action="store_true", help="read the SnapshotJob")
    run.add_argument("--namespace", default=os.environ.get("SJ_NAMESPACE"))
    run.add_argument("--name", default=os.environ.get("SJ_JOB_NAME"), help="SnapshotJob name")
    run.add_argument(
        "--execution-id",
        default=os.environ.get("SJ_EXECUTION_ID"),
        help="fencing token (local mode: a fresh one by default)",
    )
    run.add_argument("--pipeline", help="pipeline module with build(p)")
    run.add_argument("--arg", action="append", default=[], help="pipeline argument key=value")
    run.add_argument("--args-json", default="{}", help="pipeline arguments as a JSON object")
    run.add_argument("--record-file", type=Path, help="local mode: execution record file")
    run.add_argument("--hazelcast", help="comma-separated host:port of Hazelcast members")
    run.add_argument("--cluster-name", default="dev", help="Hazelcast cluster name")
    run.add_argument("--master", default="local[2]", help="Spark master")
    run.add_argument("--conf", action="append", default=[], help="Spark conf key=value")
    run.add_argument("--job-uid", help="local mode: names snapshot maps and transactions")
    run.add_argument("--guarantee", choices=[g.value for g in Guarantee], default="EXACTLY_ONCE")
    run.add_argument("--snapshot-interval-ms", type=int, default=10_000)
    run.add_argument("--state-partitions", type=int, default=DEFAULT_STATE_PARTITIONS)
    run.add_argument(
        "--initial-snapshot-name",
        help="local mode: restore from this exported snapshot while the record has none",
    )
    run.add_argument("--suspend-on-failure", action="store_true")
    run.add_argument("--log-level", default="INFO")
    return root


def _pairs(items: Sequence[str], what: str) -> dict[str, str]:
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
    args.update(_pairs(ns.arg, "--arg"))
    settings = DriverSettings(
        job=JobIdentity(ns.job_uid, "local", ns.pipeline),
        guarantee=Guarantee(ns.guarantee),
        snapshot_interval_ms=ns.snapshot_interval_ms,
        state_partitions=ns.state_partitions,
        store=StoreAddress(tuple(ns.hazelcast.split(",")), ns.cluster_name),
        suspend_on_failure=ns.suspend_on_failure,
        initial_snapshot_name=ns.initial_snapshot_name or None,
    )
    return JobConfig(ns.pipeline, args, settings, ns.master, _pairs(ns.conf, "--conf"))


def kubernetes_config(job: Mapping[str, Any]) -> JobConfig:
    """Builds the job from its SnapshotJob object.

    The Hazelcast address comes from ``spec.hazelcast`` or, for the installation's own
    cluster, from ``SJ_HAZELCAST_ADDRESS`` / ``SJ_HAZELCAST_CLUSTER`` set by the operator.
    ``SJ_INITIAL_SNAPSHOT_NAME``, also from the operator, names the export to start from.

    Raises:
        BadInput: If the spec lacks what the driver needs.
    """
    spec, metadata = job.get("spec") or {}, job.get("metadata") or {}
    pipeline = spec.get("pipeline") or {}
    if not pipeline.get("module"):
        raise BadInput("SnapshotJob has no spec.pipeline.module")
    store = spec.get("hazelcast") or {}
    address = store.get("address") or os.environ.get("SJ_HAZELCAST_ADDRESS")
    if not address:
        raise BadInput("No Hazelcast address: set spec.hazelcast.address or SJ_HAZELCAST_ADDRESS")
    cluster = store.get("clusterName") or os.environ.get("SJ_HAZELCAST_CLUSTER", "dev")
    spark = spec.get("spark") or {}
    conf = {str(k): str(v) for k, v in (spark.get("conf") or {}).items()}
    try:
        partitions = int(spec.get("statePartitions") or DEFAULT_STATE_PARTITIONS)
    except (TypeError, ValueError) as error:
        raise BadInput(f"spec.statePartitions is not an integer: {error}") from error
    if partitions < 1:
        raise BadInput(f"spec.statePartitions must be at least 1, not {partitions}")
    fingerprint = json.dumps(pipeline, sort_keys=True)
    settings = DriverSettings(
        job=JobIdentity(str(metadata["uid"]), str(metadata["namespace"]), fingerprint),
        guarantee=Guarantee(spec.get("processingGuarantee", "EXACTLY_ONCE")),
        snapshot_interval_ms=int(spec.get("snapshotIntervalSeconds", 10)) * 1000,
        state_partitions=partitions,
        store=StoreAddress(tuple(address.split(",")), cluster),
        suspend_on_failure=bool(spec.get("suspendOnFailure", False)),
        initial_snapshot_name=os.environ.get(ENV_INITIAL_SNAPSHOT_NAME) or None,
    )
    return JobConfig(
        pipeline["module"],
        dict(pipeline.get("args") or {}),
        settings,
        spark.get("master", "k8s"),
        conf,
    )


class TerminationWatcher:
    """Polls ``status.termination`` and ``status.exportRequest`` in a background thread.

    Each request (by ``requestId``) is handed to the driver once; the operator clears
    ``termination`` when the execution has stopped and ``exportRequest`` once the export is
    listed in ``exportedSnapshots`` (or timed out, when it asks again with a new id).

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
        self._thread = threading.Thread(target=self._run, name="termination-watch", daemon=True)

    def start(self) -> None:
        """Starts polling."""
        self._thread.start()

    def stop(self) -> None:
        """Stops polling."""
        self._stop.set()

    def poll(self) -> TerminationRequest | None:
        """Returns a new request once; None otherwise."""
        with self._lock:
            request, self._request = self._request, None
            return request

    def poll_export(self) -> ExportRequest | None:
        """Returns a new export request once; None otherwise."""
        with self._lock:
            request, self._export = self._export, None
            return request

    def observe(self, job: Mapping[str, Any]) -> None:
        """Takes the requests out of one read of the SnapshotJob."""
        status = job.get("status") or {}
        self._observe_export(status.get("exportRequest"))
        termination = status.get("termination")
        if not termination:
            return
        request_id = str(termination.get("requestId", ""))
        if request_id in self._seen:
            return
        self._seen.add(request_id)
        try:
            request = TerminationRequest(
                TerminationMode[termination["mode"]], termination.get("exportName")
            )
        except (KeyError, ValueError) as error:
            _log.error("Ignoring bad termination request requestId=%s error=%s", request_id, error)
            return
        _log.info("Termination requested requestId=%s mode=%s", request_id, request.mode.name)
        with self._lock:
            self._request = request

    def _observe_export(self, export: Mapping[str, Any] | None) -> None:
        if not export:
            return
        request_id = str(export.get("requestId", ""))
        if request_id in self._seen_exports:
            return
        self._seen_exports.add(request_id)
        name = export.get("name")
        if not name:
            _log.error("Ignoring export request without a name requestId=%s", request_id)
            return
        _log.info("Export requested requestId=%s name=%s", request_id, name)
        with self._lock:
            self._export = ExportRequest(str(name), request_id)

    def _run(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.observe(self._fetch())
            except Exception as error:  # the API server may be briefly unreachable
                _log.warning("Could not read termination request error=%s", error)


def load_build(module_name: str) -> Build:
    """Imports the pipeline module and returns its ``build``.

    Raises:
        BadInput: If the module cannot be imported or has no ``build``.
    """
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise BadInput(f"Cannot import pipeline module {module_name}: {error}") from error
    build = getattr(module, "build", None)
    if not callable(build):
        raise BadInput(f"Pipeline module {module_name} has no build(p) function")
    result: Build = build
    return result


def start_spark(config: JobConfig, app_name: str) -> SparkSession:
    """Starts the driver's session, with Arrow and the cached JDBC drivers on the classpath."""
    return spark_session(
        app_name,
        master=config.master,
        shuffle_partitions=config.settings.state_partitions,
        arrow=True,
        jdbc_drivers=True,
        conf=config.spark_conf,
    )


@contextmanager
def _hazelcast(address: StoreAddress) -> Iterator[HazelcastSnapshotStore]:
    client = connect(address.members, address.cluster_name)
    try:
        yield HazelcastSnapshotStore(client)
    finally:
        client.shutdown()


def run(ns: argparse.Namespace) -> ExitCode:
    """Runs one execution; returns its exit code.

    Raises:
        BadInput: If the input cannot be run.
    """
    watcher: TerminationWatcher | None = None
    publish_export: Callable[[ExportedSnapshot], None] | None = None
    records: RecordStore
    if ns.kubernetes:
        from kubernetes import client as kube_client
        from kubernetes import config as kube_config

        from spark_runtime.kube_record_store import GROUP, PLURAL, VERSION, KubernetesRecordStore

        if not (ns.namespace and ns.name and ns.execution_id):
            raise BadInput("Kubernetes mode needs --namespace, --name and --execution-id")
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config()  # type: ignore[no-untyped-call]
        api = kube_client.CustomObjectsApi()

        def fetch() -> Mapping[str, Any]:
            job = api.get_namespaced_custom_object(GROUP, VERSION, ns.namespace, PLURAL, ns.name)
            return cast(Mapping[str, Any], job)

        config = kubernetes_config(fetch())
        kube_records = KubernetesRecordStore(api, ns.namespace, ns.name, ns.execution_id)
        records = kube_records

        def publish_export(export: ExportedSnapshot) -> None:
            kube_records.append_exported_snapshot(
                name=export.name,
                snapshot_id=export.snapshot_id,
                num_bytes=export.num_bytes,
                created_at=datetime.fromtimestamp(export.created_at / 1000, UTC),
                terminal=export.terminal,
            )

        watcher = TerminationWatcher(fetch)
        app_name = f"snapshotjob-{ns.namespace}-{ns.name}"
    else:
        config = local_config(ns)
        execution_id = ns.execution_id or uuid.uuid4().hex
        records = FileRecordStore.claim(ns.record_file, execution_id)
        app_name = f"snapshotjob-{config.settings.job.uid}"
    build = load_build(config.module)
    failpoints = Failpoints.from_env(os.environ)
    signals = StopSignals()
    signals.install()
    spark = start_spark(config, app_name)
    try:
        with _hazelcast(config.settings.store) as snapshots:
            driver = Driver(
                spark,
                build,
                config.args,
                config.settings,
                records,
                snapshots,
                failpoints=failpoints,
                poll_termination=watcher.poll if watcher is not None else None,
                poll_export=watcher.poll_export if watcher is not None else None,
                publish_export=publish_export,
                signals=signals,
            )
            if watcher is not None:
                watcher.start()
            try:
                code = driver.run()
            except FailpointCrash as crash:
                crash_now(crash)
            _log.info(
                "Driver exiting code=%d name=%s epochs=%d snapshots=%d",
                code,
                code.name,
                driver.epochs,
                driver.snapshots_taken,
            )
            return code
    finally:
        if watcher is not None:
            watcher.stop()
        spark.stop()


def crash_now(crash: FailpointCrash) -> NoReturn:
    """Ends the process at once, as if it died at the failpoint: no cleanup runs."""
    sys.stderr.write(f"Failpoint crash failpoint={crash.failpoint}\n")
    sys.stderr.flush()
    os._exit(ExitCode.FAILPOINT_CRASH)


def main(argv: Sequence[str] | None = None) -> int:
    """The process entry point; a failpoint crash never returns (see :func:`crash_now`)."""
    ns = parser().parse_args(argv)
    logging.basicConfig(
        level=ns.log_level.upper(),
        format="%(asctime)s %(levelname)s %(name)s %(message)s",
        stream=sys.stderr,
    )
    for noisy in ("py4j", "hazelcast"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return int(run(ns))
    except BadInput as error:
        _log.error("Bad input error=%s", error)
        return ExitCode.BAD_INPUT
    except Exception:
        _log.exception("Driver failed")
        return ExitCode.FAILED
