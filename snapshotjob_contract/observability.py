"""What the operator and the driver expose to monitoring: metrics ports and names, log formats.

Defined here once because three parties must agree on them: the programs that serve the
metrics and write the logs, the operator that builds the driver Pod (its ports and
environment), and the chart that renders the PodMonitor, the Grafana dashboard and the alert
rules (whose queries a test checks against :data:`OPERATOR_METRICS` and
:data:`DRIVER_METRICS`). ``docs/reference/metrics.md`` lists the same metrics for people.

Names follow Prometheus' conventions: a ``snapshotjob_`` namespace, then the program, base
units in the name (``_seconds``, ``_bytes``), ``_total`` on counters only.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

METRICS_PORT_NAME = "metrics"
"""The name of the metrics port of the operator's and the driver's containers."""
OPERATOR_METRICS_PORT = 9400
"""The operator's default metrics port (``--metrics-port``)."""
DRIVER_METRICS_PORT = 9401
"""The driver's metrics port, which the operator sets in the driver Pod."""
METRICS_PATH = "/metrics"
"""Where both serve the metrics, in Prometheus' text format."""

ENV_METRICS_PORT = "SJ_METRICS_PORT"
"""The driver's metrics port; unset for no metrics endpoint."""
ENV_LOG_FORMAT = "SJ_LOG_FORMAT"
"""The driver's log format (:class:`LogFormat`), as the operator's own."""


class LogFormat(enum.StrEnum):
    """How the operator and the driver write their log lines."""

    TEXT = "text"
    """``<time> <LEVEL> <logger> <Message key=value ...>``: for people reading ``kubectl logs``."""
    JSON = "json"
    """One JSON object per line, with ``time``, ``level``, ``logger`` and ``message``, and each
    ``key=value`` of the message as a field of its own: for log pipelines (Loki, Elasticsearch,
    Cloud Logging) that index fields."""


class MetricType(enum.StrEnum):
    """The Prometheus metric types used here."""

    COUNTER = "counter"
    """Only goes up (``_total``); read with ``rate()`` or ``increase()``."""
    GAUGE = "gauge"
    """A value that goes up and down, read as it is."""
    HISTOGRAM = "histogram"
    """Observations in buckets (``_bucket``, ``_sum``, ``_count``), for quantiles."""


@dataclass(frozen=True)
class Metric:
    """One metric: its name (without the suffixes Prometheus adds), type, help and labels."""

    name: str
    type: MetricType
    help: str
    labels: tuple[str, ...] = ()


# --- The operator ---------------------------------------------------------------------------
OPERATOR_JOBS = Metric(
    "snapshotjob_operator_jobs",
    MetricType.GAUGE,
    "SnapshotJobs the operator supervises, by phase",
    ("phase",),
)
OPERATOR_RECONCILE_DURATION = Metric(
    "snapshotjob_operator_reconcile_duration_seconds",
    MetricType.HISTOGRAM,
    "Time one reconcile of a job takes: reads, decision and the actions performed",
)
OPERATOR_RECONCILE_ERRORS = Metric(
    "snapshotjob_operator_reconcile_errors_total",
    MetricType.COUNTER,
    "Reconciles that failed with an error and are retried",
)
OPERATOR_RESTARTS = Metric(
    "snapshotjob_operator_restarts_total",
    MetricType.COUNTER,
    "Executions the operator restarted, by the reason of the restart",
    ("reason",),
)
OPERATOR_EXECUTIONS_STARTED = Metric(
    "snapshotjob_operator_executions_started_total",
    MetricType.COUNTER,
    "Driver Pods the operator created, one per execution",
)
OPERATOR_STORE_MEMBERS_REACHABLE = Metric(
    "snapshotjob_operator_store_members_reachable",
    MetricType.GAUGE,
    "Store members that answered the operator's last health check, by cluster name",
    ("cluster",),
)
OPERATOR_STORE_CLUSTER_SAFE = Metric(
    "snapshotjob_operator_store_cluster_safe",
    MetricType.GAUGE,
    "1 if the store's last health check found every partition's backups in place, else 0",
    ("cluster",),
)
OPERATOR_KUBERNETES_API_ERRORS = Metric(
    "snapshotjob_operator_kubernetes_api_errors_total",
    MetricType.COUNTER,
    "Kubernetes API calls that failed, by operation and HTTP status (0: no response)",
    ("operation", "code"),
)

OPERATOR_JOB_PHASE = Metric(
    "snapshotjob_operator_job_phase",
    MetricType.GAUGE,
    "1 for each SnapshotJob, labelled with the phase its last reconcile left",
    ("namespace", "snapshotjob", "phase"),
)
OPERATOR_JOB_LAST_SNAPSHOT_TIME = Metric(
    "snapshotjob_operator_job_last_snapshot_timestamp_seconds",
    MetricType.GAUGE,
    "Unix time the job's restore point was taken (status.lastSnapshotTime), across executions",
    ("namespace", "snapshotjob"),
)
OPERATOR_JOB_SNAPSHOT_INTERVAL = Metric(
    "snapshotjob_operator_job_snapshot_interval_seconds",
    MetricType.GAUGE,
    "The job's spec.snapshotIntervalSeconds, for alerts on its restore point's age",
    ("namespace", "snapshotjob"),
)
OPERATOR_JOB_SNAPSHOT_SIZE = Metric(
    "snapshotjob_operator_job_snapshot_size_bytes",
    MetricType.GAUGE,
    "Bytes of the job's restore point, one copy, as its execution record states",
    ("namespace", "snapshotjob"),
)
OPERATOR_JOB_SNAPSHOT_CHUNKS = Metric(
    "snapshotjob_operator_job_snapshot_chunks",
    MetricType.GAUGE,
    "Map entries (chunks) of the job's restore point, as its execution record states",
    ("namespace", "snapshotjob"),
)

OPERATOR_METRICS: tuple[Metric, ...] = (
    OPERATOR_JOBS,
    OPERATOR_RECONCILE_DURATION,
    OPERATOR_RECONCILE_ERRORS,
    OPERATOR_RESTARTS,
    OPERATOR_EXECUTIONS_STARTED,
    OPERATOR_STORE_MEMBERS_REACHABLE,
    OPERATOR_STORE_CLUSTER_SAFE,
    OPERATOR_KUBERNETES_API_ERRORS,
    OPERATOR_JOB_PHASE,
    OPERATOR_JOB_LAST_SNAPSHOT_TIME,
    OPERATOR_JOB_SNAPSHOT_INTERVAL,
    OPERATOR_JOB_SNAPSHOT_SIZE,
    OPERATOR_JOB_SNAPSHOT_CHUNKS,
)
"""Every metric the operator serves."""

# --- The driver -----------------------------------------------------------------------------
DRIVER_SNAPSHOT_DURATION = Metric(
    "snapshotjob_driver_snapshot_duration_seconds",
    MetricType.HISTOGRAM,
    "Time an automatic snapshot takes, both phases, successful or not",
)
DRIVER_SNAPSHOTS = Metric(
    "snapshotjob_driver_snapshots_total",
    MetricType.COUNTER,
    "Successful automatic snapshots of this execution",
)
DRIVER_SNAPSHOT_SIZE = Metric(
    "snapshotjob_driver_snapshot_size_bytes",
    MetricType.GAUGE,
    "Bytes of the last successful snapshot",
)
DRIVER_SNAPSHOT_CHUNKS = Metric(
    "snapshotjob_driver_snapshot_chunks",
    MetricType.GAUGE,
    "Chunks of the last successful snapshot",
)
DRIVER_LAST_SNAPSHOT_TIME = Metric(
    "snapshotjob_driver_last_successful_snapshot_timestamp_seconds",
    MetricType.GAUGE,
    "Unix time of the last successful snapshot (restored or taken): alert on its age for RPO",
)
DRIVER_SNAPSHOT_INTERVAL = Metric(
    "snapshotjob_driver_snapshot_interval_seconds",
    MetricType.GAUGE,
    "The job's snapshot interval, for alerts on the last snapshot's age",
)
DRIVER_SNAPSHOT_FAILURES = Metric(
    "snapshotjob_driver_snapshot_failures_total",
    MetricType.COUNTER,
    "Automatic snapshots that failed, by reason",
    ("reason",),
)
DRIVER_RESTORE_DURATION = Metric(
    "snapshotjob_driver_restore_duration_seconds",
    MetricType.GAUGE,
    "Time this execution's restore took (0 while it has not restored)",
)
DRIVER_EPOCH_DURATION = Metric(
    "snapshotjob_driver_epoch_duration_seconds",
    MetricType.HISTOGRAM,
    "Time one epoch of the pipeline takes",
)
DRIVER_ROWS_IN = Metric(
    "snapshotjob_driver_rows_in_total",
    MetricType.COUNTER,
    "Rows read, by source",
    ("source",),
)
DRIVER_ROWS_OUT = Metric(
    "snapshotjob_driver_rows_out_total",
    MetricType.COUNTER,
    "Rows written, by sink",
    ("sink",),
)
DRIVER_RECORDS_SKIPPED = Metric(
    "snapshotjob_driver_source_records_skipped_total",
    MetricType.COUNTER,
    "Records a restore skipped because the source no longer held them, by source",
    ("source",),
)
DRIVER_SOURCE_RECORDS_BEHIND = Metric(
    "snapshotjob_driver_source_records_behind",
    MetricType.GAUGE,
    "Records a source holds past the job's read position, by source, at the last epoch plan",
    ("source",),
)

DRIVER_METRICS: tuple[Metric, ...] = (
    DRIVER_SNAPSHOT_DURATION,
    DRIVER_SNAPSHOTS,
    DRIVER_SNAPSHOT_SIZE,
    DRIVER_SNAPSHOT_CHUNKS,
    DRIVER_LAST_SNAPSHOT_TIME,
    DRIVER_SNAPSHOT_INTERVAL,
    DRIVER_SNAPSHOT_FAILURES,
    DRIVER_RESTORE_DURATION,
    DRIVER_EPOCH_DURATION,
    DRIVER_ROWS_IN,
    DRIVER_ROWS_OUT,
    DRIVER_RECORDS_SKIPPED,
    DRIVER_SOURCE_RECORDS_BEHIND,
)
"""Every metric the driver serves."""
