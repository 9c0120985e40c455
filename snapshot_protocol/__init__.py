"""The pure core of Hazelcast Jet's "non-corruptible snapshots" protocol, for PySpark jobs.

The protocol, its steps and its invariants are described in ``docs/concepts/protocol.md``. The core
implements the snapshot taking procedure (steps 1-10), the restore procedure (steps 1-5) and
keeps invariants I1-I8 of that page; it imports nothing but the standard library, so every
decision can be tested against in-memory fakes with injected crashes and indeterminate results.
The world is reached through the ports: the execution record lives in the SnapshotJob status
(:class:`RecordStore`), snapshot data in Hazelcast maps (:class:`SnapshotStore`), and the
pipeline's sources, state and sinks take part through :class:`Participant`.
"""

from snapshot_protocol.chunks import (
    CHECKSUM_ALGORITHM,
    SNAPSHOT_FORMAT_VERSION,
    ChunkDescriptor,
    ChunkKey,
    ChunkWriter,
    PipelineShape,
    SnapshotRef,
    UnreadableFormat,
    ValidationRecord,
    check_compatible,
    checksum,
    validate_snapshot,
    verify_chunk,
)
from snapshot_protocol.coordinator import (
    TRANSITIONS,
    CoordinatorConfig,
    CoordinatorState,
    ExecutionEnd,
    SnapshotCoordinator,
    SnapshotOutcome,
    TerminationRequest,
)
from snapshot_protocol.errors import (
    IllegalTransition,
    IndeterminateChunkWrite,
    IndeterminateRecordWrite,
    ProtocolError,
    RecordStoreError,
    RestoreNeedsConsent,
    SnapshotCorrupted,
    SnapshotIncompatible,
    SnapshotNotFound,
    SnapshotStoreError,
    SnapshotUnusable,
    ZombieExecution,
)
from snapshot_protocol.failpoints import (
    ENV_VAR as FAILPOINTS_ENV_VAR,
)
from snapshot_protocol.failpoints import (
    FAILPOINTS,
    Failpoint,
    FailpointAction,
    FailpointCrash,
    FailpointIndeterminate,
    Failpoints,
)
from snapshot_protocol.ports import (
    ChunkReader,
    Clock,
    Participant,
    RecordStore,
    SnapshotStore,
    StoreMembership,
)
from snapshot_protocol.states import ExportIdentity
from snapshotjob_contract.modes import ActionAfter, SnapshotKind, TerminationMode
from snapshotjob_contract.record import (
    NO_SNAPSHOT,
    ExecutionRecord,
    JobIdentity,
    SnapshotStats,
    export_map_name,
    snapshot_map_name,
)

__all__ = [
    "CHECKSUM_ALGORITHM",
    "FAILPOINTS",
    "FAILPOINTS_ENV_VAR",
    "NO_SNAPSHOT",
    "SNAPSHOT_FORMAT_VERSION",
    "TRANSITIONS",
    "ActionAfter",
    "ChunkDescriptor",
    "ChunkKey",
    "ChunkReader",
    "ChunkWriter",
    "Clock",
    "CoordinatorConfig",
    "CoordinatorState",
    "ExecutionEnd",
    "ExecutionRecord",
    "ExportIdentity",
    "Failpoint",
    "FailpointAction",
    "FailpointCrash",
    "FailpointIndeterminate",
    "Failpoints",
    "IllegalTransition",
    "IndeterminateChunkWrite",
    "IndeterminateRecordWrite",
    "JobIdentity",
    "Participant",
    "PipelineShape",
    "ProtocolError",
    "RecordStore",
    "RecordStoreError",
    "RestoreNeedsConsent",
    "SnapshotCoordinator",
    "SnapshotCorrupted",
    "SnapshotIncompatible",
    "SnapshotKind",
    "SnapshotNotFound",
    "SnapshotOutcome",
    "SnapshotRef",
    "SnapshotStats",
    "SnapshotStore",
    "SnapshotStoreError",
    "SnapshotUnusable",
    "StoreMembership",
    "TerminationMode",
    "TerminationRequest",
    "UnreadableFormat",
    "ValidationRecord",
    "ZombieExecution",
    "check_compatible",
    "checksum",
    "export_map_name",
    "snapshot_map_name",
    "validate_snapshot",
    "verify_chunk",
]
