"""The driver's Prometheus metrics: how an execution's snapshots, restore and epochs go.

A platform team alerts on the age of a job's restore point (RPO), on failing snapshots and on
throughput; the operator sees none of it, since only the driver knows when a snapshot or an
epoch ends. So the driver serves its own endpoint (``--metrics-port``, which the operator sets
from :data:`~snapshotjob_contract.observability.ENV_METRICS_PORT` in every driver Pod). The
names, types, help texts and labels are defined once, in
:mod:`snapshotjob_contract.observability` (the chart's alerts and dashboard are checked
against the same definitions); this module only creates the collectors from them and says
when each one moves. Every value comes from something the driver knows anyway: the
coordinator's snapshot outcome and record, its own clock, the epoch plan's offset ranges and
the counts the sinks make while they write. No metric costs a Spark job or a store read.

Rows read are reported by the sources that can tell from an epoch's offsets
(:meth:`~spark_runtime.sources.base.Source.rows_between`): the sequence exactly; Kafka as the
offsets in the ranges, which also counts the commit markers and aborted records a
transactional producer upstream leaves there; PostgreSQL from the count its range query
makes anyway. Files are only counted by reading them, so a file source has no series. Rows
written are reported by the sinks that count them while writing: PostgreSQL (the rows of
its committed transactions, or of each epoch when it writes at once), Kafka's exactly-once
path (the rows it publishes, also those a restore publishes for the snapshot it restores) and
the Hazelcast map (the entries it puts). Spark's own writers (the file sink, Kafka's
at-least-once path) and the console do not count, so those sinks have no series; nor are the
transactions of an earlier execution that a restore commits counted.

Records skipped are those a source no longer held when the execution started and that
``spec.expiredOffsets: Earliest`` let it go on without (Kafka's retention deleted them unread):
each source checked gets a series at 0, so a nonzero value stands out for the execution that
skipped.

Records behind is each source's lag: what its upstream holds past the position the job has
read to, found when an epoch is planned
(:meth:`~spark_runtime.sources.base.Source.records_behind`). Kafka answers from the latest
offsets its plan lists anyway (:mod:`spark_runtime.sources.kafka_lag`); a source that would
have to ask its upstream again reports no series. It grows while a job falls behind its
input, before any snapshot or restart says so.

The last snapshot's time survives restarts: a restore sets it to the restored snapshot's
time from the execution record (:func:`restore_point_time`), so a job that keeps restarting
without snapshotting shows its restore point ageing instead of a new one each execution.

Each :class:`DriverMetrics` has its own registry rather than prometheus_client's global one,
so that tests can build many drivers in one process. A driver built without one keeps an
unserved instance, which spares the driver a check at every observation.
"""

from __future__ import annotations

import enum
import logging
import threading
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

from snapshot_protocol import CoordinatorState, SnapshotCoordinator, SnapshotOutcome
from snapshotjob_contract.observability import (
    DRIVER_EPOCH_DURATION,
    DRIVER_LAST_SNAPSHOT_TIME,
    DRIVER_RECORDS_SKIPPED,
    DRIVER_RESTORE_DURATION,
    DRIVER_ROWS_IN,
    DRIVER_ROWS_OUT,
    DRIVER_SNAPSHOT_CHUNKS,
    DRIVER_SNAPSHOT_DURATION,
    DRIVER_SNAPSHOT_FAILURES,
    DRIVER_SNAPSHOT_INTERVAL,
    DRIVER_SNAPSHOT_SIZE,
    DRIVER_SNAPSHOTS,
    DRIVER_SOURCE_RECORDS_BEHIND,
    METRICS_PATH,
    Metric,
    MetricType,
)
from snapshotjob_contract.record import NO_SNAPSHOT, ExecutionRecord, SnapshotStats

_log = logging.getLogger(__name__)

SNAPSHOT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""A small job's snapshot takes a fraction of a second; a large state minutes."""
EPOCH_BUCKETS = (0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0)
"""An epoch is at least one Spark job, so rarely under 100 ms."""


class SnapshotFailure(enum.StrEnum):
    """Why an automatic snapshot failed: the ``reason`` label, a fixed set of words.

    Named after the step of the taking procedure that failed (``docs/concepts/protocol.md``, "Taking
    a snapshot"), never after the error's text, so the label's cardinality stays bounded.
    """

    START_FAILED = "StartFailed"
    """Steps 2-3: the new snapshot id could not be written safely, or the map not cleared."""
    PHASE_ONE_FAILED = "PhaseOneFailed"
    """Step 4: a source, state operator or sink could not save or prepare its part."""
    VALIDATION_RECORD_FAILED = "ValidationRecordFailed"
    """Step 5: the snapshot's validation record could not be written."""
    RECORD_NOT_SAFE = "RecordNotSafe"
    """Step 7a: the data is complete, but the record naming it could not be written safely;
    the execution restarts, and the restore decides whether the snapshot counts."""
    UNKNOWN = "Unknown"
    """A failure whose text names none of the steps above."""


# The coordinator reports a failed snapshot as a sentence for people; these are the words it
# starts them with in snapshot_protocol.coordinator (a unit test keeps them in step).
_FAILURE_PREFIXES = (
    ("failed to start", SnapshotFailure.START_FAILED),
    ("1st phase failed", SnapshotFailure.PHASE_ONE_FAILED),
    ("writing the validation record failed", SnapshotFailure.VALIDATION_RECORD_FAILED),
)


def taken_snapshot(
    outcome: SnapshotOutcome, coordinator: SnapshotCoordinator
) -> SnapshotStats | SnapshotFailure:
    """What an automatic snapshot came to, read right after taking steps 1-8.

    Args:
        outcome: What :meth:`~snapshot_protocol.SnapshotCoordinator.take_snapshot` returned.
        coordinator: The coordinator, before its 2nd phase runs.

    Returns:
        The snapshot's figures from the record if it became the restore point (its record is
        safe; a 2nd phase that fails later does not change that), else why it failed.
    """
    record = coordinator.record
    stats = record.snapshot_stats if record is not None else None
    if outcome.successful:
        if coordinator.state is not CoordinatorState.PHASE_2_PENDING:
            return SnapshotFailure.RECORD_NOT_SAFE
        assert stats is not None and stats.snapshot_id == outcome.snapshot_id, "taking step 6"
        return stats
    failure = outcome.failure or ""
    for prefix, reason in _FAILURE_PREFIXES:
        if failure.startswith(prefix):
            return reason
    return SnapshotFailure.UNKNOWN


def restore_point_time(record: ExecutionRecord | None, restored_at_unix_s: float) -> float:
    """The Unix time of the snapshot a restore left the execution at, for the age gauge.

    The execution record's figures are the last snapshot attempt's. When that attempt is the
    restore point, its start is the point of the stream the restored state describes (as for
    a snapshot taken, :meth:`DriverMetrics.snapshot_taken`). When a later attempt failed, the
    restore point is older than that attempt's start, which is then used: the age shown is
    at least that old, never younger than the truth. A job restored from an export
    (``initialSnapshotName``), with no snapshot of its own, starts its history at the restore.

    Args:
        record: The execution record after the restore; None if there was none.
        restored_at_unix_s: When the restore ended.
    """
    if record is None or record.snapshot_id == NO_SNAPSHOT:
        return restored_at_unix_s
    stats = record.snapshot_stats
    if stats is None or stats.snapshot_id < record.snapshot_id:
        return restored_at_unix_s
    return min(stats.start_time / 1000, restored_at_unix_s)


class DriverMetrics:
    """The driver's collectors on a registry of their own, and the endpoint serving them.

    The methods are named after what happened in the driver; each one moves the metrics it
    concerns (``docs/reference/metrics.md`` lists them).
    """

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        registry = self.registry
        self._snapshot_seconds = _histogram(DRIVER_SNAPSHOT_DURATION, registry, SNAPSHOT_BUCKETS)
        self._snapshots = _counter(DRIVER_SNAPSHOTS, registry)
        self._snapshot_bytes = _gauge(DRIVER_SNAPSHOT_SIZE, registry)
        self._snapshot_chunks = _gauge(DRIVER_SNAPSHOT_CHUNKS, registry)
        self._last_snapshot_time = _gauge(DRIVER_LAST_SNAPSHOT_TIME, registry)
        self._snapshot_interval = _gauge(DRIVER_SNAPSHOT_INTERVAL, registry)
        self._snapshot_failures = _counter(DRIVER_SNAPSHOT_FAILURES, registry)
        self._restore_seconds = _gauge(DRIVER_RESTORE_DURATION, registry)
        self._epoch_seconds = _histogram(DRIVER_EPOCH_DURATION, registry, EPOCH_BUCKETS)
        self._rows_in = _counter(DRIVER_ROWS_IN, registry)
        self._rows_out = _counter(DRIVER_ROWS_OUT, registry)
        self._records_skipped = _counter(DRIVER_RECORDS_SKIPPED, registry)
        self._records_behind = _gauge(DRIVER_SOURCE_RECORDS_BEHIND, registry)
        # Every reason from the start: `increase()` over a series that appears with its first
        # failure misses that failure.
        for reason in SnapshotFailure:
            self._snapshot_failures.labels(reason.value)
        self._server: WSGIServer | None = None
        self._thread: threading.Thread | None = None

    def configured(self, snapshot_interval_s: float) -> None:
        """Records the job's snapshot interval, once per execution."""
        self._snapshot_interval.set(snapshot_interval_s)

    def restored(self, seconds: float, at_unix_s: float | None) -> None:
        """Records a restore that left the execution running.

        Args:
            seconds: How long the restore took.
            at_unix_s: The time of the snapshot restored (:func:`restore_point_time`): the
                state is that snapshot's, and a failure right away would go back to it, so its
                age goes on from where the last execution left it instead of restarting at
                0 with every execution. None if there was no snapshot to restore.
        """
        self._restore_seconds.set(seconds)
        if at_unix_s is not None:
            self._last_snapshot_time.set(at_unix_s)

    def snapshot_taken(
        self, seconds: float, size_bytes: int, chunks: int, at_unix_s: float
    ) -> None:
        """Records a successful automatic snapshot.

        Args:
            seconds: How long it took, both phases.
            size_bytes: Bytes of its chunks.
            chunks: Its chunks.
            at_unix_s: When it started: the point of the stream its state describes.
        """
        self._snapshot_seconds.observe(seconds)
        self._snapshots.inc()
        self._snapshot_bytes.set(size_bytes)
        self._snapshot_chunks.set(chunks)
        self._last_snapshot_time.set(at_unix_s)

    def snapshot_failed(self, seconds: float, reason: SnapshotFailure) -> None:
        """Records a failed automatic snapshot; the last successful one's figures stay."""
        self._snapshot_seconds.observe(seconds)
        self._snapshot_failures.labels(reason.value).inc()

    def snapshot_attempted(self, seconds: float, taken: SnapshotStats | SnapshotFailure) -> None:
        """Records an automatic snapshot as :func:`taken_snapshot` found it.

        Args:
            seconds: How long it took, both phases.
            taken: Its figures, or why it failed.
        """
        if isinstance(taken, SnapshotFailure):
            self.snapshot_failed(seconds, taken)
        else:
            self.snapshot_taken(seconds, taken.num_bytes, taken.num_chunks, taken.start_time / 1000)

    def epoch_done(self, seconds: float) -> None:
        """Records an epoch that ran through the whole pipeline."""
        self._epoch_seconds.observe(seconds)

    def rows_in(self, source: str, rows: int) -> None:
        """Records rows an epoch read from a source (its operator name)."""
        self._rows_in.labels(source).inc(rows)

    def rows_out(self, sink: str, rows: int) -> None:
        """Records rows a sink (its operator name) published."""
        self._rows_out.labels(sink).inc(rows)

    def records_behind(self, source: str, records: int) -> None:
        """Records how many records a source (its operator name) holds past the job's
        position, as the last epoch plan found it."""
        self._records_behind.labels(source).set(records)

    def records_skipped(self, source: str, records: int) -> None:
        """Records what a source (its operator name) skipped when the execution started; 0
        for a source that lost nothing, which still gives it its series."""
        self._records_skipped.labels(source).inc(records)

    def serve(self, port: int, address: str = "0.0.0.0") -> int:
        """Serves the metrics on ``http://address:port/metrics`` in a daemon thread.

        Args:
            port: The TCP port; 0 picks a free one.
            address: The address to listen on.

        Returns:
            The port listened on.

        Raises:
            OSError: If the port cannot be bound.
        """
        self._server, self._thread = start_http_server(port, addr=address, registry=self.registry)
        bound = int(self._server.server_port)
        _log.info("Serving metrics address=%s port=%d path=%s", address, bound, METRICS_PATH)
        return bound

    def close(self) -> None:
        """Stops the endpoint, if it was started."""
        server, thread = self._server, self._thread
        self._server = self._thread = None
        if server is None:
            return
        server.shutdown()
        server.server_close()
        if thread is not None:
            thread.join(timeout=5)


def _check(metric: Metric, kind: MetricType) -> None:
    if metric.type is not kind:
        raise ValueError(f"{metric.name} is a {metric.type.value}, not a {kind.value}")


def _counter(metric: Metric, registry: CollectorRegistry) -> Counter:
    _check(metric, MetricType.COUNTER)
    # prometheus_client adds the _total suffix to a counter's samples itself.
    name = metric.name.removesuffix("_total")
    return Counter(name, metric.help, metric.labels, registry=registry)


def _gauge(metric: Metric, registry: CollectorRegistry) -> Gauge:
    _check(metric, MetricType.GAUGE)
    return Gauge(metric.name, metric.help, metric.labels, registry=registry)


def _histogram(
    metric: Metric, registry: CollectorRegistry, buckets: tuple[float, ...]
) -> Histogram:
    _check(metric, MetricType.HISTOGRAM)
    return Histogram(metric.name, metric.help, metric.labels, registry=registry, buckets=buckets)
