"""The operator's pure decision logic: observation in, actions out, no I/O.

The kopf handlers gather an :class:`Observation`, call :func:`decide` and perform the returned
actions in order; everything that needs judgement lives here, where property-based tests can
drive it through every phase, spec change and Pod state.
"""

from snapshot_operator.reconcile.actions import (
    Action,
    CopySnapshotToExport,
    CreateDriverPod,
    CreateUpgradeCheckPod,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    DeleteUpgradeCheckPod,
    EmitEvent,
    EventReason,
    EventType,
    PatchStatus,
    RemoveFinalizer,
    RequestExport,
    RequestTermination,
    Requeue,
)
from snapshot_operator.reconcile.decide import decide
from snapshot_operator.reconcile.exits import CANCELLED
from snapshot_operator.reconcile.observation import (
    DecisionSettings,
    DriverPod,
    ExecutorPod,
    InvalidSpec,
    JobRef,
    Observation,
    PodPhase,
    PodProblem,
    StoreHealth,
)
from snapshot_operator.reconcile.observe import (
    observe,
    parse_driver_pod,
    parse_executor_pod,
    parse_spec,
    parse_store_health,
)
from snapshot_operator.reconcile.phases import LIVE_PHASES, TRANSITIONS, IllegalPhaseChange
from snapshot_operator.reconcile.starting import driver_pod_name, execution_id

__all__ = [
    "CANCELLED",
    "LIVE_PHASES",
    "TRANSITIONS",
    "Action",
    "CopySnapshotToExport",
    "CreateDriverPod",
    "CreateUpgradeCheckPod",
    "DecisionSettings",
    "DeleteDriverPod",
    "DeleteDurableCopies",
    "DeleteSnapshotMaps",
    "DeleteUpgradeCheckPod",
    "DriverPod",
    "EmitEvent",
    "EventReason",
    "EventType",
    "ExecutorPod",
    "IllegalPhaseChange",
    "InvalidSpec",
    "JobRef",
    "Observation",
    "PatchStatus",
    "PodPhase",
    "PodProblem",
    "RemoveFinalizer",
    "RequestExport",
    "RequestTermination",
    "Requeue",
    "StoreHealth",
    "decide",
    "driver_pod_name",
    "execution_id",
    "observe",
    "parse_driver_pod",
    "parse_executor_pod",
    "parse_spec",
    "parse_store_health",
]
