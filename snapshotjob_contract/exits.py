"""How a driver tells the operator the way its execution ended: the exit codes.

The operator learns how an execution ended from the driver container's exit code (and the
record the driver left in the status), so the codes are part of the API, written by the runtime
(``spark_runtime``) and read by the operator (``snapshot_operator.reconcile.exits``). Codes follow
sysexits(3) where one fits. Any code not listed here (e.g. 137 after a SIGKILL) is a failure.
"""

from __future__ import annotations

import enum

DRIVER_GRACE_SECONDS = 30
"""The driver Pod's ``terminationGracePeriodSeconds``: after SIGTERM the kubelet waits this long
before SIGKILL. The operator owns the field (a pod template cannot change it), so the driver
can count on it."""

EXIT_REPORT_AFTER_SIGNAL_SECONDS = 20
"""A driver whose current step has not ended this long after SIGTERM reports
:attr:`DriverExit.INTERRUPTED` anyway, while it still can: an evicted Pod is gone with its exit
code, and a driver the kubelet kills before it reports is taken for a lost one (a failure).
Leaves ``DRIVER_GRACE_SECONDS`` minus this for the report's own retries."""


ENDED_AS_ASKED_PREFIX = "Ended as asked: "
"""How the termination message of a driver that served ``status.termination`` begins, e.g.
``Ended as asked: mode=SUSPEND_GRACEFUL snapshotId=12``. Its process exits 0
(:func:`process_exit_status`), so this, or ``status.driverExit`` saying 64, is what tells the
operator that the driver ended as asked rather than completed."""


class DriverExit(enum.IntEnum):
    """Every exit code a driver uses on purpose, with its meaning for the operator."""

    COMPLETED = 0
    """The pipeline finished: its sources are exhausted and the last snapshot is committed."""
    FAILED = 1
    """The pipeline failed (user code, Spark, a sink): the operator restarts it as
    ``restartPolicy`` says, counting a failure."""
    BAD_INPUT = 2
    """The pipeline module or the spec cannot be run (an import error, a missing setting): no
    restart helps, so the job fails until its spec changes."""
    TERMINATED = 64
    """The driver served the termination request in ``status.termination`` and stopped; the
    operator carries out the request's action (restart, suspend or cancel). The driver
    reports 64 in ``status.driverExit``, but its process exits 0 (the Pod shows
    ``Completed``, not ``Error``) and its termination message starts ``Ended as asked:``; the
    operator reads an exit 0 with either as 64. Drivers of earlier releases exit 64, which
    still means the same."""
    SNAPSHOT_CORRUPTED = 65
    """Restore found the restore point inconsistent (docs/concepts/protocol.md, restore step 4): the
    job fails permanently. sysexits' EX_DATAERR."""
    SNAPSHOT_NOT_FOUND = 66
    """The snapshot to restore does not exist: ``spec.initialSnapshotName`` names no export (or
    one that holds no complete snapshot). The job fails permanently until the spec names an
    existing export. sysexits' EX_NOINPUT."""
    RESTORE_NEEDS_CONSENT = 68
    """The store lost the restore point and durable storage has only an older copy, whose
    restore would write committed output again: the job stops until ``spec.durableRestore``
    accepts exactly that pair of snapshot ids; the message names both."""
    TRANSIENT_FAILURE = 69
    """Something the execution needs was unavailable (the snapshot store during a restore, an
    external system during a snapshot's 2nd phase): the operator restarts it after a backoff,
    counting a failure, so a lasting outage ends in ``maxRestarts``. sysexits'
    EX_UNAVAILABLE."""
    STALLED = 70
    """An epoch or a sink call ran longer than its timeout (``spec.stallDetection``): the
    driver ended the execution without finishing the step; the operator restarts it from the
    last snapshot after a backoff, counting a failure."""
    SOURCE_DATA_LOST = 71
    """A Kafka source's restored offset is below the partition's earliest retained offset
    (retention deleted records the job never read), and ``spec.expiredOffsets`` is Fail: the
    job fails permanently until the spec changes; the message names the partitions and how
    many records are gone."""
    RESTART_FORCEFUL = 75
    """A write of the execution record was indeterminate (docs/concepts/protocol.md, taking step 7a,
    or restore step 2): the job must restart and restore at once, since only a restore can commit
    or roll back what the snapshot prepared. Not a failure; any pending graceful request is
    dropped. sysexits' EX_TEMPFAIL."""
    FENCED = 77
    """A newer execution owns the job (``status.execution.id`` is not the driver's): the driver
    was a zombie and stopped without touching the record. Not a failure of the current
    execution, and never a reason to start one: the operator waits for the status to show the
    execution that fenced it."""
    SNAPSHOT_INCOMPATIBLE = 78
    """The restore point was written by another snapshot format or by a pipeline whose state
    differs (other operators or state schemas), checked before any state is loaded: the job
    fails permanently, the message names both sides. sysexits' EX_CONFIG."""
    QUORUM_LOST = 79
    """With split-brain protection, the store members the driver could reach fell below the
    execution record's ``quorumSize`` (a network partition left it on the minority side, or
    cut it off from every member): it stopped at once, without a snapshot. Not a failure: the
    operator starts a new execution, from the last snapshot, once the store has a quorum
    again (counted as a forced restart, so a driver that keeps losing the quorum ends in
    the restart policy)."""
    FAILPOINT_CRASH = 86
    """A failpoint armed with ``crash`` (``SJ_FAILPOINTS``) fired: a test's injected crash, a
    failure like any other for the operator."""
    INTERRUPTED = 143
    """The driver got SIGTERM or SIGINT (node drain, eviction, a deleted Pod), finished its
    current step and stopped without a snapshot: the job restarts at once from its last
    snapshot, not counted as a failure and without backoff."""

    @classmethod
    def of(cls, exit_code: int) -> DriverExit | None:
        """Returns the meaning of ``exit_code``, or None if no driver exits with it on purpose."""
        try:
            return cls(exit_code)
        except ValueError:
            return None


def process_exit_status(code: DriverExit) -> int:
    """Returns the status the driver's process exits with to mean ``code``.

    The code itself, but 0 for :attr:`DriverExit.TERMINATED`: a driver that stopped as asked
    did not fail, and Kubernetes shows any other status as ``Error``. The meaning still
    reaches the operator, through ``status.driverExit`` (64) and the termination message
    (:data:`ENDED_AS_ASKED_PREFIX`).
    """
    return 0 if code == DriverExit.TERMINATED else int(code)
