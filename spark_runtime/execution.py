"""One execution of a pipeline, whichever mode started it.

Local and Kubernetes mode run the same :class:`~spark_runtime.driver.Driver` the same way;
they differ only in where the job's settings and the execution record come from, and in
whether an operator sends requests. So each mode is one object behind the :class:`Mode`
protocol (:class:`~spark_runtime.local_mode.LocalMode`,
:class:`~spark_runtime.kubernetes_mode.KubernetesMode`), and :func:`run` is the one
sequence both go through: load the pipeline, arm failpoints, install signal handlers,
start Spark, the metrics endpoint and the Hazelcast client, run the driver, stop everything.

A :class:`FailpointCrash` (from ``SJ_FAILPOINTS``) ends the process with ``os._exit`` at once,
skipping every cleanup, because it stands for the process dying at that point. A ``pause``
failpoint stops the process with ``SIGSTOP`` (:func:`pause_here`), because it stands for a
driver that stalls there and becomes a zombie once a newer execution took over.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NoReturn, Protocol, runtime_checkable

from pyspark.sql import SparkSession

from snapshot_protocol import FailpointCrash, Failpoints, RecordStore, SnapshotStoreError
from snapshot_store.directory import DirectorySnapshotStore
from snapshot_store.hazelcast import CONNECT_TIMEOUT_S, HazelcastSnapshotStore, connect
from snapshotjob_contract.exits import (
    ENDED_AS_ASKED_PREFIX,
    EXIT_REPORT_AFTER_SIGNAL_SECONDS,
    DriverExit,
)
from snapshotjob_contract.spark import JVM_CHUNKS_CONF
from spark_runtime.chunk_io import ChunkStore, StoreAddress
from spark_runtime.driver import (
    Driver,
    DriverSettings,
    ExportPoll,
    PublishExport,
    StopSignals,
    TerminationPoll,
)
from spark_runtime.durable import open_durable_copies
from spark_runtime.executor_reach import executors_unreached, unreached_message
from spark_runtime.metrics import DriverMetrics
from spark_runtime.pipeline import DefinePipeline
from spark_runtime.session import spark_session
from spark_runtime.watchdog import StepWatchdog

# The driver's own messages have always come from this logger, whichever module logs them.
_log = logging.getLogger("spark_runtime")

TERMINATION_MESSAGE_PATH = "/dev/termination-log"
"""Where Kubernetes reads a container's termination message (``terminationMessagePath``); the
operator puts it into the job's Event and ``lastFailure``."""

_TERMINATION_MESSAGE_MAX = 4096


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


class Mode(Protocol):
    """Where an execution's settings and record come from, and how it hears the operator.

    A mode is built, and so has read its settings and claimed its record, before :func:`run`
    starts anything.
    """

    @property
    def config(self) -> JobConfig:
        """The job."""
        ...

    @property
    def records(self) -> RecordStore:
        """The execution record store, already claimed for this execution."""
        ...

    @property
    def app_name(self) -> str:
        """The Spark application's name."""
        ...

    @property
    def poll_termination(self) -> TerminationPoll | None:
        """Returns the operator's termination request once; None without an operator."""
        ...

    @property
    def poll_export(self) -> ExportPoll | None:
        """Returns the operator's export request once; None without an operator."""
        ...

    @property
    def publish_export(self) -> PublishExport | None:
        """Reports a successful export where the operator sees it; None without one."""
        ...

    def start(self) -> None:
        """Starts listening for the operator's requests, once the driver can serve them."""
        ...

    def stop(self) -> None:
        """Stops listening; called whether or not :meth:`start` was."""
        ...


def load_definition(module_name: str) -> DefinePipeline:
    """Imports the pipeline module and returns its ``define_pipeline``.

    Raises:
        BadInput: If the module cannot be imported or has no ``define_pipeline``.
    """
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise BadInput(f"Cannot import pipeline module {module_name}: {error}") from error
    define = getattr(module, "define_pipeline", None)
    if not callable(define):
        hint = (
            ": build(p) was the old API; see docs/guides/pipeline-api.md"
            if callable(getattr(module, "build", None))
            else ""
        )
        raise BadInput(f"Pipeline module {module_name} has no define_pipeline(p) function{hint}")
    result: DefinePipeline = define
    return result


def start_spark(config: JobConfig, app_name: str) -> SparkSession:
    """Starts the driver's session, with Arrow, the cached JDBC drivers, Spark's Kafka
    connector and Delta Lake on the classpath.

    The shuffle partitions are the state partitions, so a shuffle by key lands where the
    state is; the job's own Spark settings come last and win, but for the embedded store's:
    its chunks are files the Python workers write, never the JVM's Hazelcast client.
    """
    conf = dict(config.spark_conf)
    if config.settings.store.is_embedded:
        conf[JVM_CHUNKS_CONF] = "false"
    return spark_session(
        app_name,
        master=config.master,
        shuffle_partitions=config.settings.state_partitions,
        arrow=True,
        jdbc_drivers=True,
        kafka=True,
        delta=True,
        conf=conf,
    )


class StoreUnreachable(Exception):  # noqa: N818 - names the condition, like BadInput
    """The driver could not reach any store member within the client's connect timeout."""


@contextmanager
def _metrics(port: int | None) -> Iterator[DriverMetrics]:
    """The execution's metrics, served on ``port`` (0: any free one) unless it is None.

    A port that cannot be bound is logged, not fatal: the job runs on without its metrics.
    """
    metrics = DriverMetrics()
    if port is not None:
        try:
            metrics.serve(port)
        except OSError as error:
            _log.error("Metrics not served port=%d error=%s", port, error)
    try:
        yield metrics
    finally:
        metrics.close()


@contextmanager
def _open_store(address: StoreAddress) -> Iterator[ChunkStore]:
    """The snapshot store at ``address``: the embedded directory, or a Hazelcast client."""
    if address.is_embedded:
        try:
            directory = DirectorySnapshotStore(address.directory)
        except SnapshotStoreError as error:
            raise StoreUnreachable(str(error)) from error
        yield directory
        return
    try:
        client = connect(address.members, address.cluster_name)
    except SnapshotStoreError as error:
        raise StoreUnreachable(
            f"Cannot reach the snapshot store within {CONNECT_TIMEOUT_S:.0f} s: {error}"
        ) from error
    try:
        yield HazelcastSnapshotStore(client)
    finally:
        client.shutdown()


def run(mode: Mode, metrics_port: int | None = None) -> DriverExit:
    """Runs one execution; returns how it ended (the process exits with
    :func:`~snapshotjob_contract.exits.process_exit_status` of it).

    Args:
        mode: Where the job and its record come from.
        metrics_port: Serve the driver's metrics on this port from before the restore until
            the execution ends (0: any free port); not served if None.

    Raises:
        BadInput: If the pipeline module cannot be loaded.
    """
    config = mode.config
    define = load_definition(config.module)
    failpoints = Failpoints.from_env(os.environ, pause=pause_here)
    signals = StopSignals(
        on_overdue=lambda: report_exit(
            mode.records,
            DriverExit.INTERRUPTED,
            f"Stop signal not served within {EXIT_REPORT_AFTER_SIGNAL_SECONDS}s: the current "
            "step is abandoned and the last snapshot restored",
        ),
        overdue_after_s=EXIT_REPORT_AFTER_SIGNAL_SECONDS,
    )
    signals.install()
    watchdog = StepWatchdog(lambda message: _end_stalled(mode.records, message))
    spark = start_spark(config, mode.app_name)
    try:
        with (
            _metrics(metrics_port) as metrics,
            _open_store(config.settings.store) as snapshots,
            open_durable_copies(config.settings.durable_storage, os.environ) as durable,
        ):
            blocked = _executors_blocked(spark, config)
            if blocked is not None:
                signals.served()
                _log.error("Executors cannot reach the store error=%s", blocked)
                write_termination_message(blocked)
                report_exit(mode.records, DriverExit.TRANSIENT_FAILURE, blocked)
                return DriverExit.TRANSIENT_FAILURE
            driver = Driver(
                spark,
                define,
                config.args,
                config.settings,
                mode.records,
                snapshots,
                failpoints=failpoints,
                poll_termination=mode.poll_termination,
                poll_export=mode.poll_export,
                publish_export=mode.publish_export,
                signals=signals,
                membership=snapshots,
                durable=durable,
                metrics=metrics,
                watchdog=watchdog,
            )
            mode.start()
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
            message = driver.exit_message
            if code is DriverExit.TERMINATED:
                # The process exits 0 for it (process_exit_status): the message says why.
                message = ended_as_asked_message(driver)
                _log.info("%s", message)
                write_termination_message(message)
            elif message is not None:
                _log.error("Execution ended code=%s message=%s", code.name, message)
                write_termination_message(message)
            signals.served()
            report_exit(mode.records, code, message)
            return code
    except StoreUnreachable as unreachable:
        # Counted as a failure with a backoff: an outage that lasts ends in maxRestarts.
        signals.served()
        _log.error("Store unreachable error=%s", unreachable)
        write_termination_message(str(unreachable))
        report_exit(mode.records, DriverExit.TRANSIENT_FAILURE, str(unreachable))
        return DriverExit.TRANSIENT_FAILURE
    finally:
        mode.stop()
        spark.stop()


def _executors_blocked(spark: SparkSession, config: JobConfig) -> str | None:
    """On Kubernetes, why the executors cannot reach the store the driver reached; None when
    they can, when there is no verdict, or when there are no executor Pods (local masters)."""
    if not config.master.startswith("k8s://"):
        return None
    instances = int(spark.conf.get("spark.executor.instances", "1") or "1")
    started = time.monotonic()
    unreached = executors_unreached(spark, config.settings.store.members, max(2, 2 * instances))
    _log.info(
        "Executors checked the store unreached=%s seconds=%.1f",
        "unknown" if unreached is None else len(unreached),
        time.monotonic() - started,
    )
    if not unreached:
        return None
    return unreached_message(unreached)


@runtime_checkable
class ExitReporter(Protocol):
    """A record store that can tell the operator how the driver exits (``status.driverExit``)."""

    def report_exit(self, exit_code: int, message: str | None) -> None:
        """Reports, fenced by the execution id, the exit the driver is about to make."""
        ...


def _end_stalled(records: object, message: str) -> NoReturn:
    """Ends the process at once for a step that outlived its timeout (exit 70).

    Called from the watchdog's thread while the main thread is still in the step: nothing
    can unwedge it, and a crash at any moment is safe (the next execution restores the last
    snapshot). The report and the termination message go first, so the operator and
    ``kubectl describe pod`` say which step it was.
    """
    write_termination_message(message)
    report_exit(records, DriverExit.STALLED, message)
    sys.stderr.write(f"Execution ended code=STALLED message={message}\n")
    sys.stderr.flush()
    os._exit(DriverExit.STALLED)


def report_exit(records: object, code: DriverExit, message: str | None) -> None:
    """Reports the exit where the store can (Kubernetes mode); a failed report is only logged.

    The report matters when the Pod is deleted as soon as it stops (an eviction): a driver
    that could not report is then taken for a lost one, a failure, which is the safe side.
    FENCED is not reported: a newer execution owns the status.
    """
    if code is DriverExit.FENCED or not isinstance(records, ExitReporter):
        return
    try:
        records.report_exit(int(code), message)
    except Exception as error:
        _log.warning("Could not report the exit code=%s error=%s", code.name, error)


def ended_as_asked_message(driver: Driver) -> str:
    """The termination message of a driver that served the termination request.

    It starts with :data:`~snapshotjob_contract.exits.ENDED_AS_ASKED_PREFIX`, which tells the
    operator (with ``status.driverExit``) that an exit 0 means TERMINATED, then names the mode
    carried out and the terminal snapshot, e.g. ``Ended as asked: mode=SUSPEND_GRACEFUL
    snapshotId=12 exportName=golden``.
    """
    coordinator = driver.coordinator
    end = coordinator.execution_end if coordinator is not None else None
    outcome = coordinator.last_outcome if coordinator is not None else None
    parts = [f"mode={end.mode.value if end is not None and end.mode is not None else 'unknown'}"]
    if outcome is not None and outcome.kind.is_terminal and outcome.successful:
        parts.append(f"snapshotId={outcome.snapshot_id}")
        if outcome.export_name is not None:
            parts.append(f"exportName={outcome.export_name}")
    return ENDED_AS_ASKED_PREFIX + " ".join(parts)


def write_termination_message(message: str, path: str | None = None) -> bool:
    """Leaves ``message`` where Kubernetes reads the container's termination message.

    Kubernetes creates the file in the container; where it does not exist (outside a
    container) nothing is created, and the message is only in the log.

    Args:
        message: Why the execution ended.
        path: The file; by default ``SJ_TERMINATION_MESSAGE_PATH`` or
            :data:`TERMINATION_MESSAGE_PATH`.

    Returns:
        Whether the message was written.
    """
    target = path or os.environ.get("SJ_TERMINATION_MESSAGE_PATH", TERMINATION_MESSAGE_PATH)
    if not os.path.isfile(target):
        return False
    try:
        with open(target, "w", encoding="utf-8") as file:
            file.write(message[:_TERMINATION_MESSAGE_MAX])
    except OSError:
        return False
    return True


def pause_here(failpoint: str) -> None:
    """Stops this process at the failpoint until ``SIGCONT``, then lets it carry on there.

    Only the Python process stops; its Spark JVM and the Hazelcast members keep running, as
    when a driver is descheduled or its node freezes. The log lines around the stop tell a
    test where the process is and when it went on.
    """
    _log.warning("Failpoint pausing failpoint=%s pid=%d", failpoint, os.getpid())
    for handler in logging.getLogger().handlers:
        handler.flush()
    os.kill(os.getpid(), signal.SIGSTOP)
    _log.warning("Failpoint resumed failpoint=%s pid=%d", failpoint, os.getpid())


def crash_now(crash: FailpointCrash) -> NoReturn:
    """Ends the process at once, as if it died at the failpoint: no cleanup runs."""
    sys.stderr.write(f"Failpoint crash failpoint={crash.failpoint}\n")
    sys.stderr.flush()
    os._exit(DriverExit.FAILPOINT_CRASH)
