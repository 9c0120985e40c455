"""The exceptions of the snapshot protocol.

The protocol (``docs/protocol.md``, after Jet's "non-corruptible snapshots" design) decides
every step by *how* a store call failed, so the ports report failures through these types rather
than through library exceptions: a determinate failure (the write was not applied) is handled
differently from an indeterminate result (the write may or may not have been applied), and both
differently from being fenced off by a newer execution.

Names of the conditions (``ZombieExecution``, ``SnapshotCorrupted``, ...) follow the
protocol's vocabulary rather than an ``Error`` suffix, hence the ``N818`` exemptions.
"""

from __future__ import annotations


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
    (docs/protocol.md, "Safe, maybe safe, successful").
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
    record puts (docs/protocol.md, taking steps 4 and 5): the snapshot fails.
    """


class SnapshotCorrupted(ProtocolError):  # noqa: N818
    """Strict validation of the snapshot chosen for restore failed (docs/protocol.md, restore
    step 4).

    The job fails permanently: restoring from an incomplete snapshot would break the
    processing guarantee, and there is no older snapshot that is still consistent with the
    external transactions.

    Attributes:
        map_name: The snapshot map that was validated.
        snapshot_id: The snapshot the execution record points to.
        problem: What is missing or wrong.
    """

    def __init__(self, map_name: str, snapshot_id: int, problem: str) -> None:
        self.map_name = map_name
        self.snapshot_id = snapshot_id
        self.problem = problem
        super().__init__(
            f"Snapshot {snapshot_id} in map '{map_name}' is corrupted: {problem}. "
            "More snapshot store members probably failed at once than the map has backups. "
            "The job cannot be restored from it without breaking its processing guarantee, so it "
            "fails permanently. To continue, start the job from an exported snapshot by setting "
            "spec.initialSnapshotName (the job's own snapshot is unusable)."
        )
