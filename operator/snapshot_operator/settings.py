"""The operator's settings: where the snapshot store is and how the decisions are timed.

Read once at start from the command line with environment fallbacks (``SJ_OPERATOR_*``), so
the Helm chart configures the operator through its Deployment's environment and a developer
through flags. The settings are immutable and handed to every handler through kopf's memo;
nothing else carries configuration, which keeps the handlers free of globals.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from pydantic import ValidationError

from snapshot_operator.reconcile import DecisionSettings
from snapshotjob_contract.base import explain, is_label_value
from snapshotjob_contract.observability import LogFormat
from snapshotjob_contract.spec import DurableStorageSpec

ENV_PREFIX = "SJ_OPERATOR_"
DEFAULT_CLUSTER_NAME = "snapshotjob"
DEFAULT_FINALIZER = "snapshotjob.io/finalizer"


@dataclass(frozen=True)
class OperatorSettings:
    """Everything the operator is configured with.

    Attributes:
        namespaces: Namespaces to watch; empty with ``all_namespaces``.
        all_namespaces: Watch every namespace (the chart's ClusterRole mode).
        store_members: ``host:port`` of the installation's Hazelcast members; the health
            endpoint is served on the same port.
        store_cluster_name: The installation's Hazelcast cluster name.
        store_label: The installation store's name, set as the ``snapshotjob.io/store`` label
            of the driver and executor Pods of every job that uses it: the store's
            NetworkPolicy admits only Pods with it. None for no label.
        health_timeout_seconds: How long one member may take to answer its health endpoint.
        driver_service_account: The ServiceAccount every driver runs as, which the
            installation created with its Role in each watched namespace (the chart's
            ``jobs.rbac.precreate``); None: the operator creates each job's own account, Role
            and binding when it first starts a driver.
        store_statefulset: Name of the store's StatefulSet whose members the operator
            restarts one at a time after their template changed; None disables that.
        store_namespace: Namespace of that StatefulSet.
        decision: Timings of the decision function.
        standalone: Run without kopf peering (a single replica, or tests).
        peering_name: Name of the KopfPeering object the replicas coordinate through.
        priority: Peering priority; the replica with the highest one works, the others wait.
        peering_lifetime_seconds: How long a replica that stopped renewing its peering entry
            (e.g. killed) still holds the others back: the failover time.
        liveness_endpoint: ``http://host:port/path`` for kopf's liveness probe, or None.
        instance: This replica's name, reported in Events (the Pod name in a cluster).
        log_level: Level of the operator's and kopf's logging.
        log_format: How the operator writes log lines; the drivers it starts write theirs
            the same way.
        metrics_port: The port of the operator's metrics endpoint; None for no endpoint.
        durable_storage: The installation's durable storage, for jobs without
            ``spec.durableStorage``; None when there is none.
        job_image_pull_secrets: Names of the Secrets every job's driver and executor Pods
            pull their images with, besides their pod templates'; each must exist in the
            job's namespace.
    """

    namespaces: tuple[str, ...] = ()
    all_namespaces: bool = False
    store_members: tuple[str, ...] = ()
    store_cluster_name: str = DEFAULT_CLUSTER_NAME
    store_label: str | None = None
    driver_service_account: str | None = None
    health_timeout_seconds: float = 2.0
    store_statefulset: str | None = None
    store_namespace: str | None = None
    decision: DecisionSettings = field(default_factory=DecisionSettings)
    standalone: bool = False
    peering_name: str = "snapshotjob-operator"
    priority: int | None = None
    peering_lifetime_seconds: int = 60
    liveness_endpoint: str | None = None
    instance: str = "snapshotjob-operator"
    log_level: str = "INFO"
    log_format: LogFormat = LogFormat.TEXT
    metrics_port: int | None = None
    durable_storage: DurableStorageSpec | None = None
    job_image_pull_secrets: tuple[str, ...] = ()

    @property
    def store_address(self) -> str | None:
        """The members as the driver Pods get them (``SJ_HAZELCAST_ADDRESS``), or None."""
        return ",".join(self.store_members) or None


def _split(value: str | None) -> tuple[str, ...]:
    return tuple(part.strip() for part in (value or "").split(",") if part.strip())


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """The command line of ``python -m snapshot_operator``, its defaults read from ``env``.

    Apart from :func:`parse_settings` so that its help can be read without parsing anything
    (``hack/render_reference_docs.py`` writes docs/reference/cli.md from it).

    Args:
        env: The environment the ``SJ_OPERATOR_*`` defaults come from.
    """

    def default(name: str, fallback: str | None = None) -> str | None:
        return env.get(ENV_PREFIX + name, fallback)

    # An empty variable counts as unset, so that an empty value never fails the start.
    def int_default(name: str, fallback: int) -> int:
        return int(default(name) or fallback)

    def bool_default(name: str) -> bool:
        return (default(name) or "").lower() == "true"

    parser = argparse.ArgumentParser(
        prog="python -m snapshot_operator",
        description="Kubernetes operator for snapshot-protected PySpark jobs (SnapshotJob)",
    )
    scope = parser.add_mutually_exclusive_group()
    scope.add_argument(
        "-n",
        "--namespace",
        action="append",
        default=None,
        help="Namespace to watch (repeatable; env SJ_OPERATOR_NAMESPACES, comma-separated)",
    )
    scope.add_argument(
        "-A",
        "--all-namespaces",
        action="store_true",
        default=bool_default("ALL_NAMESPACES"),
        help="Watch every namespace (env SJ_OPERATOR_ALL_NAMESPACES=true)",
    )
    parser.add_argument(
        "--store-members",
        default=default("STORE_MEMBERS", ""),
        help="host:port of the Hazelcast members, comma-separated (env SJ_OPERATOR_STORE_MEMBERS)",
    )
    parser.add_argument(
        "--store-cluster-name",
        default=default("STORE_CLUSTER_NAME", DEFAULT_CLUSTER_NAME),
        help="Hazelcast cluster name (env SJ_OPERATOR_STORE_CLUSTER_NAME)",
    )
    parser.add_argument(
        "--store-label",
        default=default("STORE_LABEL"),
        help="Value of the snapshotjob.io/store label on the drivers and executors of jobs "
        "that use the installation's store, which its NetworkPolicy admits; none if not set "
        "(env SJ_OPERATOR_STORE_LABEL)",
    )
    parser.add_argument(
        "--driver-service-account",
        default=default("DRIVER_SERVICE_ACCOUNT"),
        help="ServiceAccount of every driver, created in advance with its Role in each "
        "watched namespace; if not set, the operator creates each job's own account, Role and "
        "binding (env SJ_OPERATOR_DRIVER_SERVICE_ACCOUNT)",
    )
    parser.add_argument(
        "--store-statefulset",
        default=default("STORE_STATEFULSET"),
        help="StatefulSet of the Hazelcast members to restart one at a time when its template "
        "changes; disabled if not set (env SJ_OPERATOR_STORE_STATEFULSET)",
    )
    parser.add_argument(
        "--store-namespace",
        default=default("STORE_NAMESPACE"),
        help="Namespace of --store-statefulset (env SJ_OPERATOR_STORE_NAMESPACE)",
    )
    parser.add_argument(
        "--graceful-timeout",
        type=int,
        default=int_default("GRACEFUL_TIMEOUT_SECONDS", 300),
        help="Seconds before a graceful termination is made forceful",
    )
    parser.add_argument(
        "--pipeline-start-timeout",
        type=int,
        default=int_default("PIPELINE_START_TIMEOUT_SECONDS", 300),
        help="Seconds a new execution may take until its driver reports a running pipeline "
        "(restored, executors scheduled, a first Spark job done); then it is ended and counted "
        "as a failure (env SJ_OPERATOR_PIPELINE_START_TIMEOUT_SECONDS)",
    )
    parser.add_argument(
        "--store-retry",
        type=int,
        default=int_default("STORE_RETRY_SECONDS", 10),
        help="Seconds between looks while the store holds back a start",
    )
    parser.add_argument(
        "--resync",
        type=int,
        default=int_default("RESYNC_SECONDS", 60),
        help="Seconds between looks when nothing is due",
    )
    parser.add_argument(
        "--driver-lost",
        type=int,
        default=int_default("DRIVER_LOST_SECONDS", 60),
        help="Seconds a running driver Pod's node may stop reporting before the Pod is "
        "deleted at once and a new execution starts elsewhere",
    )
    parser.add_argument(
        "--standalone",
        action="store_true",
        default=bool_default("STANDALONE"),
        help="Run without peering (one replica only)",
    )
    parser.add_argument("--peering-name", default=default("PEERING_NAME", "snapshotjob-operator"))
    parser.add_argument(
        "--priority",
        type=int,
        default=None,
        help="Peering priority; random if omitted, so replicas never tie",
    )
    parser.add_argument(
        "--peering-lifetime",
        type=int,
        default=int_default("PEERING_LIFETIME_SECONDS", 60),
        help="Seconds before a silent replica's peering entry expires (the failover time)",
    )
    parser.add_argument("--liveness", default=default("LIVENESS_ENDPOINT"))
    parser.add_argument(
        "--instance", default=default("INSTANCE", env.get("HOSTNAME", "snapshotjob-operator"))
    )
    parser.add_argument(
        "--log-level",
        default=default("LOG_LEVEL", "INFO"),
        choices=("DEBUG", "INFO", "WARNING", "ERROR"),
        help="Logging level (env SJ_OPERATOR_LOG_LEVEL)",
    )
    parser.add_argument(
        "--log-format",
        default=default("LOG_FORMAT", LogFormat.TEXT.value),
        choices=[log_format.value for log_format in LogFormat],
        help="text, or json for one JSON object per line; drivers follow (env "
        "SJ_OPERATOR_LOG_FORMAT)",
    )
    parser.add_argument(
        "--metrics-port",
        type=int,
        default=int(default("METRICS_PORT") or 0) or None,
        help="Serve Prometheus metrics on this port at /metrics; none if not set (env "
        "SJ_OPERATOR_METRICS_PORT)",
    )
    parser.add_argument(
        "--job-image-pull-secrets",
        default=default("JOB_IMAGE_PULL_SECRETS"),
        help="Secrets the driver and executor Pods pull their images with, comma-separated, "
        "added to those of the job's pod template; each must exist in the job's namespace "
        "(env SJ_OPERATOR_JOB_IMAGE_PULL_SECRETS)",
    )
    durable = parser.add_argument_group(
        "durable storage",
        "The default of spec.durableStorage: an S3 bucket that keeps verified copies of every "
        "export; a credentials Secret must exist in each job's namespace, else the AWS SDK's "
        "default credential chain is used",
    )
    durable.add_argument("--durable-bucket", default=default("DURABLE_BUCKET"))
    durable.add_argument("--durable-prefix", default=default("DURABLE_PREFIX", ""))
    durable.add_argument("--durable-endpoint", default=default("DURABLE_ENDPOINT"))
    durable.add_argument("--durable-region", default=default("DURABLE_REGION", "us-east-1"))
    durable.add_argument(
        "--durable-credentials-secret", default=default("DURABLE_CREDENTIALS_SECRET")
    )
    durable.add_argument(
        "--durable-snapshot-copy-interval",
        default=default("DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS"),
        help="Seconds between copies of each job's automatic snapshot; none if not set",
    )
    return parser


def parse_settings(
    argv: Sequence[str] | None = None, environ: Mapping[str, str] | None = None
) -> OperatorSettings:
    """Returns the settings from command-line arguments, falling back to the environment.

    Args:
        argv: Arguments without the program name; ``sys.argv[1:]`` if None.
        environ: The environment; ``os.environ`` if None.

    Raises:
        SystemExit: If the arguments are invalid (argparse prints why).
    """
    env = os.environ if environ is None else environ
    parser = build_parser(env)
    args = parser.parse_args(argv)
    namespaces = tuple(args.namespace or ()) or (
        () if args.all_namespaces else _split(env.get(ENV_PREFIX + "NAMESPACES"))
    )
    if not namespaces and not args.all_namespaces:
        parser.error("Give --namespace or --all-namespaces")
    if args.store_statefulset and not args.store_namespace:
        parser.error("Give --store-namespace with --store-statefulset")
    if args.store_statefulset and not _split(args.store_members):
        parser.error("Give --store-members with --store-statefulset (its health gates restarts)")
    if args.store_label and not is_label_value(args.store_label):
        parser.error(
            f"--store-label {args.store_label!r} is not a Kubernetes label value: at most 63 "
            "letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
        )
    durable_storage = None
    if args.durable_bucket:
        try:
            durable_storage = DurableStorageSpec.model_validate(
                {
                    "bucket": args.durable_bucket,
                    "prefix": args.durable_prefix or "",
                    "endpoint": args.durable_endpoint or None,
                    "region": args.durable_region or "us-east-1",
                    "credentialsSecret": args.durable_credentials_secret or None,
                    "snapshotCopyIntervalSeconds": args.durable_snapshot_copy_interval or None,
                }
            )
        except ValidationError as error:
            parser.error(f"Invalid durable storage (--durable-*): {explain(error)}")
    return OperatorSettings(
        namespaces=namespaces,
        all_namespaces=bool(args.all_namespaces) and not namespaces,
        store_members=_split(args.store_members),
        store_cluster_name=args.store_cluster_name,
        store_label=args.store_label or None,
        driver_service_account=args.driver_service_account or None,
        store_statefulset=args.store_statefulset or None,
        store_namespace=args.store_namespace or None,
        decision=DecisionSettings(
            graceful_timeout_seconds=args.graceful_timeout,
            pipeline_start_timeout_seconds=args.pipeline_start_timeout,
            store_retry_seconds=args.store_retry,
            resync_seconds=args.resync,
            driver_lost_seconds=args.driver_lost,
        ),
        standalone=args.standalone,
        peering_name=args.peering_name,
        priority=args.priority,
        peering_lifetime_seconds=args.peering_lifetime,
        liveness_endpoint=args.liveness,
        instance=args.instance,
        log_level=args.log_level,
        log_format=LogFormat(args.log_format),
        metrics_port=args.metrics_port,
        durable_storage=durable_storage,
        job_image_pull_secrets=_split(args.job_image_pull_secrets),
    )
