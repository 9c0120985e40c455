"""The words of ``SnapshotJob.status``: phases, condition types and reasons, each described.

Kept apart from the status models (:mod:`snapshotjob_contract.status`) because these are the
vocabulary everything else speaks: the operator's decisions, its Events and log lines, the
printer columns, ``docs/reference/api.md`` (a test checks every value is documented there) and the
driver. Each value carries a one-line description, which the CRD's ``kubectl explain`` text
is rendered from.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from types import MappingProxyType
from typing import TypeVar

_Described = TypeVar("_Described", bound=enum.StrEnum)


class Phase(enum.StrEnum):
    """Where the job is in its lifecycle: Jet's JobStatus plus RESTARTING."""

    NOT_RUNNING = "NOT_RUNNING"
    STARTING = "STARTING"
    RUNNING = "RUNNING"
    SUSPENDED = "SUSPENDED"
    SUSPENDED_EXPORTING_SNAPSHOT = "SUSPENDED_EXPORTING_SNAPSHOT"
    COMPLETING = "COMPLETING"
    FAILED = "FAILED"
    COMPLETED = "COMPLETED"
    RESTARTING = "RESTARTING"

    @property
    def description(self) -> str:
        """What the phase means, for the CRD and the docs."""
        return PHASE_DESCRIPTIONS[self]


PHASE_DESCRIPTIONS: Mapping[Phase, str] = MappingProxyType(
    {
        Phase.NOT_RUNNING: "No execution has started yet; the first one waits for the snapshot "
        "store to be ready",
        Phase.STARTING: "A new execution is starting: its driver Pod is not running yet, or "
        "the driver has not yet reported that its pipeline runs (restored, Spark executors "
        "scheduled and a first Spark job done)",
        Phase.RUNNING: "The driver reported that its pipeline runs; it takes automatic snapshots",
        Phase.SUSPENDED: "No execution runs; the job resumes from its last good snapshot when "
        "spec.suspend is false",
        Phase.SUSPENDED_EXPORTING_SNAPSHOT: "Suspended, and the operator copies the last good "
        "snapshot to the requested export",
        Phase.COMPLETING: "The driver was asked to stop (status.termination) and has not "
        "stopped yet",
        Phase.FAILED: "The job stopped for good: it failed permanently, used up its restarts or "
        "was cancelled (Jet reports a cancelled job as failed); a spec change starts it again",
        Phase.COMPLETED: "The pipeline finished; a spec change starts it again",
        Phase.RESTARTING: "Between two executions: waiting for the restart backoff or for the "
        "snapshot store",
    }
)


def described(descriptions: Mapping[_Described, str]) -> str:
    """Lists each value with its meaning, for a field's description in the CRD."""
    return "; ".join(f"{value.value}: {meaning}" for value, meaning in descriptions.items())


class ConditionType(enum.StrEnum):
    """The standard conditions every SnapshotJob reports."""

    READY = "Ready"
    PROGRESSING = "Progressing"
    DEGRADED = "Degraded"
    SNAPSHOT_HEALTHY = "SnapshotHealthy"
    STORE_READY = "StoreReady"
    RECONCILING = "Reconciling"
    STALLED = "Stalled"

    @property
    def description(self) -> str:
        """What the condition being True means."""
        return CONDITION_DESCRIPTIONS[self]


CONDITION_DESCRIPTIONS: Mapping[ConditionType, str] = MappingProxyType(
    {
        ConditionType.READY: "the job is in the state its spec asks for (running, suspended "
        "or completed)",
        ConditionType.PROGRESSING: "the operator is moving the job to another state",
        ConditionType.DEGRADED: "the job failed, is restarting after failures, or its spec "
        "cannot be applied",
        ConditionType.SNAPSHOT_HEALTHY: "the last automatic snapshot succeeded and is recent "
        "(the recovery point is within a few snapshot intervals)",
        ConditionType.STORE_READY: "the Hazelcast store is cluster-safe and, with split-brain "
        "protection, has a quorum",
        ConditionType.RECONCILING: "the same as Progressing, under the name kstatus (Flux, "
        "kpt, cli-utils) reads: the job is not yet where its spec wants it",
        ConditionType.STALLED: "the job cannot get where its spec wants it without the user: "
        "it failed, was suspended on failure, or its spec is invalid (kstatus reads it as "
        "Failed)",
    }
)


class ConditionStatus(enum.StrEnum):
    """Kubernetes condition status."""

    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class ConditionReason(enum.StrEnum):
    """Every ``reason`` the operator writes into a condition (Kubernetes: CamelCase).

    Users and alerts match on these strings, so they are a fixed set like the phases. The
    failure reasons are also what ``status.lastFailure.reason`` holds: a FAILED job's Ready
    and Degraded conditions repeat its last failure's reason.
    """

    RUNNING = "Running"
    SUSPENDED = "Suspended"
    COMPLETED = "Completed"
    NOT_STARTED = "NotStarted"
    STARTING = "Starting"
    WAITING_FOR_PIPELINE = "WaitingForPipeline"
    COMPLETING = "Completing"
    RESTARTING = "Restarting"
    FAILED = "Failed"
    EXPORTING_SNAPSHOT = "ExportingSnapshot"
    EXPORT_IN_PROGRESS = "ExportInProgress"
    SETTLED = "Settled"
    AS_EXPECTED = "AsExpected"
    INVALID_SPEC = "InvalidSpec"
    EXPORT_REJECTED = "ExportRejected"
    EXPORT_FAILED = "ExportFailed"
    DRIVER_FENCED = "DriverFenced"
    SUSPENDED_ON_FAILURE = "SuspendedOnFailure"
    RESTARTING_AFTER_FAILURE = "RestartingAfterFailure"
    DRIVER_FAILED = "DriverFailed"
    DRIVER_POD_LOST = "DriverPodLost"
    BAD_INPUT = "BadInput"
    SNAPSHOT_CORRUPTED = "SnapshotCorrupted"
    SNAPSHOT_INCOMPATIBLE = "SnapshotIncompatible"
    SNAPSHOT_NOT_FOUND = "SnapshotNotFound"
    RESTORE_NEEDS_CONSENT = "RestoreNeedsConsent"
    TRANSIENT_FAILURE = "TransientFailure"
    REPEATED_FORCED_RESTARTS = "RepeatedForcedRestarts"
    CREATE_FAILED = "CreateFailed"
    CANCELLED = "Cancelled"
    DRIVER_UNSCHEDULABLE = "DriverUnschedulable"
    DRIVER_NOT_STARTING = "DriverNotStarting"
    EXECUTORS_NOT_STARTING = "ExecutorsNotStarting"
    PIPELINE_START_TIMEOUT = "PipelineStartTimeout"
    SNAPSHOT_RECENT = "SnapshotRecent"
    SNAPSHOT_STALE = "SnapshotStale"
    SNAPSHOT_FAILED = "SnapshotFailed"
    DRIVER_STALLED = "DriverStalled"
    CHECKING_UPGRADE = "CheckingUpgrade"
    UPGRADE_REFUSED = "UpgradeRefused"
    SOURCE_DATA_LOST = "SourceDataLost"
    NO_SNAPSHOT_YET = "NoSnapshotYet"
    SNAPSHOTS_DISABLED = "SnapshotsDisabled"
    CLUSTER_SAFE = "ClusterSafe"
    NOT_CLUSTER_SAFE = "NotClusterSafe"
    TOO_FEW_MEMBERS = "TooFewMembers"
    BELOW_QUORUM = "BelowQuorum"
    QUORUM_LOST = "QuorumLost"
    STORE_UNREACHABLE = "StoreUnreachable"

    @property
    def description(self) -> str:
        """When the operator gives this reason."""
        return REASON_DESCRIPTIONS[self]


REASON_DESCRIPTIONS: Mapping[ConditionReason, str] = MappingProxyType(
    {
        ConditionReason.RUNNING: "an execution runs; Ready is True only if it runs the current "
        "spec and no request to stop is pending",
        ConditionReason.SUSPENDED: "no execution runs; Ready is True only if spec.suspend asks "
        "for it",
        ConditionReason.COMPLETED: "the pipeline finished",
        ConditionReason.NOT_STARTED: "no execution has started yet",
        ConditionReason.STARTING: "the driver Pod of a new execution is not running yet",
        ConditionReason.WAITING_FOR_PIPELINE: "the driver Pod runs, but the driver has not yet "
        "reported that its pipeline runs (restore, Spark executors, a first Spark job)",
        ConditionReason.COMPLETING: "the driver was asked to stop and has not stopped yet",
        ConditionReason.RESTARTING: "between two executions, waiting for a backoff or the store",
        ConditionReason.FAILED: "the job is FAILED without a recorded failure",
        ConditionReason.EXPORTING_SNAPSHOT: "the operator copies the restore point of the "
        "suspended job to an export",
        ConditionReason.EXPORT_IN_PROGRESS: "the running driver was asked for an export-only "
        "snapshot",
        ConditionReason.SETTLED: "Progressing False: the operator is not moving the job",
        ConditionReason.AS_EXPECTED: "Degraded False: no failure to report",
        ConditionReason.INVALID_SPEC: "the spec cannot be applied: the API models reject it "
        "(stored before a rule existed, or written around the CRD)",
        ConditionReason.EXPORT_REJECTED: "the requested export cannot be taken: it would "
        "overwrite the restore point or the initial snapshot, or the job takes no snapshots",
        ConditionReason.EXPORT_FAILED: "copying the restore point to an export failed: retrying, "
        "or given up until exportSnapshot.name changes",
        ConditionReason.DRIVER_FENCED: "the current driver stopped because a newer execution "
        "owns the job; waiting for the status to show it",
        ConditionReason.SUSPENDED_ON_FAILURE: "suspendOnFailure suspended the job without a "
        "snapshot after a failure; a spec change resumes it",
        ConditionReason.RESTARTING_AFTER_FAILURE: "an execution failed and the job restarts "
        "after a backoff",
        ConditionReason.DRIVER_FAILED: "the driver exited with a code that means a failure",
        ConditionReason.DRIVER_POD_LOST: "the driver Pod of a running execution disappeared",
        ConditionReason.BAD_INPUT: "the driver cannot run the pipeline module or the spec; no "
        "restart helps",
        ConditionReason.SNAPSHOT_CORRUPTED: "restore found the restore point corrupted; the job "
        "cannot restart from it",
        ConditionReason.SNAPSHOT_INCOMPATIBLE: "the restore point was written by another "
        "snapshot format or by a pipeline with other state; the job cannot restore it",
        ConditionReason.SNAPSHOT_NOT_FOUND: "spec.initialSnapshotName names no complete "
        "exported snapshot",
        ConditionReason.RESTORE_NEEDS_CONSENT: "the store lost the restore point and durable "
        "storage has only an older copy; restoring it writes committed output again, so the job "
        "waits until spec.durableRestore names both snapshot ids",
        ConditionReason.TRANSIENT_FAILURE: "the snapshot store or an external system was "
        "unavailable; the job restarts after a backoff, counted against maxRestarts",
        ConditionReason.REPEATED_FORCED_RESTARTS: "several executions in a row ended in a "
        "forced restart (exit 75, an indeterminate execution record write, 79, a lost quorum, or "
        "143, SIGTERM) "
        "without a new snapshot; after more of them, each counts as a failure",
        ConditionReason.CREATE_FAILED: "the API server did not create an object of the starting "
        "execution (its driver Pod, ServiceAccount, Role or RoleBinding), e.g. a ResourceQuota "
        "refused it; the same execution is created again after a backoff, and the job is FAILED "
        "after a few attempts until its spec changes",
        ConditionReason.CANCELLED: "the job was cancelled (Jet reports a cancelled job as "
        "failed); not a degradation",
        ConditionReason.DRIVER_UNSCHEDULABLE: "the scheduler cannot place the starting "
        "execution's driver Pod (PodScheduled False, reason Unschedulable), e.g. it requests "
        "more than any node has; the execution ends as a failure if its pipeline has not "
        "started within the operator's pipeline start timeout",
        ConditionReason.DRIVER_NOT_STARTING: "the starting execution's driver container cannot "
        "start (e.g. ImagePullBackOff, ErrImagePull, CreateContainerConfigError); the execution "
        "ends as a failure if its pipeline has not started within the pipeline start timeout",
        ConditionReason.EXECUTORS_NOT_STARTING: "an executor Pod of the starting execution "
        "cannot be scheduled, its container cannot start, or it exited with an error; the "
        "execution ends as a failure if its pipeline has not started within the pipeline start "
        "timeout",
        ConditionReason.PIPELINE_START_TIMEOUT: "the driver did not report a running pipeline "
        "within the operator's pipeline start timeout: the execution was ended and counted as "
        "a failure",
        ConditionReason.SNAPSHOT_RECENT: "the last snapshot succeeded and the restore point is "
        "recent",
        ConditionReason.SNAPSHOT_STALE: "the restore point of the running job is older than a "
        "few snapshot intervals (SnapshotHealthy); Degraded too while the running execution "
        "has taken none for that long, until stall detection ends it",
        ConditionReason.SNAPSHOT_FAILED: "the last snapshot attempt failed",
        ConditionReason.DRIVER_STALLED: "the running execution took no snapshot for "
        "spec.stallDetection's bound, or an epoch or a sink call outlived its timeout (exit "
        "70): the execution was ended and restarts from the last snapshot through the restart "
        "policy",
        ConditionReason.CHECKING_UPGRADE: "the spec changed: a short-lived Pod of the new image "
        "checks that its pipeline can restore the restore point before the running execution "
        "is asked to stop",
        ConditionReason.UPGRADE_REFUSED: "the changed spec's pipeline cannot restore the "
        "restore point (or the check could not run): the rollout is refused and the running "
        "execution keeps running; the message names what differs",
        ConditionReason.SOURCE_DATA_LOST: "a Kafka source's restored offset is below the "
        "partition's earliest retained offset (exit 71): retention deleted records the job "
        "never read; the message names the partitions and how many records are gone, and "
        "spec.expiredOffsets Earliest goes on without them",
        ConditionReason.NO_SNAPSHOT_YET: "the job has no snapshot yet",
        ConditionReason.SNAPSHOTS_DISABLED: "processingGuarantee NONE takes no snapshots",
        ConditionReason.CLUSTER_SAFE: "the store is cluster-safe and may start an execution",
        ConditionReason.NOT_CLUSTER_SAFE: "partitions of the store migrate or backups are not "
        "in sync",
        ConditionReason.TOO_FEW_MEMBERS: "the store has no more members than the job's backupCount",
        ConditionReason.BELOW_QUORUM: "with split-brain protection, the store has fewer members "
        "than the execution record's quorum",
        ConditionReason.QUORUM_LOST: "with split-brain protection, the running driver reached "
        "fewer store members than the quorum (a network partition left it on the minority "
        "side) and stopped without a snapshot (exit 79); the job restarts from its last "
        "snapshot once the store has a quorum",
        ConditionReason.STORE_UNREACHABLE: "the store's health endpoint could not be read",
    }
)
