"""The contract between the operator and the driver Pod it starts: exit codes.

The operator learns how an execution ended only from the driver container's exit code (and
the record the driver left in the status), so the codes are part of the API, shared by the
runtime and the operator. Codes follow sysexits(3) where one fits.
"""

from __future__ import annotations

import enum


class DriverExit(enum.IntEnum):
    """What the driver's exit code tells the operator; any other code is a failure."""

    COMPLETED = 0
    """The pipeline finished: its sources are exhausted and the last snapshot is committed."""
    BAD_INPUT = 2
    """The pipeline module or the spec cannot be run (an import error, a missing setting): no
    restart helps, so the job fails until its spec changes."""
    TERMINATED = 64
    """The driver served the termination request in ``status.termination`` and stopped; the
    operator carries out the request's action (restart, suspend or cancel)."""
    SNAPSHOT_CORRUPTED = 65
    """Restore found the restore point inconsistent, so the job fails permanently
    (docs/protocol.md, restore step 4); sysexits' EX_DATAERR."""
    RESTART_FORCEFUL = 75
    """A record write was indeterminate after a snapshot's decision (docs/protocol.md, taking
    step 7a): the job must restart and restore at once. Not a failure; any pending graceful
    request is dropped. sysexits' EX_TEMPFAIL."""
    FENCED = 77
    """A newer execution owns the job (``status.execution.id`` is not the driver's): the driver
    was a zombie and stopped without touching the record. Not a failure of the current
    execution, and never a reason to start one: the operator waits for the status to show the
    execution that fenced it."""
    INTERRUPTED = 143
    """The driver got SIGTERM or SIGINT (node drain, eviction, a deleted Pod), finished its
    current step and stopped without a snapshot: the job restarts at once from its last
    snapshot, not counted as a failure and without backoff."""

    @classmethod
    def of(cls, exit_code: int) -> DriverExit | None:
        """Returns the meaning of ``exit_code``, or None if it is a plain failure."""
        try:
            return cls(exit_code)
        except ValueError:
            return None


DRIVER_COMMAND = ("python", "-m", "spark_runtime", "run", "--kubernetes")
"""The driver container's command; the runtime reads its SnapshotJob from the API server."""

ENV_NAMESPACE = "SJ_NAMESPACE"
"""The SnapshotJob's namespace."""
ENV_JOB_NAME = "SJ_JOB_NAME"
"""The SnapshotJob's name."""
ENV_EXECUTION_ID = "SJ_EXECUTION_ID"
"""The execution's fencing token, as in ``status.execution.id``."""
ENV_HAZELCAST_ADDRESS = "SJ_HAZELCAST_ADDRESS"
"""Members of the installation's Hazelcast cluster, for jobs without ``spec.hazelcast.address``."""
ENV_HAZELCAST_CLUSTER = "SJ_HAZELCAST_CLUSTER"
"""Cluster name of the installation's Hazelcast cluster."""
ENV_INITIAL_SNAPSHOT_NAME = "SJ_INITIAL_SNAPSHOT_NAME"
"""Set only when the execution starts from ``spec.initialSnapshotName``."""
