"""``SnapshotJob.status``: what the operator and the driver report (docs/reference/api.md).

Two writers share the status. The driver owns ``executionRecord`` (Jet's JobExecutionRecord) and
writes it with an optimistic lock, fenced by ``execution.id``; it also appends the exports it
takes to ``exportedSnapshots``. The operator writes the record only between executions, when it
starts a new one (``docs/concepts/protocol.md``, "Other writers of the record"). Everything else is
the operator's. Status models ignore unknown fields, so an older operator can still read a status
written by a newer driver.

Fields for the operator's own bookkeeping, outside the protocol of ``docs/concepts/protocol.md``:
``execution.specHash`` (which spec the current or last execution runs, so a spec change can be
told from a request the operator serves without a restart), ``exportRequest`` (an export-only
snapshot asked of the running driver; ``termination`` is only for requests that stop the
execution), ``lastSnapshotTime`` (for the printer column and the SnapshotHealthy condition,
which need a date rather than the record's epoch milliseconds), and the counts that make
failures end: ``startFailure`` (a starting execution's objects the API server refused, so the
same execution is created again instead of a new one per reconcile) and ``forcedRestarts``
(restarts at once in a row, so a driver that keeps ending that way is bounded too).
"""

from __future__ import annotations

from typing import ClassVar

from pydantic import AwareDatetime, ConfigDict, Field

from snapshotjob_contract.base import ApiModel, CrossFieldRule
from snapshotjob_contract.conditions import (
    CONDITION_DESCRIPTIONS,
    PHASE_DESCRIPTIONS,
    ConditionStatus,
    ConditionType,
    Phase,
    described,
)
from snapshotjob_contract.modes import TerminationMode
from snapshotjob_contract.record import MAX_BACKUP_COUNT, ExecutionRecord
from snapshotjob_contract.spark_ui import SparkUiStatus


class StatusModel(ApiModel):
    """A part of the status; unknown fields are ignored so newer writers do not break readers."""

    model_config = ConfigDict(extra="ignore")


class Condition(StatusModel):
    """One standard Kubernetes condition."""

    type: ConditionType = Field(
        description="Condition type; True means: " + described(CONDITION_DESCRIPTIONS)
    )
    status: ConditionStatus
    """True, False or Unknown."""
    reason: str = Field(max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    """Why the condition has this status, in CamelCase."""
    message: str = Field(default="", max_length=32768)
    """Details for humans, with key=value context."""
    last_transition_time: AwareDatetime
    """When the status last changed."""
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation the condition was computed for."""


class SnapshotStatsStatus(StatusModel):
    """Figures about the last snapshot attempt (times in epoch milliseconds)."""

    snapshot_id: int
    """Id of the snapshot."""
    start_time: int
    """When it started."""
    end_time: int
    """When it ended."""
    num_bytes: int
    """Bytes written."""
    num_keys: int
    """State entries written."""
    num_chunks: int
    """Chunks written."""


class ExecutionRecordStatus(StatusModel):
    """Jet's JobExecutionRecord, written by the driver with an optimistic lock."""

    snapshot_id: int = Field(default=-1, ge=-1)
    """The last successful non-export-only snapshot: the restore point; -1 for none."""
    data_map_index: int = Field(default=-1, ge=-1, le=2)
    """Which automatic snapshot map holds the restore point: 0 or 1 of the alternating pair,
    2 for the chain map of incremental snapshots; -1 before the first."""
    data_map_backup_count: int | None = Field(default=None, ge=1, le=MAX_BACKUP_COUNT)
    """The backup count of that map, which its name carries; absent in records written before
    map names carried it."""
    ongoing_snapshot_id: int = Field(default=-1, ge=-1)
    """The last snapshot id started; never reused."""
    ongoing_snapshot_start_time: int | None = None
    """When that snapshot started, epoch milliseconds."""
    exported_snapshot_name: str | None = None
    """The export holding the restore point if it is a terminal exported snapshot."""
    last_snapshot_failure: str | None = None
    """Why the last snapshot attempt failed; empty if it succeeded."""
    snapshot_stats: SnapshotStatsStatus | None = None
    """Figures about the last snapshot attempt."""
    quorum_size: int = Field(default=0, ge=0)
    """Split-brain protection: the fewest store members an execution may start with."""
    suspended: bool = False
    """Whether the job is suspended."""
    suspension_cause: str | None = None
    """Why it is suspended."""
    timestamp: int = 0
    """When the record was last written, epoch milliseconds."""

    def to_record(self) -> ExecutionRecord:
        """Returns the protocol core's record."""
        return ExecutionRecord.from_dict(self.model_dump(mode="json"))

    @classmethod
    def of(cls, record: ExecutionRecord) -> ExecutionRecordStatus:
        """Returns the status form of the protocol core's record."""
        return cls.model_validate(record.to_dict())


class ExecutionStatus(StatusModel):
    """The current execution, or the last one while none runs."""

    id: str = Field(min_length=1)
    """Fencing token: the driver writes the record only while this is its id."""
    driver_pod: str = Field(min_length=1)
    """Name of the driver Pod."""
    started_at: AwareDatetime
    """When the operator started the execution."""
    attempt: int = Field(ge=1)
    """Sequence number of the execution within the job."""
    spec_hash: str = Field(min_length=1)
    """Fingerprint of the spec fields the execution runs with."""
    state_partitions: int | None = Field(default=None, ge=1)
    """``spec.statePartitions`` the execution runs with, so its snapshots' partitioning; absent
    for executions started before the field existed."""


class TerminationStatus(StatusModel):
    """The termination in effect: a request to the driver, or what a forceful stop still holds.

    A graceful mode is a request the driver serves with a terminal snapshot; it is cleared when
    the execution has stopped. A forceful mode stays only as a marker: RESTART_FORCEFUL while
    the restore that must follow an indeterminate record write waits for the store, and
    SUSPEND_FORCEFUL while suspendOnFailure holds the job until its spec changes.
    """

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="!has(self.exportName) || "
            "self.mode in ['RESTART_GRACEFUL', 'SUSPEND_GRACEFUL', 'CANCEL_GRACEFUL']",
            message="termination.exportName needs a graceful mode: only they take a snapshot",
            holds=lambda termination: (
                termination.export_name is None or termination.mode.terminal_snapshot
            ),
        ),
    )

    mode: TerminationMode
    """Graceful modes take a terminal snapshot first; the prefix says what happens after."""
    request_id: str = Field(min_length=1)
    """Unique id of this request."""
    requested_at: AwareDatetime
    """When the operator made the request; a graceful one is made forceful after a deadline."""
    export_name: str | None = None
    """Export the terminal snapshot under this name (cancel with export)."""
    reason: str
    """Why the operator asked, e.g. SuspendRequested or SpecChanged."""


class ExportRequestStatus(StatusModel):
    """The operator's request for an export-only snapshot of the running execution."""

    name: str = Field(min_length=1)
    """Export name."""
    request_id: str = Field(min_length=1)
    """Unique id of this request."""
    requested_at: AwareDatetime
    """When the operator made the request."""


class ExportedSnapshot(StatusModel):
    """A snapshot exported under a name, kept after the job is deleted."""

    name: str
    """Export name."""
    snapshot_id: int
    """Id of the snapshot."""
    num_bytes: int = Field(ge=0)
    """Bytes of snapshot data."""
    created_at: AwareDatetime
    """When the export completed."""
    terminal: bool
    """Whether the job stopped after it (a terminal exported snapshot); false for an
    export-only snapshot, which is never restored automatically."""
    durable_location: str | None = None
    """Where its verified copy in object storage is, `s3://<bucket>/<prefix>/<map>/<snapshotId>`;
    absent when the job has no durable storage or the copy failed (the driver's log says why)."""


class FailureStatus(StatusModel):
    """The last failure of an execution."""

    reason: str
    """CamelCase reason, e.g. DriverFailed."""
    message: str
    """Details with key=value context (exit code, execution, attempt)."""
    time: AwareDatetime
    """When the operator saw the failure."""
    driver_pod: str | None = None
    """The most recent failed driver Pod, kept (not deleted when the next execution starts) so
    that ``kubectl logs`` shows its log; deleted when a later execution's driver fails, and
    with the job."""


class DriverExitStatus(StatusModel):
    """The driver's report of how it exits, written right before, fenced by its execution id.

    The driver Pod's exit code is gone with the Pod when the Pod is deleted as soon as its
    containers stop (a drain's eviction, ``kubectl delete pod``): the operator then reads the
    exit from here, so an interrupted driver is not taken for a lost one.
    """

    execution_id: str = Field(min_length=1)
    """The execution whose driver reported."""
    exit_code: int = Field(ge=0, le=255)
    """How the driver ends (see the driver exit codes): the code it is about to exit with; 64
    (TERMINATED) for a driver that ended as asked, whose process exits 0."""
    message: str | None = Field(default=None, max_length=1024)
    """The driver's own words on why it ended, if it has any."""
    time: AwareDatetime
    """When the driver reported."""


class PipelineStartedStatus(StatusModel):
    """The driver's report that its pipeline runs, fenced by its execution id.

    The driver writes it once it has restored and a first Spark job has run on the executors;
    until then the operator keeps the job STARTING. A report of another execution than
    ``execution.id`` is stale and means nothing.
    """

    execution_id: str = Field(min_length=1)
    """The execution whose driver reported."""
    time: AwareDatetime
    """When the driver reported."""


class UpgradeCheckStatus(StatusModel):
    """The check, before a spec change is rolled out, that its pipeline can restore the job's
    restore point: ``snapshot validate --pipeline`` in the new image, in a short-lived Pod.

    The running execution is asked to stop only once the check of that very spec passed; a
    failed check leaves it running and refuses the rollout (Degraded ``UpgradeRefused``)
    until the spec changes again.
    """

    spec_hash: str = Field(min_length=1)
    """The execution fingerprint of the spec checked."""
    pod_name: str = Field(min_length=1)
    """The Pod that runs the check."""
    snapshot_id: int = Field(ge=0)
    """The restore point it checks."""
    started_at: AwareDatetime
    """When the operator created the Pod."""
    passed: bool | None = None
    """True if the new pipeline can restore the snapshot, False if not; unset while it runs."""
    message: str | None = Field(default=None, max_length=1024)
    """What the check said: what differs, or why it could not run."""


class ExportFailureStatus(StatusModel):
    """A validated copy to an export (while suspended) that failed."""

    name: str = Field(min_length=1)
    """Export name."""
    attempts: int = Field(ge=1)
    """Failed copies of this export in a row."""
    message: str
    """The store's error of the last attempt."""
    time: AwareDatetime
    """When the last attempt failed."""


class StartFailureStatus(StatusModel):
    """The starting execution's objects that the API server did not create."""

    execution_id: str = Field(min_length=1)
    """The execution whose driver Pod (or its identity) could not be created; it keeps its id
    while the operator creates it again."""
    object: str = Field(min_length=1)
    """The object refused, as Kind/name."""
    attempts: int = Field(ge=1)
    """Failed creations of this execution in a row."""
    message: str
    """The API server's answer to the last attempt: status code, reason and message."""
    time: AwareDatetime
    """When the last attempt failed."""


class ForcedRestartsStatus(StatusModel):
    """Executions in a row that ended in a forced restart (exit 75 or 143)."""

    count: int = Field(ge=1)
    """How many; restarted at once up to a bound, counted as failures beyond it."""
    snapshot_id: int = Field(ge=-1)
    """The restore point when the last of them ended; a newer one resets the count."""


class SnapshotJobStatus(StatusModel):
    """The observed state of a SnapshotJob."""

    phase: Phase = Field(
        default=Phase.NOT_RUNNING,
        description="Lifecycle phase. " + described(PHASE_DESCRIPTIONS),
    )
    observed_generation: int | None = Field(default=None, ge=0)
    """The metadata.generation this status reflects."""
    conditions: list[Condition] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
    )
    """Ready, Progressing, Degraded, SnapshotHealthy and StoreReady."""
    execution_record: ExecutionRecordStatus | None = None
    """Jet's JobExecutionRecord, owned by the driver."""
    execution: ExecutionStatus | None = None
    """The current execution, or the last one while none runs."""
    termination: TerminationStatus | None = None
    """A pending request to the driver (graceful modes), or a forceful termination whose
    follow-up is still pending (RESTART_FORCEFUL, SUSPEND_FORCEFUL)."""
    export_request: ExportRequestStatus | None = None
    """A pending request for an export-only snapshot."""
    exported_snapshots: list[ExportedSnapshot] = Field(
        default_factory=list,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]},
    )
    """The job's exported snapshots."""
    last_snapshot_time: AwareDatetime | None = None
    """When the restore point was taken."""
    restarts: int = Field(default=0, ge=0)
    """Failed executions restarted in a row."""
    last_failure: FailureStatus | None = None
    """The last failure of an execution."""
    export_failure: ExportFailureStatus | None = None
    """The last failed copy to an export while suspended; retried with backoff a few times,
    then given up until exportSnapshot.name changes."""
    forced_restarts: ForcedRestartsStatus | None = None
    """Executions in a row that ended in a forced restart without a new snapshot in between;
    reset by a new snapshot, a completion, or an execution that ran for maxBackoffSeconds with a
    snapshot of its own."""
    start_failure: StartFailureStatus | None = None
    """The starting execution's objects the API server did not create; created again with the
    restart backoff a few times, then the job is FAILED (reason CreateFailed)."""
    pipeline_started: PipelineStartedStatus | None = None
    """Written by the driver (fenced by its execution id) once its pipeline runs: the job is
    RUNNING only from then on."""
    driver_exit: DriverExitStatus | None = None
    """Written by the driver (fenced by its execution id) right before it exits, so its exit
    is known even when its Pod is deleted as soon as it stops."""
    spark_ui: SparkUiStatus | None = None
    """Where the running driver's Spark UI is (spec.sparkUi); absent while there is none."""
    upgrade_check: UpgradeCheckStatus | None = None
    """The check that a changed spec's pipeline can restore the restore point, run before the
    running execution is asked to stop for it."""

    def reported_exit(self) -> DriverExitStatus | None:
        """The current execution's driver's exit report, if it made one."""
        exit_report = self.driver_exit
        if self.execution is None or exit_report is None:
            return None
        return exit_report if exit_report.execution_id == self.execution.id else None

    def pipeline_runs(self) -> bool:
        """Whether the current execution's pipeline runs: its driver reported so, or it has
        started a snapshot since the execution started.

        The second proof is for drivers of releases before ``status.pipelineStarted``, which
        never report: an operator upgraded under a running job would otherwise end their
        executions at its pipeline start timeout. A driver starts snapshots only once it has
        restored and runs its epochs (``ongoingSnapshotStartTime``, its own clock).
        """
        execution = self.execution
        if execution is None:
            return False
        if self.pipeline_started is not None:
            return self.pipeline_started.execution_id == execution.id
        snapshot_started = self.record().ongoing_snapshot_start_time
        return snapshot_started is not None and snapshot_started >= int(
            execution.started_at.timestamp() * 1000
        )

    def condition(self, condition_type: ConditionType) -> Condition | None:
        """Returns the condition of that type, if reported."""
        return next((c for c in self.conditions if c.type is condition_type), None)

    def record(self) -> ExecutionRecord:
        """Returns the execution record, or a new job's record if there is none yet."""
        if self.execution_record is None:
            return ExecutionRecord()
        return self.execution_record.to_record()

    def exported(self, name: str) -> ExportedSnapshot | None:
        """Returns the exported snapshot of that name, if the job has exported it."""
        return next((s for s in self.exported_snapshots if s.name == name), None)
