"""The coordinator's states and transitions, and the values it is configured with and reports.

Kept apart from :mod:`snapshot_protocol.coordinator` so that the procedures there read as the
steps of ``docs/concepts/protocol.md``; everything here is plain data: the states, the transitions
allowed between them (:data:`TRANSITIONS`, checked before every change), the job's settings,
termination requests, why an execution ended, and what a snapshot's taking steps 1-8 gave.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from snapshot_protocol.chunks import PipelineShape
from snapshot_protocol.signing import SnapshotKeys
from snapshotjob_contract.modes import ActionAfter, SnapshotKind, TerminationMode
from snapshotjob_contract.record import JobIdentity


class CoordinatorState(enum.Enum):
    """Where the coordinator of one execution is.

    NOT_STARTED: created, restore not yet run.
    RESTORING: in the restore procedure.
    RUNNING: processing; a snapshot may be started.
    TAKING_SNAPSHOT: in taking steps 1-8.
    PHASE_2_PENDING: the decision is stored; the 2nd phase has not started yet.
    IN_PHASE_2: in taking steps 9-10.
    RESTART_REQUIRED: stopped; the job must be restarted (and restored).
    SUSPENDED: stopped; the job is suspended until resumed (restored again).
    CANCELLED: stopped for good.
    FAILED: stopped for good: corrupted snapshot or a failure of the job.
    FENCED: stopped for good: a newer execution exists (this one is a zombie).
    """

    NOT_STARTED = "NOT_STARTED"
    RESTORING = "RESTORING"
    RUNNING = "RUNNING"
    TAKING_SNAPSHOT = "TAKING_SNAPSHOT"
    PHASE_2_PENDING = "PHASE_2_PENDING"
    IN_PHASE_2 = "IN_PHASE_2"
    RESTART_REQUIRED = "RESTART_REQUIRED"
    SUSPENDED = "SUSPENDED"
    CANCELLED = "CANCELLED"
    FAILED = "FAILED"
    FENCED = "FENCED"


_S = CoordinatorState

TRANSITIONS: Mapping[CoordinatorState, frozenset[CoordinatorState]] = MappingProxyType(
    {
        _S.NOT_STARTED: frozenset({_S.RESTORING}),
        _S.RESTORING: frozenset({_S.RUNNING, _S.RESTART_REQUIRED, _S.FAILED, _S.FENCED}),
        _S.RUNNING: frozenset(
            {_S.TAKING_SNAPSHOT, _S.RESTART_REQUIRED, _S.SUSPENDED, _S.CANCELLED, _S.FAILED}
        ),
        # -> RUNNING: the snapshot failed to start (taking step 2 or 3); -> RESTART_REQUIRED:
        # taking step 7a, or a terminal snapshot failed to start (docs/concepts/protocol.md).
        _S.TAKING_SNAPSHOT: frozenset(
            {_S.PHASE_2_PENDING, _S.RUNNING, _S.RESTART_REQUIRED, _S.FENCED}
        ),
        # -> SUSPENDED / FAILED: the job failed while phase 2 was pending (fail()).
        _S.PHASE_2_PENDING: frozenset({_S.IN_PHASE_2, _S.SUSPENDED, _S.FAILED}),
        _S.IN_PHASE_2: frozenset({_S.RUNNING, _S.RESTART_REQUIRED, _S.SUSPENDED, _S.CANCELLED}),
        # Restore step 1 keeps the in-memory record when the same coordinator restores again
        # (docs/concepts/protocol.md, restore step 1).
        _S.RESTART_REQUIRED: frozenset({_S.RESTORING}),
        _S.SUSPENDED: frozenset({_S.RESTORING}),
        _S.CANCELLED: frozenset(),
        _S.FAILED: frozenset(),
        _S.FENCED: frozenset(),
    }
)
"""The allowed transitions, from each state to the states it may go to."""

ACCEPTS_TERMINATION_REQUESTS = frozenset(
    {_S.RUNNING, _S.TAKING_SNAPSHOT, _S.PHASE_2_PENDING, _S.IN_PHASE_2}
)
STOPPED_BY_ACTION = {
    ActionAfter.RESTART: _S.RESTART_REQUIRED,
    ActionAfter.SUSPEND: _S.SUSPENDED,
    ActionAfter.CANCEL: _S.CANCELLED,
}


@dataclass(frozen=True)
class ExportIdentity:
    """Which export a name must resolve to, as its SnapshotJobExport recorded it.

    Attributes:
        job_uid: The uid of the job that took the export (its validation record's ``job_uid``).
        snapshot_id: The export's snapshot id.
    """

    job_uid: str
    snapshot_id: int

    def __str__(self) -> str:
        return f"snapshot {self.snapshot_id} of job uid {self.job_uid}"


@dataclass(frozen=True)
class CoordinatorConfig:
    """What the coordinator needs to know about the job.

    Attributes:
        job: Names the job's maps and tags its validation records.
        snapshot_interval_ms: From the end of one automatic snapshot to the start of the next.
        suspend_on_failure: Suspend (SUSPEND_FORCEFUL, no snapshot) instead of failing.
        initial_snapshot_name: Restore from this exported snapshot while the record has no
            snapshot of its own (Jet's ``JobConfig.initialSnapshotName``).
        shape: The pipeline's participants and state partitions, written into every validation
            record and checked against the restore point's before any state is loaded; by
            default the participants' names alone.
        split_brain_protection: Run only with a quorum of the store's members (Jet's
            ``JobConfig.splitBrainProtectionEnabled``): the record's ``quorumSize`` is raised
            as members are seen, and the execution stops below it
            (:meth:`~snapshot_protocol.SnapshotCoordinator.observe_members`).
        store_lost_ms: With or without split-brain protection, an execution whose driver
            has reached no store member for this long stops (a transient failure) instead of
            waiting on operations that can only time out.
        accepted_older_copy: ``(copy, record)`` snapshot ids: the user accepts restoring the
            durable copy of snapshot ``copy`` while the record's snapshot ``record`` is lost
            from the store (``spec.durableRestore``), and so repeating the output since.
        initial_snapshot_identity: The export ``initial_snapshot_name`` must resolve to, as its
            SnapshotJobExport recorded it; None to take the name's highest snapshot id
            (:mod:`snapshot_protocol.export_names`).
        snapshot_keys: The job's keys: every validation record written is signed, and a
            restore takes only a record that verifies (:mod:`snapshot_protocol.signing`);
            None to sign nothing and accept any record.
    """

    job: JobIdentity
    snapshot_interval_ms: int
    suspend_on_failure: bool = False
    initial_snapshot_name: str | None = None
    shape: PipelineShape | None = None
    split_brain_protection: bool = False
    store_lost_ms: int = 30_000
    accepted_older_copy: tuple[int, int] | None = None
    initial_snapshot_identity: ExportIdentity | None = None
    snapshot_keys: SnapshotKeys | None = None


@dataclass(frozen=True)
class TerminationRequest:
    """A request to stop the execution, as the operator puts it in ``status.termination``.

    Attributes:
        mode: One of the six termination modes.
        export_name: For graceful modes, export the terminal snapshot under this name.
    """

    mode: TerminationMode
    export_name: str | None = None

    def __post_init__(self) -> None:
        if self.export_name is not None and not self.mode.terminal_snapshot:
            raise ValueError(f"{self.mode.name} takes no snapshot, so it cannot export one")


@dataclass(frozen=True)
class ExecutionEnd:
    """Why the execution stopped: a failure, fencing, or a termination mode carried out.

    Not the request to stop (:class:`TerminationRequest`): a request may be ignored, and an
    execution may end without one.

    Attributes:
        reason: A sentence for ``status.lastFailure`` or the events.
        mode: The termination mode carried out; None for FAILED and FENCED.
        ignored_request: A termination request dropped because the job restarts forcefully
            after an indeterminate record write (docs/concepts/protocol.md, taking step 7a).
        transient: A restart because something was unavailable (the store, an external
            system), not an indeterminate record write: it counts as a failure, so that an
            outage that lasts ends the job instead of restarting it forever.
        quorum_lost: A restart because the store members the execution reaches fell below
            the record's quorum (split-brain protection): the job restarts once a quorum is
            back.
    """

    reason: str
    mode: TerminationMode | None = None
    ignored_request: TerminationRequest | None = None
    transient: bool = False
    quorum_lost: bool = False


@dataclass(frozen=True)
class SnapshotOutcome:
    """The result of taking steps 1-8 for one snapshot.

    Attributes:
        snapshot_id: The id allocated in step 1.
        kind: The snapshot's kind.
        map_name: The map it was written to.
        export_name: The export name of exported kinds.
        successful: All data and the validation record were written without error and the
            1st phase succeeded ("successful" in docs/concepts/protocol.md, "Safe, maybe safe,
            successful").
        failure: Why it failed, if it did.
        num_bytes: Total bytes of the chunks written (as in the validation record).
    """

    snapshot_id: int
    kind: SnapshotKind
    map_name: str
    export_name: str | None
    successful: bool
    failure: str | None
    num_bytes: int = 0
