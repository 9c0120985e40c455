"""``python -m spark_runtime run``: the driver process, in local mode or in a Kubernetes Pod.

(``python -m spark_runtime snapshot ...`` inspects snapshots instead, see
:mod:`spark_runtime.snapshot_command`; ``suspend`` and ``export`` ask a local job's driver,
see :mod:`spark_runtime.local_command`.)

Both modes run the same :class:`~spark_runtime.driver.Driver`; they differ only in where the
job's settings and the execution record come from. Local mode takes everything from the
command line (``python -m spark_runtime run my_pipeline.py`` is enough), snapshots into the
embedded store in a local directory and keeps the record in a file (:class:`FileRecordStore`),
so a pipeline can be developed and its snapshots tested on a laptop. Kubernetes mode reads
its SnapshotJob, keeps the record in the job's status, watches ``status.termination`` and
``status.exportRequest`` for the operator's requests and lists its exports in
``status.exportedSnapshots``.

A :class:`FailpointCrash` (from ``SJ_FAILPOINTS``) ends the process with ``os._exit`` at once,
skipping every cleanup, because it stands for the process dying at that point.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from snapshotjob_contract.environment import ENV_EXECUTION_ID, ENV_JOB_NAME, ENV_NAMESPACE
from snapshotjob_contract.exits import DriverExit, process_exit_status
from snapshotjob_contract.logs import configure_logging
from snapshotjob_contract.observability import (
    ENV_LOG_FORMAT,
    ENV_METRICS_PORT,
    METRICS_PATH,
    LogFormat,
)
from snapshotjob_contract.record import MAX_BACKUP_COUNT
from snapshotjob_contract.spec import (
    DEFAULT_STATE_PARTITIONS,
    ExpiredOffsetsPolicy,
    ProcessingGuarantee,
    StallDetectionSpec,
)
from spark_runtime.execution import BadInput, Mode, run
from spark_runtime.local_command import (
    REQUEST_COMMANDS,
    add_request_parsers,
    add_state_dir_argument,
    run_request_command,
)
from spark_runtime.local_mode import LocalMode
from spark_runtime.snapshot_command import add_parser as add_snapshot_parser
from spark_runtime.snapshot_command import run_snapshot_command

# The driver's own messages have always come from this logger, whichever module logs them.
_log = logging.getLogger("spark_runtime")


def parser() -> argparse.ArgumentParser:
    """The command line of ``python -m spark_runtime``."""
    root = argparse.ArgumentParser(prog="python -m spark_runtime", description=__doc__)
    commands = root.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="run one execution of a pipeline")
    run.add_argument("--kubernetes", action="store_true", help="read the SnapshotJob")
    run.add_argument("--namespace", default=os.environ.get(ENV_NAMESPACE))
    run.add_argument("--name", default=os.environ.get(ENV_JOB_NAME), help="SnapshotJob name")
    run.add_argument(
        "--execution-id",
        default=os.environ.get(ENV_EXECUTION_ID),
        help="fencing token (local mode: a fresh one by default)",
    )
    run.add_argument(
        "pipeline_path",
        nargs="?",
        metavar="PIPELINE",
        help="local mode: the pipeline, a file (my_pipeline.py) or a module, with "
        "define_pipeline(p)",
    )
    run.add_argument("--pipeline", help="pipeline module with define_pipeline(p)")
    run.add_argument("--arg", action="append", default=[], help="pipeline argument key=value")
    run.add_argument("--args-json", default="{}", help="pipeline arguments as a JSON object")
    add_state_dir_argument(run)
    run.add_argument(
        "--record-file",
        type=Path,
        help="local mode: execution record file (default: the job's, in the state directory)",
    )
    run.add_argument(
        "--hazelcast",
        help="comma-separated host:port of Hazelcast members (local mode: instead of the "
        "embedded store in the state directory)",
    )
    run.add_argument("--cluster-name", default="dev", help="Hazelcast cluster name")
    run.add_argument("--master", default="local[2]", help="Spark master")
    run.add_argument("--conf", action="append", default=[], help="Spark conf key=value")
    run.add_argument(
        "--job-uid",
        help="local mode: names snapshot maps and transactions (default: the job's, made at "
        "its first run)",
    )
    run.add_argument(
        "--guarantee", choices=[g.value for g in ProcessingGuarantee], default="EXACTLY_ONCE"
    )
    run.add_argument("--snapshot-interval-ms", type=int, default=10_000)
    run.add_argument("--state-partitions", type=int, default=DEFAULT_STATE_PARTITIONS)
    run.add_argument(
        "--backup-count",
        type=int,
        choices=range(1, MAX_BACKUP_COUNT + 1),
        default=1,
        help="local mode: synchronous backups of the job's snapshot maps, as "
        "spec.hazelcast.backupCount (the members need the __sj.b<N>.* map configs)",
    )
    run.add_argument(
        "--from-export",
        "--initial-snapshot-name",
        dest="initial_snapshot_name",
        metavar="EXPORT",
        help="local mode: start from this exported snapshot while the record has none",
    )
    run.add_argument("--suspend-on-failure", action="store_true")
    run.add_argument(
        "--incremental-snapshots",
        action="store_true",
        help="local mode: snapshots write only what changed since the last one, as "
        "spec.incrementalSnapshots",
    )
    run.add_argument(
        "--max-deltas",
        type=int,
        help="local mode: most deltas after a state partition's full version, as "
        "spec.snapshotChains.maxDeltas (with --incremental-snapshots)",
    )
    run.add_argument(
        "--max-delta-percent",
        type=int,
        help="local mode: most bytes of a partition's deltas in percent of its full version, "
        "as spec.snapshotChains.maxDeltaPercent (with --incremental-snapshots)",
    )
    run.add_argument(
        "--split-brain-protection",
        action="store_true",
        help="local mode: stop when the store members reached are fewer than the record's "
        "quorum, as spec.splitBrainProtection",
    )
    run.add_argument(
        "--store-lost-seconds",
        type=float,
        default=30.0,
        help="stop (a transient failure) after reaching no store member for this long",
    )
    run.add_argument(
        "--source-lost-seconds",
        type=float,
        default=60.0,
        help="stop (a transient failure) after failing this long to find where the next "
        "epoch's range of a source ends (a Kafka cluster that is down)",
    )
    run.add_argument(
        "--expired-offsets",
        choices=[policy.value for policy in ExpiredOffsetsPolicy],
        default=ExpiredOffsetsPolicy.FAIL.value,
        help="local mode: what a restore does when a Kafka source's restored offset is below "
        "the partition's earliest retained offset, as spec.expiredOffsets: Fail stops (exit "
        "71) naming the partitions and the records gone, Earliest goes on from the earliest "
        "offset and logs what it skipped",
    )
    run.add_argument(
        "--epoch-timeout-seconds",
        type=positive_seconds,
        default=StallDetectionSpec().epoch_timeout_seconds,
        help="local mode: an epoch that runs longer ends the execution (exit 70), as "
        "spec.stallDetection.epochTimeoutSeconds",
    )
    run.add_argument(
        "--sink-timeout-seconds",
        type=positive_seconds,
        default=StallDetectionSpec().sink_timeout_seconds,
        help="local mode: a sink call of a snapshot that runs longer ends the execution "
        "(exit 70), as spec.stallDetection.sinkTimeoutSeconds",
    )
    run.add_argument("--log-level", default="INFO")
    run.add_argument(
        "--log-format",
        default=os.environ.get(ENV_LOG_FORMAT, LogFormat.TEXT.value),
        choices=[log_format.value for log_format in LogFormat],
        help=f"text, or json for one JSON object per line (env {ENV_LOG_FORMAT}, which the "
        "operator sets to its own format)",
    )
    run.add_argument(
        "--metrics-port",
        type=int,
        # A string default goes through type=int too, so a malformed variable is refused.
        default=os.environ.get(ENV_METRICS_PORT) or None,
        help=f"serve Prometheus metrics on this port at {METRICS_PATH}, 0 for any free port "
        f"(env {ENV_METRICS_PORT}, which the operator sets in driver Pods; none by default)",
    )
    add_snapshot_parser(commands)
    add_request_parsers(commands)
    return root


def positive_seconds(text: str) -> float:
    """A duration option's value: a number of seconds above 0.

    Raises:
        argparse.ArgumentTypeError: If it is not one; argparse names the option.
    """
    try:
        seconds = float(text)
    except ValueError:
        seconds = float("nan")
    if not seconds > 0 or seconds == float("inf"):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0")
    return seconds


def open_mode(ns: argparse.Namespace) -> Mode:
    """Reads the job and claims its record, in the mode the command line asks for.

    Raises:
        BadInput: If the command line or the SnapshotJob cannot be run.
    """
    if ns.kubernetes:
        # Imported here: the Kubernetes client is large, and local mode never needs it.
        from spark_runtime.kube_mode import KubernetesMode

        return KubernetesMode.from_args(ns)
    return LocalMode.from_args(ns)


def main(argv: Sequence[str] | None = None) -> int:
    """The process entry point; returns the process's exit status.

    A driver's status is its :class:`DriverExit` code, but 0 for one that ended as asked
    (:func:`~snapshotjob_contract.exits.process_exit_status`). A failpoint crash never
    returns (see ``execution.crash_now``).
    """
    ns = parser().parse_args(argv)
    if ns.command == "snapshot":
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        return run_snapshot_command(ns)
    if ns.command in REQUEST_COMMANDS:
        logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
        return run_request_command(ns)
    configure_logging(ns.log_level.upper(), ns.log_format)
    for noisy in ("py4j", "hazelcast"):
        logging.getLogger(noisy).setLevel(logging.WARNING)
    try:
        return process_exit_status(run(open_mode(ns), metrics_port=ns.metrics_port))
    except BadInput as error:
        _log.error("Bad input error=%s", error)
        return DriverExit.BAD_INPUT
    except Exception:
        _log.exception("Driver failed")
        return DriverExit.FAILED
