"""The exceptions of the snapshot protocol.

The protocol (``docs/concepts/protocol.md``, after Jet's "non-corruptible snapshots" design) decides
every step by *how* a store call failed, so the ports report failures through these types rather
than through library exceptions: a determinate failure (the write was not applied) is handled
differently from an indeterminate result (the write may or may not have been applied), and both
differently from being fenced off by a newer execution.

Names of the conditions (``ZombieExecution``, ``SnapshotCorrupted``, ...) follow the
protocol's vocabulary rather than an ``Error`` suffix, hence the ``N818`` exemptions.
"""

from __future__ import annotations

import re


class ProtocolError(Exception):
    """Base class of the errors the protocol core raises or expects from its ports."""


class IllegalTransition(ProtocolError):  # noqa: N818
    """An operation was attempted in a coordinator state that does not allow it.

    The coordinator's state is left unchanged, like h11 does for protocol violations.
    """


class RecordStoreError(ProtocolError):
    """A call to the execution record store failed and a write, if any, was not applied."""


class IndeterminateRecordWrite(RecordStoreError):  # noqa: N818
    """A safe write of the execution record could not be determined to have succeeded or not.

    The write may or may not have been applied: after this the record is only "maybe safe"
    (docs/concepts/protocol.md, "Safe, maybe safe, successful").
    """


class ZombieExecution(ProtocolError):  # noqa: N818
    """The record store refused a write because a newer execution of the job exists.

    The execution that gets this must stop at once and touch nothing else: the newer execution
    owns the record, the snapshot maps and the external transactions.
    """


class SnapshotStoreError(ProtocolError):
    """A call to the snapshot store failed (for writes: the entry was not stored)."""


class IndeterminateChunkWrite(SnapshotStoreError):  # noqa: N818
    """A single-key put into a snapshot map may or may not have been stored on all backups.

    This is Hazelcast's ``IndeterminateOperationStateException`` for chunk and validation
    record puts (docs/concepts/protocol.md, taking steps 4 and 5): the snapshot fails.
    """


class SnapshotUnusable(ProtocolError):  # noqa: N818
    """The snapshot chosen for restore cannot be restored, and never will be: a permanent failure.

    Raised by restore steps 4 and 5 (docs/concepts/protocol.md, "Restoring"); the job fails with the
    subclass's reason instead of restarting, since every restart would fail the same way.

    Attributes:
        map_name: The snapshot map.
        snapshot_id: The snapshot the execution record points to (-1 if unknown).
        problem: What is wrong, naming the chunk or the differing sides where there are some.
    """

    def __init__(self, map_name: str, snapshot_id: int, problem: str, message: str) -> None:
        self.map_name = map_name
        self.snapshot_id = snapshot_id
        self.problem = problem
        super().__init__(message)


class SnapshotCorrupted(SnapshotUnusable):
    """Strict validation of the snapshot chosen for restore failed (docs/concepts/protocol.md,
    restore step 4), or a chunk read for it does not match its checksum (restore step 5).

    The job fails permanently: restoring from an incomplete or altered snapshot would break the
    processing guarantee, and there is no older snapshot that is still consistent with the
    external transactions.

    Args:
        map_name: The snapshot map.
        snapshot_id: The snapshot the execution record points to.
        problem: What is missing or wrong; names the chunk where one is at fault.
        members_lost: Whether entries are missing, which points at lost store members.
    """

    def __init__(
        self, map_name: str, snapshot_id: int, problem: str, *, members_lost: bool = False
    ) -> None:
        cause = (
            "More snapshot store members probably failed at once than the map has backups"
            if members_lost
            else "Its data changed after it was written"
        )
        super().__init__(
            map_name,
            snapshot_id,
            problem,
            f"Snapshot {snapshot_id} in map '{map_name}' is corrupted: {problem}. {cause}. "
            "The job cannot be restored from it without breaking its processing guarantee, so "
            "it fails permanently. To continue, create a SnapshotJob with "
            "spec.initialSnapshotName set to an exported snapshot",
        )
        self.members_lost = members_lost

    @classmethod
    def find_in(cls, text: str) -> SnapshotCorrupted | None:
        """Finds a SnapshotCorrupted raised in another process in its error text.

        Spark hands the driver only the text of an exception raised in a task (restore step 5
        reads large state in executors), so the driver recovers the failure from its message.
        """
        match = _CORRUPTED.search(text)
        if match is None:
            return None
        return cls(match["map"], int(match["id"]), match["problem"])


class SnapshotIncompatible(SnapshotUnusable):
    """The snapshot is intact but this code or pipeline cannot restore it (restore step 4).

    Args:
        map_name: The snapshot map.
        snapshot_id: The snapshot the execution record points to.
        problem: What differs, naming both sides.
        remedy: What the user can do.
    """

    def __init__(self, map_name: str, snapshot_id: int, problem: str, remedy: str) -> None:
        super().__init__(
            map_name,
            snapshot_id,
            problem,
            f"Snapshot {snapshot_id} in map '{map_name}' cannot be restored by this job: "
            f"{problem}. {remedy}",
        )


class RestoreNeedsConsent(SnapshotUnusable):
    """The store lost the restore point and durable storage has only an older copy of it.

    Restoring the older copy would process again the input after it, and write again the
    output committed since: the job stops until the user accepts exactly that, by naming both
    snapshot ids in ``spec.durableRestore``.

    Args:
        map_name: The restore point's map in the store.
        snapshot_id: The restore point (the execution record's snapshot).
        copy_snapshot_id: The newest durable copy's snapshot.
        copy_map: Where the copy is in durable storage.
    """

    def __init__(
        self, map_name: str, snapshot_id: int, copy_snapshot_id: int, copy_map: str
    ) -> None:
        self.copy_snapshot_id = copy_snapshot_id
        super().__init__(
            map_name,
            snapshot_id,
            f"the store lost snapshot {snapshot_id}; the newest durable copy is of snapshot "
            f"{copy_snapshot_id}",
            f"The store lost the restore point, snapshot {snapshot_id} in map '{map_name}', and "
            f"the newest durable copy ({copy_map}) is of the older snapshot {copy_snapshot_id}. "
            f"Restoring it processes again the input after snapshot {copy_snapshot_id} and "
            f"writes again the output committed by snapshots {copy_snapshot_id + 1} to "
            f"{snapshot_id}. To accept that, set spec.durableRestore to acceptSnapshotId: "
            f"{copy_snapshot_id}, insteadOfSnapshotId: {snapshot_id}",
        )


class SnapshotNotFound(SnapshotUnusable):
    """The exported snapshot named by ``initialSnapshotName`` does not exist (restore step 4).

    Args:
        map_name: The export map looked in.
        name: The export name.
        durable_searched: Whether durable storage was searched too.
        expected: The export the name must resolve to (its SnapshotJobExport's identity), if
            known; its ``str`` names it.
        found: What the map holds instead, when ``expected`` is not there.
    """

    def __init__(
        self,
        map_name: str,
        name: str,
        *,
        durable_searched: bool = False,
        expected: object | None = None,
        found: str = "",
    ) -> None:
        where = " in the store or in durable storage" if durable_searched else ""
        if expected is None:
            problem = f"no validation record in map '{map_name}'"
            detail = f"map '{map_name}' holds no complete snapshot{where}"
        else:
            problem = f"no validation record of {expected} in map '{map_name}'"
            instead = f"; the name holds {found} instead" if found else ""
            detail = (
                f"its SnapshotJobExport completed as {expected}, which map '{map_name}' does "
                f"not hold{where}{instead}. The name was reused, or the export's data was "
                "disposed of; another export's data is never restored in its place"
            )
        super().__init__(
            map_name,
            -1,
            problem,
            f"The initial snapshot '{name}' does not exist: {detail}. Set "
            "spec.initialSnapshotName to an export listed in status.exportedSnapshots of a "
            "SnapshotJob in this namespace",
        )


_CORRUPTED = re.compile(
    r"Snapshot (?P<id>\d+) in map '(?P<map>[^']+)' is corrupted: (?P<problem>.+?)\. "
    r"(More snapshot store members|Its data changed)"
)
