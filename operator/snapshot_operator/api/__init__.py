"""The SnapshotJob API: pydantic models of the spec and status, and the CRD rendered from them.

Pure on purpose (pydantic and the pure protocol core only): the operator, the runtime, the CRD
generator and the tests all share these models, so none of them may pull in kopf or a client.
"""

from snapshot_operator.api.driver import DriverExit
from snapshot_operator.api.spec import (
    DriverResources,
    ExecutorResources,
    ExportSnapshotSpec,
    HazelcastSpec,
    ImagePullPolicy,
    PipelineSpec,
    ProcessingGuarantee,
    RestartPolicy,
    SnapshotJobSpec,
    SparkSpec,
    UpgradeMode,
)
from snapshot_operator.api.status import (
    CONDITION_DESCRIPTIONS,
    PHASE_DESCRIPTIONS,
    REASON_DESCRIPTIONS,
    Condition,
    ConditionReason,
    ConditionStatus,
    ConditionType,
    ExecutionRecordStatus,
    ExecutionStatus,
    ExportedSnapshot,
    ExportFailureStatus,
    ExportRequestStatus,
    FailureStatus,
    Phase,
    SnapshotJobStatus,
    SnapshotStatsStatus,
    TerminationModeName,
    TerminationStatus,
)

__all__ = [
    "CONDITION_DESCRIPTIONS",
    "PHASE_DESCRIPTIONS",
    "REASON_DESCRIPTIONS",
    "Condition",
    "ConditionReason",
    "ConditionStatus",
    "ConditionType",
    "DriverExit",
    "DriverResources",
    "ExecutionRecordStatus",
    "ExecutionStatus",
    "ExecutorResources",
    "ExportFailureStatus",
    "ExportRequestStatus",
    "ExportSnapshotSpec",
    "ExportedSnapshot",
    "FailureStatus",
    "HazelcastSpec",
    "ImagePullPolicy",
    "Phase",
    "PipelineSpec",
    "ProcessingGuarantee",
    "RestartPolicy",
    "SnapshotJobSpec",
    "SnapshotJobStatus",
    "SnapshotStatsStatus",
    "SparkSpec",
    "TerminationModeName",
    "TerminationStatus",
    "UpgradeMode",
]
