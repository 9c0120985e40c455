"""The contract between the operator and the driver, defined once.

The operator (``snapshot_operator``) and the Spark runtime (``spark_runtime``) are two programs
that meet only through the SnapshotJob resource and the driver Pod: the spec the user writes,
the status both write (the execution record, termination and export requests), the command and
environment the operator starts the driver with, the exit code the driver ends with, and the
Hazelcast maps the snapshots live in. Everything either side must agree on is here, and nowhere
else:

* :mod:`~snapshotjob_contract.spec`, :mod:`~snapshotjob_contract.status`: the pydantic models
  of the resource (the CRD is rendered from them by ``snapshot_operator.api.crd``), and
  :mod:`~snapshotjob_contract.conditions`: the status's phases, conditions and reasons;
* :mod:`~snapshotjob_contract.resource`: the API group, version, kind and plural;
* :mod:`~snapshotjob_contract.environment`: the driver's command and environment variables;
* :mod:`~snapshotjob_contract.exits`: the driver's exit codes and what each means;
* :mod:`~snapshotjob_contract.record`, :mod:`~snapshotjob_contract.modes`: the execution
  record, termination modes and snapshot kinds of the protocol (``docs/concepts/protocol.md``), and
  the names of the snapshot maps.

Pure on purpose (pydantic and the standard library only), enforced by import-linter: both
programs, the CRD generator and the tests import it, so it may pull in neither kopf nor any
client, and it imports neither program.
"""

from snapshotjob_contract.conditions import (
    CONDITION_DESCRIPTIONS,
    PHASE_DESCRIPTIONS,
    REASON_DESCRIPTIONS,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    Phase,
)
from snapshotjob_contract.exits import (
    DRIVER_GRACE_SECONDS,
    EXIT_REPORT_AFTER_SIGNAL_SECONDS,
    DriverExit,
)
from snapshotjob_contract.modes import ActionAfter, SnapshotKind, TerminationMode
from snapshotjob_contract.record import (
    CHAIN_MAP_INDEX,
    EXPORT_BACKUP_COUNT,
    MAX_BACKUP_COUNT,
    NO_SNAPSHOT,
    SPLIT_BRAIN_PROTECTION,
    ExecutionRecord,
    JobIdentity,
    SnapshotStats,
    all_snapshot_map_names,
    export_map_name,
    member_map_backup_counts,
    member_map_merge_policy,
    quorum_of,
    snapshot_map_name,
)
from snapshotjob_contract.spec import (
    DeletionPolicy,
    DriverResources,
    DurableStorageSpec,
    ExecutorResources,
    ExpiredOffsetsPolicy,
    ExportSnapshotSpec,
    HazelcastSpec,
    ImagePullPolicy,
    PipelineSpec,
    ProcessingGuarantee,
    RestartPolicy,
    SnapshotJobSpec,
    SparkSpec,
    StallDetectionSpec,
    UpgradeMode,
)
from snapshotjob_contract.status import (
    Condition,
    DriverExitStatus,
    ExecutionRecordStatus,
    ExecutionStatus,
    ExportedSnapshot,
    ExportFailureStatus,
    ExportRequestStatus,
    FailureStatus,
    ForcedRestartsStatus,
    PipelineStartedStatus,
    SnapshotJobStatus,
    SnapshotStatsStatus,
    StartFailureStatus,
    TerminationStatus,
)

__all__ = [
    "CHAIN_MAP_INDEX",
    "CONDITION_DESCRIPTIONS",
    "DRIVER_GRACE_SECONDS",
    "EXIT_REPORT_AFTER_SIGNAL_SECONDS",
    "EXPORT_BACKUP_COUNT",
    "MAX_BACKUP_COUNT",
    "NO_SNAPSHOT",
    "PHASE_DESCRIPTIONS",
    "REASON_DESCRIPTIONS",
    "SPLIT_BRAIN_PROTECTION",
    "ActionAfter",
    "Condition",
    "ConditionReason",
    "ConditionStatus",
    "ConditionType",
    "DeletionPolicy",
    "DriverExit",
    "DriverExitStatus",
    "DriverResources",
    "DurableStorageSpec",
    "ExecutionRecord",
    "ExecutionRecordStatus",
    "ExecutionStatus",
    "ExecutorResources",
    "ExpiredOffsetsPolicy",
    "ExportFailureStatus",
    "ExportRequestStatus",
    "ExportSnapshotSpec",
    "ExportedSnapshot",
    "FailureStatus",
    "ForcedRestartsStatus",
    "HazelcastSpec",
    "ImagePullPolicy",
    "JobIdentity",
    "Phase",
    "PipelineSpec",
    "PipelineStartedStatus",
    "ProcessingGuarantee",
    "RestartPolicy",
    "SnapshotJobSpec",
    "SnapshotJobStatus",
    "SnapshotKind",
    "SnapshotStats",
    "SnapshotStatsStatus",
    "SparkSpec",
    "StallDetectionSpec",
    "StartFailureStatus",
    "TerminationMode",
    "TerminationStatus",
    "UpgradeMode",
    "all_snapshot_map_names",
    "export_map_name",
    "member_map_backup_counts",
    "member_map_merge_policy",
    "quorum_of",
    "snapshot_map_name",
]
