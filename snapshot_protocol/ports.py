"""The ports through which the protocol core talks to the world.

The core imports no I/O library; the Kubernetes record store, the Hazelcast snapshot store and
the Spark runtime's participants implement these protocols. Each port reports failures only
through the exceptions in :mod:`snapshot_protocol.errors`, because the protocol's
decisions (``docs/concepts/protocol.md``) depend on the kind of failure (determinate, indeterminate,
fenced).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from snapshot_protocol.chunks import (
    ChunkDescriptor,
    ChunkKey,
    ChunkWriter,
    SnapshotRef,
    ValidationRecord,
)
from snapshotjob_contract.record import ExecutionRecord

Clock = Callable[[], int]
"""Returns the current time in epoch milliseconds; injected so the core never reads the time."""


class RecordStore(Protocol):
    """Where the execution record is stored (the SnapshotJob status, in etcd).

    An instance belongs to one execution of the job and fences by its execution id: once a
    newer execution exists, its writes are refused.
    """

    def read(self) -> ExecutionRecord:
        """Returns the stored record (a new job's record if none is stored yet).

        Raises:
            RecordStoreError: If the record could not be read.
        """
        ...

    def write_safe(self, record: ExecutionRecord) -> None:
        """Writes the record "safely" (Jet's writeJobExecutionRecordSafe; docs/concepts/protocol.md,
        "Safe and standard writes").

        Repeats the write (re-reading after conflicts and after errors that leave the outcome
        open) until it knows whether the write took place. Returning means the record is safe.

        Raises:
            IndeterminateRecordWrite: If it could not determine whether the write was applied.
            RecordStoreError: If the write was determinately not applied.
            ZombieExecution: If a newer execution of the job exists.
        """
        ...

    def write_standard(self, record: ExecutionRecord) -> None:
        """Writes the record on a best-effort basis (Jet's writeJobExecutionRecord).

        Never raises: used where the protocol ignores the outcome (docs/concepts/protocol.md, taking
        step 7b).
        """
        ...


class ChunkReader(Protocol):
    """Reads chunks of a validated snapshot (restore step 5).

    Participants read through :meth:`SnapshotRef.read`, which verifies every chunk against the
    checksum in the validation record.
    """

    def read_chunk(self, map_name: str, key: ChunkKey) -> bytes:
        """Returns one chunk's value, unverified.

        Raises:
            SnapshotStoreError: If the chunk could not be read or is absent.
        """
        ...


class StoreMembership(Protocol):
    """What the driver can tell about the store's members: for split-brain protection.

    Kept apart from :class:`SnapshotStore` since it is a local view (the client's member list
    and connections), never a store operation: it answers at once even when every member is
    unreachable, which is when it matters.
    """

    def reachable_members(self) -> int:
        """Returns how many members of the store's member list the client is connected to.

        0 when the client has no connection at all. During a partition this is the side the
        driver is on, once the members have noticed the split (their heartbeat timeout) and
        the client its lost connections (its own).
        """
        ...


class SnapshotStore(ChunkReader, Protocol):
    """The snapshot data maps (Hazelcast IMaps that fail on indeterminate operation state)."""

    def discard(
        self, map_name: str, through_snapshot_id: int, keep: Sequence[ValidationRecord] = ()
    ) -> None:
        """Removes the entries of snapshots ``<= through_snapshot_id`` from a map, except
        the snapshots in ``keep``: their validation records and every chunk they list
        (:func:`~snapshot_protocol.chunks.discarded_keys`).

        Never a whole-map clear: an execution replaced by a newer one may still get here, and
        everything the newer execution writes or restores has a higher snapshot id or is
        listed by the restore point the replaced one keeps (docs/concepts/protocol.md, mechanism
        M8). Not fail-on-indeterminate: entries may remain or reappear as strays, which no restore
        reads.

        Raises:
            SnapshotStoreError: If the removal failed.
        """
        ...

    def discard_snapshots(self, map_name: str, snapshot_ids: Sequence[int]) -> None:
        """Removes every entry of the named snapshots (validation records and chunks).

        Only for export maps, whose snapshots stand alone (no chunk of one is listed by
        another): the snapshots another job wrote under a reused export name
        (:mod:`snapshot_protocol.export_names`). Not fail-on-indeterminate.

        Raises:
            SnapshotStoreError: If the removal failed.
        """
        ...

    def put_chunk(self, map_name: str, key: ChunkKey, data: bytes) -> None:
        """Stores one chunk with a single-key put.

        Raises:
            IndeterminateChunkWrite: If the put may not have reached all sync backups.
            SnapshotStoreError: If the put failed.
        """
        ...

    def put_chunks(self, map_name: str, chunks: Sequence[tuple[ChunkKey, bytes]]) -> None:
        """Stores several chunks, each with its own single-key put, possibly in parallel.

        Every put has finished (stored or failed) when this returns or raises, so no write of
        a failed snapshot is still in flight when the coordinator decides its fate.

        Raises:
            IndeterminateChunkWrite: If any put may not have reached all sync backups.
            SnapshotStoreError: If any put failed.
        """
        ...

    def put_validation_record(self, map_name: str, record: ValidationRecord) -> None:
        """Stores a snapshot's validation record under its own key (``<snapshotId>/...``) with a
        single-key put.

        Raises:
            IndeterminateChunkWrite: If the put may not have reached all sync backups.
            SnapshotStoreError: If the put failed.
        """
        ...

    def get_validation_record(self, map_name: str, snapshot_id: int) -> ValidationRecord | None:
        """Returns the validation record of snapshot ``snapshot_id``, or None if there is none.

        Raises:
            UnreadableFormat: If the map holds the snapshot's record (or, for format 1, the map's
                only record) in a format this code does not read.
            ValueError: If the record is malformed.
            SnapshotStoreError: If the map could not be read.
        """
        ...

    def latest_snapshot_id(self, map_name: str) -> int | None:
        """Returns the highest snapshot id with a validation record in the map, or None.

        Used for an exported snapshot named by ``initialSnapshotName``, whose id no execution
        record holds: the export's newest writer has the highest id.

        Raises:
            SnapshotStoreError: If the map could not be read.
        """
        ...

    def snapshot_ids(self, map_name: str) -> list[int]:
        """Returns every snapshot id with a validation record in the map, ascending.

        Raises:
            SnapshotStoreError: If the map could not be read.
        """
        ...

    def missing_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[ChunkKey]:
        """Returns those of ``keys`` that are not in the map.

        Raises:
            SnapshotStoreError: If the map could not be read.
        """
        ...


class Participant(Protocol):
    """One party of the two-phase snapshot: a source, a keyed state, a transactional sink.

    Driver-side participants (source offsets, sink transaction ids) write their chunks through
    the :class:`ChunkWriter` they are handed; executor-side ones (state partitions written by
    Spark tasks in parallel) write from the executors into ``writer.map_name`` under keys made
    like ``writer.key(partition, seq)``. Either way, phase 1 returns the descriptors of every
    chunk written, and the coordinator lists them in the validation record.
    """

    @property
    def name(self) -> str:
        """The operator name used in chunk keys; unique within the job, without ``/``."""
        ...

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """1st phase (Jet's saveSnapshot + snapshotCommitPrepare, taking step 4).

        Saves the state as chunks and, unless ``export_only``, prepares the transactions of
        the output since the previous snapshot and saves their ids in the chunks. Export-only
        snapshots only save state (docs/concepts/protocol.md, "Snapshot kinds").

        Returns:
            Descriptors of all chunks written.

        Raises:
            Exception: Any failure fails the snapshot.
        """
        ...

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """2nd phase (Jet's snapshotCommitFinish, taking step 9).

        Commits the transactions prepared for ``snapshot_id`` if ``success``, else rolls them
        back; must be idempotent and a no-op for a snapshot that prepared nothing. On success
        it also rolls back the job's transactions still prepared under lower ids: the record
        is safe at ``snapshot_id``, so no restore will commit them, and only a replaced
        execution fenced at taking step 7a leaves such (mechanism M8).

        Raises:
            Exception: If it cannot finish now; the job restarts, and restore step 5 then
                commits or rolls back those transactions.
        """
        ...

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        """Restores the participant (restore step 5), or starts it empty if ``snapshot`` is None.

        Commits the transactions named in the snapshot "just in case" and rolls back every
        other prepared transaction of this job (with no snapshot: all of them) of snapshots up
        to ``through_snapshot_id``, so the job state and external resources agree again.
        Transactions of higher ids belong to a newer execution (this one may have been replaced
        while it restored) and are left alone (docs/concepts/protocol.md, mechanism M8).

        Args:
            snapshot: The restore point's chunks of this participant, or None.
            reader: Reads the chunks (through :meth:`SnapshotRef.read`).
            through_snapshot_id: The record's ``ongoingSnapshotId`` after restore step 2: the
                highest id this execution's predecessors could have prepared under.

        Raises:
            Exception: Any failure makes the execution restart.
        """
        ...
