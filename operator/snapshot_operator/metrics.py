"""The operator's Prometheus metrics: what a platform team alerts and draws dashboards on.

The metrics' names, types and labels are defined once in
:mod:`snapshotjob_contract.observability` (the chart's alert rules and dashboard are checked
against the same definitions); this module only creates the collectors and says when each one
moves. The executor (:mod:`snapshot_operator.executing`) reports what a reconcile did through
:meth:`OperatorMetrics.reconciled`, from the observation and the decided actions, so no metric
needs a read of its own. Kubernetes API errors are counted where every call passes, in
:class:`snapshot_operator.kubernetes_gateway.ClientKubernetesGateway`.

Each :class:`OperatorMetrics` has its own registry rather than prometheus_client's global one:
tests build many operators in one process, and a global registry would refuse the second.
The jobs-by-phase gauge and the per-job series are computed when scraped, from what each
job's last reconcile left, so a deleted job (or one peering moved to another replica) drops
out instead of leaving a stale series.

The per-job series are what an alert needs to name one job: its phase (a FAILED job waits
for a person), and its restore point (``status.lastSnapshotTime``, the interval, the record's
size of that snapshot). The restore point's age is read here rather than from the driver:
the operator serves it whether or not a driver runs, so the age goes on growing across
executions that restart without snapshotting, where each driver's own gauge lives only as
long as its Pod. They are labelled ``namespace`` and ``snapshotjob`` like the drivers' series;
the operator's PodMonitor must honour the labels (``honorLabels: true``), or Prometheus keeps
the operator Pod's namespace and renames the job's to ``exported_namespace``.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from snapshot_operator.reconcile import (
    Action,
    EmitEvent,
    EventReason,
    InvalidSpec,
    Observation,
    PatchStatus,
    StoreHealth,
)
from snapshotjob_contract import Phase
from snapshotjob_contract.observability import (
    OPERATOR_EXECUTIONS_STARTED,
    OPERATOR_JOB_LAST_SNAPSHOT_TIME,
    OPERATOR_JOB_PHASE,
    OPERATOR_JOB_SNAPSHOT_CHUNKS,
    OPERATOR_JOB_SNAPSHOT_INTERVAL,
    OPERATOR_JOB_SNAPSHOT_SIZE,
    OPERATOR_JOBS,
    OPERATOR_KUBERNETES_API_ERRORS,
    OPERATOR_RECONCILE_DURATION,
    OPERATOR_RECONCILE_ERRORS,
    OPERATOR_RESTARTS,
    OPERATOR_STORE_CLUSTER_SAFE,
    OPERATOR_STORE_MEMBERS_REACHABLE,
    Metric,
)
from snapshotjob_contract.record import NO_SNAPSHOT

log = logging.getLogger(__name__)

RECONCILE_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Reconciles take milliseconds unless a store copy or a slow API server is involved."""

UNKNOWN_REASON = "Unknown"
"""The restart reason when the decision emitted no Event with the restart."""

RESTART_REASONS: tuple[str, ...] = (
    EventReason.EXECUTION_FAILED,
    EventReason.FORCED_RESTART,
    EventReason.DRIVER_INTERRUPTED,
    EventReason.DRIVER_NODE_LOST,
    EventReason.QUORUM_LOST,
    EventReason.DRIVER_POD_MISSING,
    EventReason.UPGRADING,
    UNKNOWN_REASON,
)
"""The reasons a restart is counted under, each served at 0 from the operator's start.

``increase()`` and ``rate()`` cannot see a counter's first sample as an increase: a series
created by its first restart, at 1, would hide that restart from the restart-loop alert and
the dashboard (``promtool test rules`` showed 2 + 2 restarts of two reasons read as 2)."""


def restart_reason(previous_phase: str | None, actions: Sequence[Action]) -> str | None:
    """Returns why the decided actions restart the job, or None if they do not.

    A restart is the job's move into RESTARTING; its reason is the Event the same decision
    emitted with it (``ForcedRestart``, ``ExecutionFailed``, ``DriverNodeLost``...), a fixed
    set of CamelCase words, so the label's cardinality is bounded.

    Args:
        previous_phase: ``status.phase`` as read before the decision.
        actions: The decided actions.
    """
    if previous_phase == Phase.RESTARTING:
        return None
    if phase_after(previous_phase, actions) != Phase.RESTARTING:
        return None
    reasons = [str(action.reason) for action in actions if isinstance(action, EmitEvent)]
    # The restart's own Event, when the decision emitted others with it (ExportRejected...).
    known = [reason for reason in reasons if reason in RESTART_REASONS]
    return (known or reasons or [UNKNOWN_REASON])[0]


def phase_after(previous_phase: str | None, actions: Sequence[Action]) -> str | None:
    """Returns the job's phase once the decided status patches are written."""
    phase = previous_phase
    for action in actions:
        if isinstance(action, PatchStatus) and "phase" in action.patch:
            phase = action.patch["phase"]
    return phase


def last_snapshot_after(observation: Observation, actions: Sequence[Action]) -> datetime | None:
    """Returns ``status.lastSnapshotTime`` once the decided status patches are written.

    The decision moves it with the execution record's restore point
    (:meth:`~snapshot_operator.reconcile.plan.Plan.update_last_snapshot_time`), in a patch of
    the JSON form: an RFC 3339 string, or null when the job starts over without a snapshot.
    """
    taken = observation.status.last_snapshot_time
    for action in actions:
        if isinstance(action, PatchStatus) and "lastSnapshotTime" in action.patch:
            value = action.patch["lastSnapshotTime"]
            taken = datetime.fromisoformat(value) if isinstance(value, str) else value
    return taken


@dataclass(frozen=True)
class JobSeries:
    """What one job's series show: the values its last reconcile left.

    Attributes:
        phase: The job's phase; None before it has one (a new job's first reconcile failed).
        last_snapshot_unix_s: When its restore point was taken; None without one.
        interval_s: Its ``spec.snapshotIntervalSeconds``; None while its spec is invalid.
        snapshot_bytes: Bytes of its restore point, as the record states them; None if unknown.
        snapshot_chunks: Chunks (map entries) of its restore point; None if unknown.
    """

    phase: str | None = None
    last_snapshot_unix_s: float | None = None
    interval_s: float | None = None
    snapshot_bytes: int | None = None
    snapshot_chunks: int | None = None


def job_series(
    previous: JobSeries,
    phase: str | None,
    observation: Observation | None,
    actions: Sequence[Action],
) -> JobSeries:
    """Returns a job's series after a reconcile.

    Args:
        previous: The job's series before it (all None for a job not seen yet).
        phase: The job's phase once the decided patches are written.
        observation: What the decision was based on; None keeps the other values as they were.
        actions: The decided actions (those written, or none if the writes lost a race).
    """
    series = replace(previous, phase=phase)
    if observation is None:
        return series
    taken = last_snapshot_after(observation, actions)
    spec = observation.spec
    interval = None if isinstance(spec, InvalidSpec) else float(spec.snapshot_interval_seconds)
    record = observation.status.record()
    stats = record.snapshot_stats
    size, chunks = previous.snapshot_bytes, previous.snapshot_chunks
    if record.snapshot_id == NO_SNAPSHOT:
        size = chunks = None
    elif stats is not None and stats.snapshot_id == record.snapshot_id:
        size, chunks = stats.num_bytes, stats.num_chunks
    # Else the record's figures are a later attempt's, which failed: the restore point's stay.
    return replace(
        series,
        last_snapshot_unix_s=taken.timestamp() if taken is not None else None,
        interval_s=interval if interval is not None else previous.interval_s,
        snapshot_bytes=size,
        snapshot_chunks=chunks,
    )


_PER_JOB: tuple[tuple[Metric, str], ...] = (
    (OPERATOR_JOB_LAST_SNAPSHOT_TIME, "last_snapshot_unix_s"),
    (OPERATOR_JOB_SNAPSHOT_INTERVAL, "interval_s"),
    (OPERATOR_JOB_SNAPSHOT_SIZE, "snapshot_bytes"),
    (OPERATOR_JOB_SNAPSHOT_CHUNKS, "snapshot_chunks"),
)
"""The per-job gauges besides the phase, and the :class:`JobSeries` field each one shows."""


class _Jobs(Collector):
    """The jobs-by-phase gauge and the per-job series, computed at scrape time."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[tuple[str, str], JobSeries] = {}

    def get(self, namespace: str, name: str) -> JobSeries:
        with self._lock:
            return self._jobs.get((namespace, name), JobSeries())

    def set(self, namespace: str, name: str, series: JobSeries | None) -> None:
        with self._lock:
            if series is None:
                self._jobs.pop((namespace, name), None)
            else:
                self._jobs[(namespace, name)] = series

    def collect(self) -> Iterator[GaugeMetricFamily]:
        with self._lock:
            jobs = sorted(self._jobs.items())
        phases = [series.phase for _, series in jobs]
        family = _family(OPERATOR_JOBS)
        # Every phase is reported, zeros too: an alert on `== 0` needs the series to exist.
        for phase in Phase:
            family.add_metric([phase.value], phases.count(phase.value))
        yield family
        # One series per job, in its current phase only: a phase change ends the old series,
        # so `snapshotjob_operator_job_phase{phase="FAILED"}` exists exactly while it is FAILED.
        per_phase = _family(OPERATOR_JOB_PHASE)
        for (namespace, name), series in jobs:
            if series.phase is not None:
                per_phase.add_metric([namespace, name, series.phase], 1)
        yield per_phase
        for metric, field in _PER_JOB:
            per_job = _family(metric)
            for (namespace, name), series in jobs:
                value = getattr(series, field)
                # No series rather than a 0 that reads as "taken in 1970" or "empty".
                if value is not None:
                    per_job.add_metric([namespace, name], value)
            yield per_job


def _family(metric: Metric) -> GaugeMetricFamily:
    return GaugeMetricFamily(metric.name, metric.help, labels=list(metric.labels))


class OperatorMetrics:
    """The operator's collectors on a registry of their own, and the endpoint serving them."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        self._jobs = _Jobs()
        self.registry.register(self._jobs)
        self._reconcile_seconds = Histogram(
            OPERATOR_RECONCILE_DURATION.name,
            OPERATOR_RECONCILE_DURATION.help,
            buckets=RECONCILE_BUCKETS,
            registry=self.registry,
        )
        self._reconcile_errors = Counter(
            _counter_name(OPERATOR_RECONCILE_ERRORS.name),
            OPERATOR_RECONCILE_ERRORS.help,
            registry=self.registry,
        )
        self._restarts = Counter(
            _counter_name(OPERATOR_RESTARTS.name),
            OPERATOR_RESTARTS.help,
            OPERATOR_RESTARTS.labels,
            registry=self.registry,
        )
        for reason in RESTART_REASONS:
            self._restarts.labels(reason)
        self._executions_started = Counter(
            _counter_name(OPERATOR_EXECUTIONS_STARTED.name),
            OPERATOR_EXECUTIONS_STARTED.help,
            registry=self.registry,
        )
        self._members_reachable = Gauge(
            OPERATOR_STORE_MEMBERS_REACHABLE.name,
            OPERATOR_STORE_MEMBERS_REACHABLE.help,
            OPERATOR_STORE_MEMBERS_REACHABLE.labels,
            registry=self.registry,
        )
        self._cluster_safe = Gauge(
            OPERATOR_STORE_CLUSTER_SAFE.name,
            OPERATOR_STORE_CLUSTER_SAFE.help,
            OPERATOR_STORE_CLUSTER_SAFE.labels,
            registry=self.registry,
        )
        self._api_errors = Counter(
            _counter_name(OPERATOR_KUBERNETES_API_ERRORS.name),
            OPERATOR_KUBERNETES_API_ERRORS.help,
            OPERATOR_KUBERNETES_API_ERRORS.labels,
            registry=self.registry,
        )
        self._server: Any = None

    def reconciled(
        self,
        namespace: str,
        name: str,
        *,
        seconds: float,
        previous_phase: str | None,
        actions: Sequence[Action],
        observation: Observation | None = None,
    ) -> None:
        """Records one reconcile that ran to its end (its writes may have lost a race).

        Args:
            namespace: The job's namespace.
            name: The job's name.
            seconds: How long the reconcile took.
            previous_phase: The job's phase as read.
            actions: The decided actions; none if their writes lost a race.
            observation: What the decision was based on: the job's restore point and
                interval for its series; without it those series keep their last values.
        """
        self._reconcile_seconds.observe(seconds)
        phase = phase_after(previous_phase, actions)
        previous = self._jobs.get(namespace, name)
        self._jobs.set(namespace, name, job_series(previous, phase, observation, actions))
        reason = restart_reason(previous_phase, actions)
        if reason is not None:
            self._restarts.labels(reason).inc()

    def reconcile_failed(self, seconds: float) -> None:
        """Records a reconcile that raised; it is retried."""
        self._reconcile_seconds.observe(seconds)
        self._reconcile_errors.inc()

    def job_gone(self, namespace: str, name: str) -> None:
        """Forgets a job that no longer exists."""
        self._jobs.set(namespace, name, None)

    def execution_started(self) -> None:
        """Records a driver Pod the operator created."""
        self._executions_started.inc()

    def store_health(self, cluster: str, health: StoreHealth | None) -> None:
        """Records the store's health as a reconcile read it.

        Args:
            cluster: The store's cluster name.
            health: The store's health; None if no member answered (no member reachable).
        """
        reachable = health.member_count if health is not None else 0
        safe = health is not None and health.cluster_safe
        self._members_reachable.labels(cluster).set(reachable)
        self._cluster_safe.labels(cluster).set(1 if safe else 0)

    def api_error(self, operation: str, code: int) -> None:
        """Records a Kubernetes API call that failed.

        Args:
            operation: The gateway method, e.g. ``patch_status``.
            code: The HTTP status; 0 when no response came.
        """
        self._api_errors.labels(operation, str(code)).inc()

    def serve(self, port: int, address: str = "0.0.0.0") -> int:
        """Serves the metrics on ``http://address:port/metrics`` in a daemon thread.

        Args:
            port: The TCP port; 0 picks a free one.
            address: The address to listen on.

        Returns:
            The port listened on.
        """
        server, _ = start_http_server(port, addr=address, registry=self.registry)
        self._server = server
        bound = int(server.server_port)
        log.info("Serving metrics address=%s port=%d path=/metrics", address, bound)
        return bound

    def close(self) -> None:
        """Stops the endpoint, if it was started."""
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


def _counter_name(name: str) -> str:
    """The name prometheus_client wants for a counter: it adds ``_total`` itself."""
    return name.removesuffix("_total")
