"""The driver's epoch loop: Jet's job coordinator around a PySpark pipeline.

The loop owns the order of things the protocol's correctness depends on
(``docs/concepts/protocol.md``): restore before the first epoch; snapshots only at epoch boundaries
(a barrier, in Jet's terms), so state, source offsets and buffered sink output in a snapshot all
describe the same point of the stream; the 2nd phase of a snapshot before the next epoch (so the
next snapshot can only start after it, mechanism M3); and termination and export requests served
only at boundaries. Everything the protocol decides is decided by
:class:`~snapshot_protocol.SnapshotCoordinator`; the loop maps its final state to an exit
code.

Once the pipeline runs (restored, and a first Spark job done on the executors: an epoch, or a
one-task probe while there is no data yet) the driver reports it, if its record store can
(:class:`PipelineStartReporter`, the Kubernetes mode's store): the operator shows the job
RUNNING only from then on, since a running driver Pod says nothing about executors that may
never be scheduled.

Exports are reported through a callback (:data:`PublishExport`) rather than the record store
port: the protocol core only knows export maps, while listing them in
``status.exportedSnapshots`` is the Kubernetes mode's business (the operator clears its
``exportRequest`` once the name appears there).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

from pyspark.errors import AnalysisException
from pyspark.sql import SparkSession

from snapshot_protocol import (
    NO_SNAPSHOT,
    CoordinatorConfig,
    CoordinatorState,
    Failpoints,
    RecordStore,
    RecordStoreError,
    RestoreNeedsConsent,
    SnapshotCoordinator,
    SnapshotCorrupted,
    SnapshotIncompatible,
    SnapshotNotFound,
    SnapshotStore,
    SnapshotUnusable,
    StoreMembership,
    TerminationMode,
    TerminationRequest,
    ZombieExecution,
)
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import durable_copy_map_name
from snapshotjob_contract.spec import ProcessingGuarantee
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.driver_settings import (
    DriverSettings,
    ExportPoll,
    ExportRequest,
    PipelineStartReporter,
    PublishExport,
    StopSignals,
    TerminationPoll,
)
from spark_runtime.durable import DurableCopies
from spark_runtime.kafka_security import KafkaConnectionRefused
from spark_runtime.metrics import DriverMetrics, restore_point_time, taken_snapshot
from spark_runtime.pipeline import DefinePipeline, Pipeline
from spark_runtime.sinks.base import Sink
from spark_runtime.sinks.participant import EpochOutput
from spark_runtime.sources.base import OffsetsExpired, Source
from spark_runtime.state import StateContext
from spark_runtime.watchdog import StepWatchdog, WatchedSink

__all__ = [
    "Driver",
    "DriverSettings",
    "ExportPoll",
    "ExportRequest",
    "PipelineStartReporter",
    "PublishExport",
    "StopSignals",
    "TerminationPoll",
]

_log = logging.getLogger(__name__)

_FINAL_SNAPSHOT_ATTEMPTS = 10


_UNUSABLE_EXITS: dict[type[SnapshotUnusable], DriverExit] = {
    SnapshotCorrupted: DriverExit.SNAPSHOT_CORRUPTED,
    SnapshotIncompatible: DriverExit.SNAPSHOT_INCOMPATIBLE,
    SnapshotNotFound: DriverExit.SNAPSHOT_NOT_FOUND,
    RestoreNeedsConsent: DriverExit.RESTORE_NEEDS_CONSENT,
}


class Driver:
    """Runs one execution of a pipeline.

    Args:
        spark: The session.
        define: The pipeline module's ``define_pipeline``.
        args: The pipeline's arguments.
        settings: How the job runs.
        records: The execution record store of this execution.
        snapshots: The snapshot store (driver side).
        failpoints: Failpoints armed for this process.
        poll_termination: Returns a termination request once the operator made one.
        poll_export: Returns an export request once the operator made one.
        publish_export: Reports each successful export (none in local mode).
        signals: Stop signals to honour.
        membership: The store members the driver reaches, checked at every epoch boundary
            and before every snapshot (split-brain protection, a lost store); none checked if
            omitted.
        durable: The durable storage of ``settings.durable_storage``, connected.
        metrics: Where the execution's snapshots, restore, epochs and rows are observed
            (:mod:`spark_runtime.metrics`); observed but not served if omitted.
        clock: Current time in epoch milliseconds.
        substitutes: For tests: sources and sinks to use in place of the definition's, by
            operator name (:class:`~spark_runtime.pipeline.Pipeline`).
        watchdog: Watches epochs and sink calls against the settings' timeouts and ends the
            execution when one outlives its own (:mod:`spark_runtime.watchdog`); nothing is
            watched if omitted.
    """

    def __init__(
        self,
        spark: SparkSession,
        define: DefinePipeline,
        args: Mapping[str, Any],
        settings: DriverSettings,
        records: RecordStore,
        snapshots: SnapshotStore,
        *,
        failpoints: Failpoints | None = None,
        poll_termination: TerminationPoll | None = None,
        poll_export: ExportPoll | None = None,
        publish_export: PublishExport | None = None,
        signals: StopSignals | None = None,
        membership: StoreMembership | None = None,
        durable: DurableCopies | None = None,
        metrics: DriverMetrics | None = None,
        clock: Callable[[], int] = lambda: int(time.time() * 1000),
        substitutes: Mapping[str, Source | Sink] | None = None,
        watchdog: StepWatchdog | None = None,
    ) -> None:
        self._spark = spark
        self._define = define
        self._settings = settings
        self._records = records
        self._snapshots = snapshots
        self._failpoints = failpoints
        self._poll = poll_termination or (lambda: None)
        self._poll_export = poll_export or (lambda: None)
        self._publish_export = publish_export
        self._signals = signals or StopSignals()
        self._membership = membership
        self._durable = durable
        self._clock = clock
        self._watchdog = watchdog or StepWatchdog(None)
        self.metrics = metrics if metrics is not None else DriverMetrics()
        self.metrics.configured(settings.snapshot_interval_ms / 1000)
        self.pipeline = Pipeline(
            spark,
            StateContext(
                spark,
                settings.state_partitions,
                settings.store,
                settings.job.incremental,
                settings.chain_policy,
            ),
            settings.guarantee,
            settings.job.uid,
            args,
            rows=self.metrics,
            substitutes=substitutes,
            expired_offsets=settings.expired_offsets,
        )
        self.epochs = 0
        self.snapshots_taken = 0
        self.exports: list[ExportedSnapshot] = []
        self.coordinator: SnapshotCoordinator | None = None
        self.exit_message: str | None = None
        """Why the execution ended, for the operator, when it did not end as asked."""
        self._source_failing_since: float | None = None
        self._reachable: int | None = None
        """Store members reached at the last member check; None without one."""
        self._snapshots_postponed = False
        self.pipeline_reported = False
        """Whether the operator has been told that the pipeline runs (or needs not be)."""
        self._requested: TerminationMode | None = None

    def run(self, max_epochs: int | None = None) -> DriverExit:
        """Discovers, restores and runs the pipeline until it completes or is stopped.

        Args:
            max_epochs: Stop (as if interrupted, without snapshot) after this many epochs; for
                tests that need a run to end between two snapshots.

        Returns:
            The exit code (see :mod:`snapshotjob_contract.exits`).
        """
        try:
            self.pipeline.define(self._define)
        except KafkaConnectionRefused as refused:
            # Only a new Pod reads a Secret again: stop now, the restart policy retries.
            self.exit_message = str(refused)
            _log.error("Kafka refused the connection error=%s", refused)
            return DriverExit.TRANSIENT_FAILURE
        except (ValueError, AnalysisException, AttributeError, TypeError) as error:
            # The pipeline's definition (a column, a construct, a method streams do not have)
            # or a sink's setup is wrong: no restart would help. A connection error opening a
            # sink is none of these, and the execution is retried.
            self.exit_message = f"The pipeline cannot be defined: {type(error).__name__}: {error}"
            _log.error("Pipeline cannot run error=%s", error)
            return DriverExit.BAD_INPUT
        coordinator = SnapshotCoordinator(
            CoordinatorConfig(
                self._settings.job,
                self._settings.snapshot_interval_ms,
                self._settings.suspend_on_failure,
                self._settings.initial_snapshot_name,
                self.pipeline.shape(self._settings.state_partitions),
                self._settings.split_brain_protection,
                int(self._settings.store_lost_s * 1000),
                self._settings.durable_restore,
                self._settings.initial_snapshot_identity,
                self._settings.snapshot_keys,
            ),
            self._records,
            self._snapshots,
            [
                WatchedSink(participant, self._watchdog, self._settings.sink_timeout_s)
                if isinstance(participant, EpochOutput)
                else participant
                for participant in self.pipeline.participants
            ],
            self._clock,
            self._failpoints,
            durable=durable.store if (durable := self._durable) is not None else None,
        )
        self.coordinator = coordinator
        started = time.monotonic()
        try:
            coordinator.restore()
        except SnapshotUnusable as unusable:
            self.exit_message = str(unusable)
            return _UNUSABLE_EXITS[type(unusable)]
        except ZombieExecution as zombie:
            _log.error("Fenced during restore error=%s", zombie)
            return DriverExit.FENCED
        if coordinator.state is not CoordinatorState.RUNNING:
            return self._exit_code()
        record = coordinator.record
        from_snapshot = self._settings.initial_snapshot_name is not None or (
            record is not None and record.snapshot_id != NO_SNAPSHOT
        )
        self.metrics.restored(
            time.monotonic() - started,
            restore_point_time(record, self._clock() / 1000) if from_snapshot else None,
        )
        try:
            return self._loop(coordinator, max_epochs)
        except ZombieExecution as zombie:
            _log.error("Fenced: a newer execution owns the job error=%s", zombie)
            return DriverExit.FENCED

    def _loop(self, coordinator: SnapshotCoordinator, max_epochs: int | None) -> DriverExit:
        snapshots_on = self._settings.guarantee is not ProcessingGuarantee.NONE
        final_attempts = 0
        while True:
            if self._signals.received or (max_epochs is not None and self.epochs >= max_epochs):
                _log.warning("Stopping without snapshot epochs=%d", self.epochs)
                return DriverExit.INTERRUPTED
            if not self._members_suffice(coordinator):
                return self._exit_code()
            request = self._poll()
            if request is not None:
                return self._terminate(coordinator, request)
            export = self._poll_export()
            if export is not None:
                self._export(coordinator, export)
                if coordinator.state is not CoordinatorState.RUNNING:
                    return self._exit_code()
            try:
                self.pipeline.check_offsets()
                plan = self.pipeline.plan_epoch()
            except KafkaConnectionRefused as refused:
                self.exit_message = str(refused)
                _log.error("Kafka refused the connection error=%s", refused)
                return DriverExit.TRANSIENT_FAILURE
            except OffsetsExpired as expired:
                # No restart brings the records back: the operator waits for the spec.
                self.exit_message = str(expired)
                _log.error("Source data lost error=%s", expired)
                return DriverExit.SOURCE_DATA_LOST
            except Exception as error:
                if not self._source_retry(error):
                    return DriverExit.TRANSIENT_FAILURE
                continue
            self._source_failing_since = None
            if plan is None:
                self._report_running(ran_epoch=False)
                if self.pipeline.exhausted():
                    if not snapshots_on:
                        return DriverExit.COMPLETED
                    # The last output is published by a last snapshot's 2nd phase.
                    if not self._members_suffice(coordinator):
                        return self._exit_code()
                    if self._store_unreachable():
                        time.sleep(self._settings.idle_sleep_s)
                        continue
                    if self._snapshot(coordinator):
                        _log.info(
                            "Completed epochs=%d snapshots=%d", self.epochs, self.snapshots_taken
                        )
                        return DriverExit.COMPLETED
                    if coordinator.state is not CoordinatorState.RUNNING:
                        return self._exit_code()
                    final_attempts += 1
                    if final_attempts >= _FINAL_SNAPSHOT_ATTEMPTS:
                        _log.error("Final snapshot failed attempts=%d", final_attempts)
                        record = coordinator.record
                        last = record.last_snapshot_failure if record is not None else None
                        self.exit_message = (
                            f"The final snapshot failed {final_attempts} times, last: {last}"
                        )
                        return DriverExit.TRANSIENT_FAILURE
                    time.sleep(self._settings.idle_sleep_s)
                    continue
                time.sleep(self._settings.idle_sleep_s)
            else:
                started = time.monotonic()
                try:
                    with self._watchdog.step(
                        f"Epoch {self.epochs}", self._settings.epoch_timeout_s
                    ):
                        self.pipeline.run_epoch(self.epochs, plan)
                except Exception as error:
                    _log.exception("Epoch failed epoch=%d", self.epochs)
                    coordinator.fail(f"epoch {self.epochs} failed: {error}")
                    self.exit_message = f"Epoch {self.epochs} failed: {error}"
                    return DriverExit.FAILED
                seconds = time.monotonic() - started
                _log.info("Epoch done epoch=%d seconds=%.2f", self.epochs, seconds)
                self.metrics.epoch_done(seconds)
                self.epochs += 1
                self._report_running(ran_epoch=True)
            if snapshots_on and coordinator.is_snapshot_due():
                # The epoch may have taken long enough for a partition to set in.
                if not self._members_suffice(coordinator):
                    return self._exit_code()
                if self._store_unreachable():
                    continue
                self._snapshot(coordinator)
                if coordinator.state is not CoordinatorState.RUNNING:
                    return self._exit_code()

    def _source_retry(self, error: Exception) -> bool:
        """Whether to try planning the epoch again after ``error``; False once it has failed
        for ``source_lost_s`` (the exit message then names the error)."""
        now = time.monotonic()
        if self._source_failing_since is None:
            self._source_failing_since = now
        failing_s = now - self._source_failing_since
        if failing_s >= self._settings.source_lost_s:
            _log.error("Source unavailable seconds=%.0f error=%s", failing_s, error)
            self.exit_message = (
                f"A source has been unavailable for {failing_s:.0f} s "
                f"(sourceLostSeconds={self._settings.source_lost_s:.0f}): {error}"
            )
            return False
        _log.warning("Source unavailable, retrying seconds=%.0f error=%s", failing_s, error)
        time.sleep(min(5.0, max(self._settings.idle_sleep_s, 1.0)))
        return True

    def _members_suffice(self, coordinator: SnapshotCoordinator) -> bool:
        """Whether the store members the driver reaches let the execution go on (M9)."""
        if self._membership is None:
            return True
        self._reachable = self._membership.reachable_members()
        return coordinator.observe_members(self._reachable)

    def _store_unreachable(self) -> bool:
        """Whether the last member check found no member: a snapshot is then not started.

        Its first store operation could only wait for the client's invocation timeout, and
        meanwhile the driver would not see ``--store-lost-seconds`` pass. Skipped snapshots
        leave the job's last snapshot as it is; the store-lost timer (or, with split-brain
        protection, the quorum check) decides when the execution stops.
        """
        if self._reachable != 0:
            if self._snapshots_postponed:
                _log.info("Store reachable again reachableMembers=%d", self._reachable)
                self._snapshots_postponed = False
            return False
        if not self._snapshots_postponed:
            _log.warning("Snapshots postponed, no store member reachable epochs=%d", self.epochs)
            self._snapshots_postponed = True
        return True

    def _report_running(self, *, ran_epoch: bool) -> None:
        """Tells the operator, once, that the pipeline runs: restored, and Spark jobs run.

        Args:
            ran_epoch: An epoch just ran (a Spark job on the executors); if not, a one-task
                probe job shows that the executors run before the report is made.

        Raises:
            ZombieExecution: If a newer execution owns the job.
        """
        if self.pipeline_reported:
            return
        if not isinstance(self._records, PipelineStartReporter):
            self.pipeline_reported = True
            return
        if not ran_epoch:
            # No data yet: a job of one task shows that executors were scheduled and run.
            self._spark.sparkContext.parallelize([0], 1).count()
        try:
            self._records.report_pipeline_started()
        except RecordStoreError as error:
            # Tried again after the next epoch; the operator's start timeout bounds the wait.
            _log.warning("Could not report the running pipeline error=%s", error)
            return
        self.pipeline_reported = True
        _log.info("Reported the running pipeline epochs=%d", self.epochs)

    def _snapshot(self, coordinator: SnapshotCoordinator) -> bool:
        """Takes an automatic snapshot with both phases; returns whether it was successful."""
        started = time.monotonic()
        outcome = coordinator.take_snapshot()
        taken = taken_snapshot(outcome, coordinator)
        if coordinator.state is CoordinatorState.PHASE_2_PENDING:
            coordinator.finish_snapshot()
        self.metrics.snapshot_attempted(time.monotonic() - started, taken)
        if outcome.successful:
            self.snapshots_taken += 1
            _log.info(
                "Snapshot done snapshotId=%d map=%s seconds=%.2f",
                outcome.snapshot_id,
                outcome.map_name,
                time.monotonic() - started,
            )
            if self._durable is not None and coordinator.state is CoordinatorState.RUNNING:
                self._durable.copy_snapshot_if_due(
                    self._snapshots,
                    outcome.map_name,
                    outcome.snapshot_id,
                    durable_copy_map_name(self._settings.job.uid),
                )
        else:
            _log.warning(
                "Snapshot failed snapshotId=%d failure=%s", outcome.snapshot_id, outcome.failure
            )
        return outcome.successful and coordinator.state is CoordinatorState.RUNNING

    def _export(self, coordinator: SnapshotCoordinator, request: ExportRequest) -> None:
        """Takes an export-only snapshot; a failed one is logged, the operator asks again."""
        started = time.monotonic()
        try:
            outcome = coordinator.take_snapshot(export_name=request.name)
        except ValueError as error:
            _log.error(
                "Export refused name=%s requestId=%s error=%s",
                request.name,
                request.request_id,
                error,
            )
            return
        if coordinator.state is CoordinatorState.PHASE_2_PENDING:
            coordinator.finish_snapshot()
        if not outcome.successful:
            _log.error(
                "Export failed name=%s requestId=%s snapshotId=%d failure=%s",
                request.name,
                request.request_id,
                outcome.snapshot_id,
                outcome.failure,
            )
            return
        _log.info(
            "Export done name=%s snapshotId=%d map=%s numBytes=%d seconds=%.2f",
            request.name,
            outcome.snapshot_id,
            outcome.map_name,
            outcome.num_bytes,
            time.monotonic() - started,
        )
        self._publish(
            ExportedSnapshot(
                name=request.name,
                snapshot_id=outcome.snapshot_id,
                num_bytes=outcome.num_bytes,
                created_at=_utc(self._clock()),
                terminal=False,
                durable_location=self._copy_durably(
                    request.name, outcome.map_name, outcome.snapshot_id
                ),
            )
        )

    def _copy_durably(self, name: str, map_name: str, snapshot_id: int) -> str | None:
        """Copies a validated export to durable storage; its location, or None without one."""
        if self._durable is None:
            return None
        return self._durable.copy_export(self._snapshots, name, map_name, snapshot_id)

    def _publish(self, export: ExportedSnapshot) -> None:
        """Reports an export; only fencing is fatal, since the export map itself is complete."""
        self.exports.append(export)
        if self._publish_export is None:
            return
        try:
            self._publish_export(export)
        except ZombieExecution:
            raise
        except Exception as error:
            _log.error("Could not report export name=%s error=%s", export.name, error)

    def _terminate(
        self, coordinator: SnapshotCoordinator, request: TerminationRequest
    ) -> DriverExit:
        mode, export_name = request.mode, request.export_name
        if self._settings.guarantee is ProcessingGuarantee.NONE and mode.terminal_snapshot:
            # Without snapshots there is no terminal snapshot to take (Jet does the same).
            mode, export_name = mode.without_terminal_snapshot(), None
        _log.info("Serving termination mode=%s exportName=%s", mode.name, export_name)
        self._requested = mode
        coordinator.request_termination(mode, export_name)
        outcome = coordinator.last_outcome
        if (
            self._durable is not None
            and export_name is None
            and outcome is not None
            and outcome.kind.is_terminal
            and outcome.successful
        ):
            self._durable.copy_snapshot(
                self._snapshots,
                outcome.map_name,
                outcome.snapshot_id,
                durable_copy_map_name(self._settings.job.uid),
            )
        if (
            export_name is not None
            and outcome is not None
            and outcome.export_name == export_name
            and outcome.kind.is_terminal
            and outcome.successful
            and coordinator.execution_end is not None
            and coordinator.execution_end.mode is mode
        ):
            self._publish(
                ExportedSnapshot(
                    name=export_name,
                    snapshot_id=outcome.snapshot_id,
                    num_bytes=outcome.num_bytes,
                    created_at=_utc(self._clock()),
                    terminal=True,
                    durable_location=self._copy_durably(
                        export_name, outcome.map_name, outcome.snapshot_id
                    ),
                )
            )
        return self._exit_code()

    def _exit_code(self) -> DriverExit:
        coordinator = self.coordinator
        assert coordinator is not None
        state = coordinator.state
        termination = coordinator.execution_end
        reason = termination.reason if termination is not None else ""
        _log.info("Execution stopped state=%s reason=%s", state.value, reason)
        if state is CoordinatorState.FENCED:
            return DriverExit.FENCED
        if state is CoordinatorState.FAILED:
            return DriverExit.FAILED
        if termination is not None and termination.mode is not None:
            if self._requested is not None and termination.mode is self._requested:
                return DriverExit.TERMINATED
            if termination.mode is TerminationMode.RESTART_FORCEFUL:
                self.exit_message = termination.reason
                if termination.quorum_lost:
                    return DriverExit.QUORUM_LOST
                if termination.transient:
                    return DriverExit.TRANSIENT_FAILURE
                return DriverExit.RESTART_FORCEFUL
        return DriverExit.FAILED


def _utc(epoch_ms: int) -> datetime:
    """The protocol clock's epoch milliseconds as the aware time the status lists exports at."""
    return datetime.fromtimestamp(epoch_ms / 1000, UTC)
