"""The snapshot coordinator: Jet's master-side snapshot and restore procedures.

This is the taking procedure (steps 1-10) and the restore procedure (steps 1-5) of
``docs/concepts/protocol.md`` ("Taking a snapshot", "Restoring"), step by step, as a state machine
in the style of h11: the states and the transitions allowed between them are data
(:data:`TRANSITIONS`, in :mod:`snapshot_protocol.states`), every public method first makes a
transition, and an operation the current state does not allow raises
:class:`IllegalTransition` and changes nothing. Mechanism M3 (the next snapshot starts only
after the previous one's 2nd phase completed) and invariant I7 (one snapshot at a time) of
``docs/concepts/protocol.md`` hold because ``TAKING_SNAPSHOT`` can only be entered from ``RUNNING``.

The coordinator is single-threaded. Phase 2 (step 9) may run while the pipeline goes on
processing: :meth:`SnapshotCoordinator.take_snapshot` runs steps 1-8 and leaves the coordinator
in ``PHASE_2_PENDING``; :meth:`SnapshotCoordinator.finish_snapshot` runs steps 9 and 10.

Every step is wrapped in the failpoints ``<procedure>.before_step_N`` / ``after_step_N`` (see
:mod:`snapshot_protocol.failpoints`), passed in order even where a step has nothing to do.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from snapshot_protocol.chunks import (
    ChunkDescriptor,
    ChunkWriter,
    PipelineShape,
    SnapshotRef,
    ValidationRecord,
    check_compatible,
    check_descriptors,
    chunks_of,
    validate_snapshot,
)
from snapshot_protocol.errors import (
    IllegalTransition,
    IndeterminateRecordWrite,
    RecordStoreError,
    RestoreNeedsConsent,
    SnapshotCorrupted,
    SnapshotNotFound,
    SnapshotStoreError,
    SnapshotUnusable,
    ZombieExecution,
)
from snapshot_protocol.export_names import (
    discard_other_jobs_exports,
    find_export,
    others_under,
)
from snapshot_protocol.failpoints import RESTORE, TAKE, Failpoints, failpoint_name
from snapshot_protocol.ports import Clock, Participant, RecordStore, SnapshotStore
from snapshot_protocol.signing import check_signature, sign
from snapshot_protocol.states import (
    ACCEPTS_TERMINATION_REQUESTS,
    STOPPED_BY_ACTION,
    TRANSITIONS,
    CoordinatorConfig,
    CoordinatorState,
    ExecutionEnd,
    SnapshotOutcome,
    TerminationRequest,
)
from snapshot_protocol.transfer import transfer_snapshot
from snapshotjob_contract.modes import ActionAfter, SnapshotKind, TerminationMode
from snapshotjob_contract.record import (
    ExecutionRecord,
    durable_copy_map_name,
    export_map_name,
    quorum_of,
    snapshot_map_name,
)

__all__ = [
    "TRANSITIONS",
    "CoordinatorConfig",
    "CoordinatorState",
    "ExecutionEnd",
    "SnapshotCoordinator",
    "SnapshotOutcome",
    "TerminationRequest",
]

_S = CoordinatorState
_log = logging.getLogger(__name__)


class SnapshotCoordinator:
    """Takes snapshots and restores for one execution of a job (Jet's master context).

    Args:
        config: The job's settings.
        records: The execution record store of this execution (fenced by its execution id).
        snapshots: The snapshot data store.
        participants: The parties of the two-phase snapshot, with unique names.
        clock: The current time in epoch milliseconds.
        failpoints: Failpoints to pass; none armed if omitted.
    """

    def __init__(
        self,
        config: CoordinatorConfig,
        records: RecordStore,
        snapshots: SnapshotStore,
        participants: Sequence[Participant],
        clock: Clock,
        failpoints: Failpoints | None = None,
        durable: SnapshotStore | None = None,
    ) -> None:
        names = [participant.name for participant in participants]
        if len(set(names)) != len(names):
            raise ValueError(f"participant names must be unique: {names}")
        self._config = config
        self._shape = config.shape or PipelineShape({name: "" for name in names})
        self._records = records
        self._snapshots = snapshots
        self._durable = durable
        self._participants = tuple(participants)
        self._clock = clock
        self._failpoints = failpoints if failpoints is not None else Failpoints()
        self._state = CoordinatorState.NOT_STARTED
        self._record: ExecutionRecord | None = None
        self._execution_end: ExecutionEnd | None = None
        self._pending: TerminationRequest | None = None
        self._terminating: TerminationRequest | None = None
        self._in_flight: SnapshotOutcome | None = None
        self._last_outcome: SnapshotOutcome | None = None
        self._next_snapshot_at = 0
        self._store_lost_since: int | None = None
        # The restore point's validation record and map, as this execution knows them: the
        # snapshots an incremental snapshot may build on, and what its discards keep.
        self._restore_point: tuple[str, ValidationRecord] | None = None

    @property
    def state(self) -> CoordinatorState:
        """The current state."""
        return self._state

    @property
    def record(self) -> ExecutionRecord | None:
        """The in-memory execution record; None until restore step 1 loaded it."""
        return self._record

    @property
    def execution_end(self) -> ExecutionEnd | None:
        """Why the execution stopped, once it has."""
        return self._execution_end

    @property
    def last_outcome(self) -> SnapshotOutcome | None:
        """The outcome of the last snapshot that reached taking step 6, of any kind."""
        return self._last_outcome

    @property
    def pending_termination(self) -> TerminationRequest | None:
        """A termination request waiting for the snapshot in progress to complete."""
        return self._pending

    def is_snapshot_due(self) -> bool:
        """Whether the interval since the last snapshot has passed (docs/concepts/protocol.md,
        taking step 10)."""
        return self._state is _S.RUNNING and self._clock() >= self._next_snapshot_at

    # Restore procedure

    def restore(self) -> None:
        """Runs restore steps 1-5; ends in RUNNING, RESTART_REQUIRED or FAILED.

        Failures of a store read or write restart the job (counted, :attr:`ExecutionEnd.transient`)
        except an indeterminate record write, which restarts it at once.

        Raises:
            SnapshotUnusable: The restore point is corrupted (SnapshotCorrupted), cannot be
                restored by this pipeline (SnapshotIncompatible) or does not exist
                (SnapshotNotFound); the state is FAILED, permanently.
            ZombieExecution: A newer execution exists; the state is FENCED.
            IllegalTransition: If not NOT_STARTED, RESTART_REQUIRED or SUSPENDED.
        """
        self._transition(_S.RESTORING)
        self._execution_end = None
        self._pending = None
        self._terminating = None
        self._in_flight = None
        self._restore_point = None
        try:
            with self._step(RESTORE, 1):
                # A coordinator that restores again keeps its in-memory record, which may be
                # newer than the stored one, so a snapshot whose record write was
                # indeterminate can still be committed instead of reprocessed
                # (docs/concepts/protocol.md, restore step 1).
                if self._record is None:
                    self._record = self._records.read()
        except RecordStoreError as error:
            self._stop(
                TerminationMode.RESTART_FORCEFUL,
                f"cannot load execution record: {error}",
                transient=True,
            )
            return
        record = self._record.resumed().stamped(self._clock())
        self._record = record
        try:
            with self._step(RESTORE, 2):
                # The record must be safe before it is used: it may have been written with an
                # indeterminate result by the previous execution (docs/concepts/protocol.md, restore
                # step 2).
                self._records.write_safe(record)
        except ZombieExecution:
            self._transition(_S.FENCED)
            raise
        except RecordStoreError as error:
            self._stop(
                TerminationMode.RESTART_FORCEFUL,
                f"execution record could not be written safely before restore: {error}",
                transient=not isinstance(error, IndeterminateRecordWrite),
            )
            return
        initial = self._config.initial_snapshot_name
        with self._step(RESTORE, 3):
            map_name = record.successful_snapshot_map_name(self._config.job)
            from_initial = map_name is None and initial is not None
            if from_initial:
                # A job without a snapshot of its own starts from initialSnapshotName
                # (docs/concepts/protocol.md, restore step 3).
                assert initial is not None
                map_name = export_map_name(self._config.job.namespace, initial)
        validation: ValidationRecord | None = None
        try:
            with self._step(RESTORE, 4):
                if from_initial:
                    assert map_name is not None and initial is not None
                    validation = self._validate_initial(map_name, initial)
                elif map_name is not None:
                    validation = self._validate_restore_point(map_name, record.snapshot_id)
                if validation is not None:
                    assert map_name is not None
                    # Before anything else is believed of it: a record not written with the
                    # job's key (a forged chunk's checksum in it) is never restored.
                    check_signature(map_name, validation, self._config.snapshot_keys)
                    # Before any state is loaded: a pipeline that cannot restore the snapshot
                    # fails here, naming both sides, not halfway through step 5.
                    check_compatible(map_name, validation, self._shape)
                    self._restore_point = (map_name, validation)
        except SnapshotUnusable as unusable:
            self._fail_restore(unusable)
            raise
        except SnapshotStoreError as error:
            self._stop(
                TerminationMode.RESTART_FORCEFUL,
                f"cannot validate {map_name}: {error}",
                transient=True,
            )
            return
        try:
            with self._step(RESTORE, 5):
                for participant in self._participants:
                    ref = None
                    if map_name is not None and validation is not None:
                        ref = SnapshotRef(
                            map_name,
                            validation.snapshot_id,
                            chunks_of(validation, participant.name),
                            validation.shape.state_partitions,
                            validation.job_uid,
                        )
                    participant.restore(ref, self._snapshots, record.ongoing_snapshot_id)
        except SnapshotUnusable as unusable:
            self._fail_restore(unusable)
            raise
        except Exception as error:
            # A participant's own failure may be a Spark task's, which carries only the text of
            # a checksum mismatch found in an executor.
            corrupted = SnapshotCorrupted.find_in(str(error))
            if corrupted is not None:
                self._fail_restore(corrupted)
                raise corrupted from error
            self._stop(
                TerminationMode.RESTART_FORCEFUL,
                f"restore step 5 failed: {error}",
                transient=True,
            )
            return
        # The line operators and the end-to-end tests read to tell which snapshot a new
        # execution continues from.
        _log.info(
            "Restored snapshotId=%d map=%s fromInitial=%s",
            validation.snapshot_id if validation is not None else -1,
            map_name if validation is not None else "none",
            from_initial,
        )
        self._next_snapshot_at = self._clock() + self._config.snapshot_interval_ms
        self._transition(_S.RUNNING)

    def _validate_restore_point(self, map_name: str, snapshot_id: int) -> ValidationRecord:
        """Restore step 4 for the record's snapshot, from a durable copy if the store lost it.

        A store that lost the record's snapshot (it was re-created, every member restarted)
        has no validation record for it. With durable storage, the restore point's own copy is
        looked up (a terminal export's, under the export map's name), else the newest periodic
        copy: a copy of that very snapshot is copied back into the record's map, verified,
        and restored, which changes nothing for the processing guarantee. An older copy is
        restored only if the user accepted exactly this pair of ids; otherwise the job stops,
        since its output since the copy would be written again.

        Raises:
            RestoreNeedsConsent: If only an older copy exists and it was not accepted.
            SnapshotCorrupted: If the snapshot, or the copy restored instead, fails validation.
            SnapshotStoreError: If the store or durable storage could not be read.
        """
        durable = self._durable
        if durable is None:
            return validate_snapshot(self._snapshots, map_name, snapshot_id)
        if self._snapshots.get_validation_record(map_name, snapshot_id):
            try:
                return validate_snapshot(self._snapshots, map_name, snapshot_id)
            except SnapshotCorrupted as corrupted:
                # Chunks lost with members (not changed data): a copy of this very snapshot
                # replaces them, verified; without one the loss stays a corruption.
                rescue = self._copy_of(durable, map_name, snapshot_id)
                if not corrupted.members_lost or rescue is None:
                    raise
                _log.warning(
                    "Copying restore point from durable storage map=%s snapshotId=%d "
                    "copySnapshotId=%d older=False problem=%s",
                    map_name,
                    snapshot_id,
                    snapshot_id,
                    corrupted.problem,
                )
                return transfer_snapshot(durable, rescue, self._snapshots, map_name, snapshot_id)
        # A terminal export's durable copy is under the export's own map name.
        copy_map = map_name
        copy_id: int | None = snapshot_id
        if durable.get_validation_record(map_name, snapshot_id) is None:
            copy_map = durable_copy_map_name(self._config.job.uid)
            copy_id = durable.latest_snapshot_id(copy_map)
        if copy_id is None or copy_id > snapshot_id:
            # No copy, or one the record never pointed to: the store's loss stays a corruption.
            return validate_snapshot(self._snapshots, map_name, snapshot_id)
        if copy_id < snapshot_id and self._config.accepted_older_copy != (copy_id, snapshot_id):
            raise RestoreNeedsConsent(map_name, snapshot_id, copy_id, copy_map)
        _log.warning(
            "Copying restore point from durable storage map=%s snapshotId=%d copySnapshotId=%d "
            "older=%s",
            map_name,
            snapshot_id,
            copy_id,
            copy_id < snapshot_id,
        )
        return transfer_snapshot(durable, copy_map, self._snapshots, map_name, copy_id)

    def _copy_of(self, durable: SnapshotStore, map_name: str, snapshot_id: int) -> str | None:
        """The durable map holding a copy of exactly this snapshot, if one does."""
        if durable.get_validation_record(map_name, snapshot_id) is not None:
            return map_name
        copy_map = durable_copy_map_name(self._config.job.uid)
        return copy_map if durable.latest_snapshot_id(copy_map) == snapshot_id else None

    def _validate_initial(self, map_name: str, name: str) -> ValidationRecord:
        """Restore step 4 for the initial snapshot, whose id only its validation records know.

        The name resolves to the export its SnapshotJobExport recorded when the config names
        that identity, else to the highest id (:mod:`snapshot_protocol.export_names`, rule 2).
        An export the store does not hold (the store was re-created since) is looked for in
        durable storage, and if found there copied back into the store, verified chunk by chunk
        and validated again, before the restore reads it like any other.

        Raises:
            SnapshotNotFound: If neither the store nor durable storage holds the export.
            SnapshotCorrupted: If the export, or its durable copy, fails validation.
            SnapshotStoreError: If the store or durable storage could not be read.
        """
        identity = self._config.initial_snapshot_identity
        durable = self._durable
        found = find_export(self._snapshots, map_name, identity)
        if found is None and durable is not None:
            found = find_export(durable, map_name, identity)
            if found is not None:
                _log.info(
                    "Copying initial snapshot from durable storage name=%s map=%s snapshotId=%d",
                    name,
                    map_name,
                    found.snapshot_id,
                )
                transfer_snapshot(durable, map_name, self._snapshots, map_name, found.snapshot_id)
        if found is None:
            raise SnapshotNotFound(
                map_name,
                name,
                durable_searched=durable is not None,
                expected=identity,
                found=others_under(self._snapshots, map_name) if identity is not None else "",
            )
        _log.info(
            "Restoring from initial snapshot name=%s map=%s snapshotId=%d jobUid=%s",
            name,
            map_name,
            found.snapshot_id,
            found.job_uid,
        )
        return validate_snapshot(self._snapshots, map_name, found.snapshot_id)

    def _fail_restore(self, unusable: SnapshotUnusable) -> None:
        _log.error(
            "Restore failed permanently reason=%s snapshotId=%d map=%s problem=%s",
            type(unusable).__name__,
            unusable.snapshot_id,
            unusable.map_name,
            unusable.problem,
        )
        self._transition(_S.FAILED)
        self._execution_end = ExecutionEnd(str(unusable))

    # Snapshot taking procedure

    def take_snapshot(self, export_name: str | None = None) -> SnapshotOutcome:
        """Runs taking steps 1-8 of an automatic snapshot, or of an export-only snapshot if named.

        Ends in PHASE_2_PENDING (call :meth:`finish_snapshot`), in RUNNING if the snapshot
        failed to start, or in RESTART_REQUIRED after taking step 7a (docs/concepts/protocol.md).

        Raises:
            ZombieExecution: A newer execution exists; the state is FENCED.
            IllegalTransition: If not RUNNING.
            ValueError: If ``export_name`` names the export holding the restore point.
        """
        kind = SnapshotKind.AUTOMATIC if export_name is None else SnapshotKind.EXPORT_ONLY
        return self._take(kind, export_name)

    def finish_snapshot(self) -> None:
        """Runs taking steps 9 (2nd phase) and 10, then serves a pending termination request.

        Raises:
            ZombieExecution: Serving a graceful termination found a newer execution.
            IllegalTransition: If not PHASE_2_PENDING.
        """
        self._transition(_S.IN_PHASE_2)
        flight = self._in_flight
        assert flight is not None, "PHASE_2_PENDING always has a snapshot in flight"
        try:
            with self._step(TAKE, 9):
                # Export-only snapshots have no 2nd phase (docs/concepts/protocol.md, taking step
                # 9).
                if not flight.kind.is_export_only:
                    for participant in self._participants:
                        participant.commit_finish(flight.snapshot_id, flight.successful)
        except Exception as error:
            # Phase 2 must ultimately succeed: the record is safe (or the snapshot failed), so
            # restore step 5 commits or rolls back what is left.
            ignored = self._terminating
            self._in_flight = None
            self._terminating = None
            self._stop(
                TerminationMode.RESTART_FORCEFUL,
                f"2nd phase of snapshot {flight.snapshot_id} did not finish: {error}",
                ignored,
                transient=True,
            )
            return
        with self._step(TAKE, 10):
            self._in_flight = None
            if flight.kind.is_terminal:
                self._stop_after_terminal_snapshot(flight)
            else:
                self._next_snapshot_at = self._clock() + self._config.snapshot_interval_ms
                self._transition(_S.RUNNING)
        if self._state is _S.RUNNING and self._pending is not None:
            self._serve_termination()

    # Termination

    def request_termination(self, mode: TerminationMode, export_name: str | None = None) -> None:
        """Asks the execution to stop in ``mode``, exporting the terminal snapshot if named.

        In RUNNING the request is served at once. While a snapshot is in progress it waits for
        that snapshot, including its 2nd phase, and is served by :meth:`finish_snapshot`; if
        taking step 7a restarts the job forcefully instead, the request is ignored (recorded in
        :attr:`ExecutionEnd.ignored_request`). A forceful request replaces a waiting graceful
        one; otherwise the first request wins.

        Raises:
            ZombieExecution: Serving a graceful termination found a newer execution.
            IllegalTransition: If the execution is not running.
            ValueError: If a forceful mode is given an export name, or the name holds the
                restore point.
        """
        request = TerminationRequest(mode, export_name)
        if self._state not in ACCEPTS_TERMINATION_REQUESTS:
            raise IllegalTransition(f"cannot request termination in state {self._state.value}")
        if export_name is not None:
            self._check_export_name(export_name)
        if self._pending is None or (
            self._pending.mode.terminal_snapshot and not mode.terminal_snapshot
        ):
            self._pending = request
        if self._state is _S.RUNNING:
            self._serve_termination()

    def fail(self, cause: str) -> None:
        """Stops the execution because the job failed (not because of a snapshot).

        With ``suspend_on_failure`` this is SUSPEND_FORCEFUL: no snapshot is taken
        (docs/concepts/protocol.md, "Termination modes"); otherwise the state becomes FAILED.

        Raises:
            IllegalTransition: If not RUNNING or PHASE_2_PENDING.
        """
        if self._config.suspend_on_failure:
            self._stop(TerminationMode.SUSPEND_FORCEFUL, cause)
        else:
            self._transition(_S.FAILED)
            self._pending = None
            self._execution_end = ExecutionEnd(cause)

    def observe_members(self, reachable: int) -> bool:
        """Checks the store members the running execution reaches; returns whether it goes on.

        Jet raises a job's quorum as members join and, after a split, runs the job only on a
        side with a quorum (docs/concepts/protocol.md, mechanism M9). The driver reports the members
        its client reaches at every epoch boundary and before every snapshot:

        - with ``split_brain_protection``, below the record's ``quorum_size`` the execution
          stops at once, without a snapshot (RESTART_REQUIRED, :attr:`ExecutionEnd.quorum_lost`);
          otherwise the quorum is raised to more than half of them, in memory, and written
          with the next record write (taking step 2);
        - with or without it, no member at all for ``store_lost_ms`` stops the execution as a
          transient failure: every store operation could only time out.

        Raises:
            IllegalTransition: If not RUNNING.
        """
        if self._state is not _S.RUNNING:
            raise IllegalTransition(f"cannot check the store's members in {self._state.value}")
        record = self._record
        assert record is not None, "RUNNING always has a record"
        now = self._clock()
        if self._config.split_brain_protection:
            if reachable < record.quorum_size:
                _log.error(
                    "Lost the store's quorum reachableMembers=%d quorumSize=%d",
                    reachable,
                    record.quorum_size,
                )
                self._stop(
                    TerminationMode.RESTART_FORCEFUL,
                    f"the driver reaches {reachable} store members, fewer than the quorum of "
                    f"{record.quorum_size}: stopped without a snapshot, to restart once the "
                    "store has a quorum",
                    quorum_lost=True,
                )
                return False
            if reachable > 0:
                self._record = record.with_quorum_size(quorum_of(reachable))
        if reachable > 0:
            self._store_lost_since = None
            return True
        if self._store_lost_since is None:
            self._store_lost_since = now
            _log.warning(
                "Reaches no store member, waiting storeLostMs=%d", self._config.store_lost_ms
            )
        if now - self._store_lost_since < self._config.store_lost_ms:
            return True
        lost_s = (now - self._store_lost_since) // 1000
        self._stop(
            TerminationMode.RESTART_FORCEFUL,
            f"the driver has reached no store member for {lost_s} s "
            "(partitioned from the store, or the store is down): stopped without a snapshot",
            transient=True,
        )
        return False

    # Internals

    def _take(self, kind: SnapshotKind, export_name: str | None) -> SnapshotOutcome:
        if export_name is not None:
            self._check_export_name(export_name)
        self._transition(_S.TAKING_SNAPSHOT)
        assert self._record is not None, "RUNNING always has a record"
        with self._step(TAKE, 1):
            started_at = self._clock()
            record = self._record.start_new_snapshot(started_at).stamped(started_at)
            self._record = record
        snapshot_id = record.ongoing_snapshot_id
        map_name = record.ongoing_snapshot_map_name(self._config.job, export_name)
        # A snapshot builds on the restore point only where it lies: in the chain map of a
        # job with incremental snapshots. Exports always stand alone.
        base = self._kept_in(map_name)
        if kind.is_exported or kind.is_export_only or not self._config.job.incremental:
            base = None

        try:
            with self._step(TAKE, 2):
                # Snapshot data may be written only after the new ongoingSnapshotId is safe
                # (docs/concepts/protocol.md, mechanism M5), so no id ever writes data twice.
                self._records.write_safe(record)
            with self._step(TAKE, 3):
                # Older snapshots' entries only: a newer execution's all have higher ids. In a
                # chain map the restore point's chains stay, being older.
                self._snapshots.discard(map_name, snapshot_id - 1, self._kept(map_name))
                if export_name is not None:
                    # Another job's export under a reused name, whatever its ids: an export
                    # name holds one export (snapshot_protocol.export_names, rule 1).
                    discard_other_jobs_exports(self._snapshots, map_name, self._config.job.uid)
        except ZombieExecution:
            self._transition(_S.FENCED)
            raise
        except (RecordStoreError, SnapshotStoreError) as error:
            # Nothing was written under this id, so there is nothing to commit or roll back.
            outcome = SnapshotOutcome(
                snapshot_id, kind, map_name, export_name, False, f"failed to start: {error}"
            )
            _log.warning("Snapshot failed to start snapshotId=%d error=%s", snapshot_id, error)
            if kind.is_terminal:
                self._terminating = None
                self._stop(
                    TerminationMode.RESTART_FORCEFUL,
                    f"terminal snapshot {snapshot_id} failed to start: {error}",
                    transient=not isinstance(error, IndeterminateRecordWrite),
                )
            else:
                self._next_snapshot_at = self._clock() + self._config.snapshot_interval_ms
                self._transition(_S.RUNNING)
            return outcome

        descriptors: list[ChunkDescriptor] = []
        failure: str | None = None
        try:
            with self._step(TAKE, 4):
                if base is not None:
                    base = self._intact(map_name, base, snapshot_id)
                for participant in self._participants:
                    previous = None
                    if base is not None:
                        previous = SnapshotRef(
                            map_name,
                            base.snapshot_id,
                            chunks_of(base, participant.name),
                            base.shape.state_partitions,
                        )
                    writer = ChunkWriter(
                        self._snapshots, map_name, snapshot_id, participant.name, previous
                    )
                    written = list(
                        participant.save_and_prepare(snapshot_id, writer, kind.is_export_only)
                    )
                    check_descriptors(
                        written,
                        snapshot_id,
                        participant.name,
                        previous.chunks if previous is not None else (),
                    )
                    descriptors.extend(written)
        except Exception as error:
            failure = f"1st phase failed: {error}"

        # The cost of this snapshot: the chunks it wrote, not those it inherited.
        own = [d for d in descriptors if d.key.snapshot_id == snapshot_id]
        num_bytes = sum(descriptor.num_bytes for descriptor in own)
        num_keys = sum(descriptor.num_keys for descriptor in own)
        # Signed with the job's key, if it has one: a restore takes no record it cannot verify.
        validation = sign(
            ValidationRecord(
                snapshot_id=snapshot_id,
                chunks=tuple(descriptors),
                num_bytes=num_bytes,
                num_keys=num_keys,
                creation_time=started_at,
                job_uid=self._config.job.uid,
                shape=self._shape,
            ),
            self._config.snapshot_keys,
        )
        try:
            with self._step(TAKE, 5):
                if failure is None:
                    self._snapshots.put_validation_record(map_name, validation)
        except SnapshotStoreError as error:
            failure = failure or f"writing the validation record failed: {error}"

        successful = failure is None
        with self._step(TAKE, 6):
            now = self._clock()
            record = self._record.snapshot_done(
                kind,
                export_name=export_name,
                num_bytes=num_bytes,
                num_keys=num_keys,
                num_chunks=len(own),
                failure=failure,
                now=now,
                backup_count=self._config.job.backup_count,
                incremental=self._config.job.incremental,
            ).stamped(now)
            self._record = record
            if successful and not kind.is_export_only:
                self._restore_point = (map_name, validation)
        outcome = SnapshotOutcome(
            snapshot_id, kind, map_name, export_name, successful, failure, num_bytes
        )
        self._last_outcome = outcome

        if successful and not kind.is_export_only:
            try:
                with self._step(TAKE, 7):
                    # 7a: the decision moment; only a safe record may lead to phase 2
                    # (docs/concepts/protocol.md, mechanism M2 and invariant I5).
                    self._records.write_safe(record)
            except ZombieExecution:
                self._transition(_S.FENCED)
                raise
            except RecordStoreError as error:
                self._restart_without_phase_2(outcome, error)
                return outcome
        else:
            try:
                with self._step(TAKE, 7):
                    # 7b: a stale stored record is harmless here: the restore point is unchanged
                    # and restore ignores an export marked in progress (docs/concepts/protocol.md,
                    # taking step 7b).
                    self._records.write_standard(record)
            except RecordStoreError as error:
                _log.info("Ignored failed record write snapshotId=%d error=%s", snapshot_id, error)

        with self._step(TAKE, 8):
            self._clear_after_decision(outcome, record)
        self._in_flight = outcome
        self._transition(_S.PHASE_2_PENDING)
        return outcome

    def _restart_without_phase_2(self, outcome: SnapshotOutcome, error: Exception) -> None:
        """Taking step 7a failed: restart forcefully; restore will commit or roll back.

        See docs/concepts/protocol.md, taking step 7a.
        """
        ignored = self._pending or self._terminating
        self._pending = None
        self._terminating = None
        _log.warning(
            "Execution record update not safe, restarting forcefully without the 2nd phase "
            "snapshotId=%d ignoredRequest=%s error=%s",
            outcome.snapshot_id,
            "none" if ignored is None else ignored.mode.name,
            error,
        )
        self._stop(
            TerminationMode.RESTART_FORCEFUL,
            f"execution record update for snapshot {outcome.snapshot_id} was not safe: {error}",
            ignored,
            transient=not isinstance(error, IndeterminateRecordWrite),
        )

    def _clear_after_decision(self, outcome: SnapshotOutcome, record: ExecutionRecord) -> None:
        """Taking step 8: frees memory; a failed discard leaves only stray entries.

        Discards only entries of this snapshot's id or older, so even an execution that was
        replaced meanwhile cannot remove what a newer one wrote (docs/concepts/protocol.md, taking
        step 8 and mechanism M8).
        """
        job = self._config.job
        if not outcome.successful:
            # 8b: the failed snapshot's own entries, and older strays; in a chain map not the
            # restore point's chains.
            map_name: str | None = outcome.map_name
            through = outcome.snapshot_id
        elif outcome.kind in (SnapshotKind.AUTOMATIC, SnapshotKind.TERMINAL):
            # 8a: the new ongoing map holds the previous snapshot, no longer the restore point;
            # a chain map holds the new restore point too, whose chains stay.
            map_name = snapshot_map_name(
                job.uid, record.ongoing_data_map_index(job.incremental), job.backup_count
            )
            through = outcome.snapshot_id - 1
        else:
            map_name = None
        if map_name is None:
            return
        try:
            self._snapshots.discard(map_name, through, self._kept(map_name))
        except SnapshotStoreError as error:
            _log.warning("Could not discard old snapshots map=%s error=%s", map_name, error)

    def _intact(
        self, map_name: str, base: ValidationRecord, snapshot_id: int
    ) -> ValidationRecord | None:
        """Returns ``base`` if every chunk it lists is still in the map, else None.

        A snapshot that inherited a lost chunk would be as unrestorable as its base; written
        in full instead, it is a good restore point again (docs/concepts/protocol.md, "Incremental
        snapshots").
        """
        missing = self._snapshots.missing_chunks(map_name, base.chunk_keys)
        if not missing:
            return base
        _log.warning(
            "Restore point lost chunks, snapshot written in full snapshotId=%d base=%d "
            "missing=%d example=%s",
            snapshot_id,
            base.snapshot_id,
            len(missing),
            sorted(missing)[0],
        )
        return None

    def _kept_in(self, map_name: str) -> ValidationRecord | None:
        """The restore point's validation record if it lies in ``map_name``, else None."""
        if self._restore_point is None or self._restore_point[0] != map_name:
            return None
        return self._restore_point[1]

    def _kept(self, map_name: str) -> tuple[ValidationRecord, ...]:
        """What a discard of ``map_name`` keeps: the restore point, if it lies there."""
        kept = self._kept_in(map_name)
        return () if kept is None else (kept,)

    def _serve_termination(self) -> None:
        request = self._pending
        assert request is not None
        self._pending = None
        if not request.mode.terminal_snapshot:
            self._stop(request.mode, f"{request.mode.name} requested")
            return
        self._terminating = request
        self._take(SnapshotKind.terminal(request.export_name), request.export_name)
        if self._state is _S.PHASE_2_PENDING:
            self.finish_snapshot()

    def _stop_after_terminal_snapshot(self, flight: SnapshotOutcome) -> None:
        request = self._terminating
        assert request is not None, "a terminal snapshot is taken for a termination request"
        self._terminating = None
        if flight.successful:
            self._stop(
                request.mode, f"{request.mode.name} after terminal snapshot {flight.snapshot_id}"
            )
        else:
            # Graceful modes promise a clean state; a failed terminal snapshot cannot give it,
            # so the job restarts and the user repeats the request if still wanted.
            self._stop(
                TerminationMode.RESTART_FORCEFUL,
                f"terminal snapshot {flight.snapshot_id} failed ({flight.failure}); "
                f"restarting instead of {request.mode.name}",
                request,
                transient=True,
            )

    def _stop(
        self,
        mode: TerminationMode,
        reason: str,
        ignored_request: TerminationRequest | None = None,
        *,
        transient: bool = False,
        quorum_lost: bool = False,
    ) -> None:
        target = STOPPED_BY_ACTION[mode.action_after]
        self._check_transition(target)
        if mode.action_after is ActionAfter.SUSPEND and self._record is not None:
            self._record = self._record.suspended_because(reason).stamped(self._clock())
            self._records.write_standard(self._record)
        self._pending = None
        self._execution_end = ExecutionEnd(reason, mode, ignored_request, transient, quorum_lost)
        self._transition(target)

    def _check_export_name(self, export_name: str) -> None:
        record = self._record
        if record is not None and record.exported_snapshot_name == export_name:
            # Taking step 3 clears the export map, which here holds the restore point.
            raise ValueError(
                f"export '{export_name}' holds the job's restore point; export under another name"
            )

    def _check_transition(self, target: CoordinatorState) -> None:
        if target not in TRANSITIONS[self._state]:
            raise IllegalTransition(f"{self._state.value} -> {target.value} is not allowed")

    def _transition(self, target: CoordinatorState) -> None:
        self._check_transition(target)
        self._state = target

    @contextmanager
    def _step(self, procedure: str, step: int) -> Iterator[None]:
        self._failpoints.hit(failpoint_name(procedure, "before", step))
        yield
        self._failpoints.hit(failpoint_name(procedure, "after", step))
