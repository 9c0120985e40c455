"""The driver's exit codes, in one place.

The operator learns how an execution ended from the driver container's exit code, so the
codes are an API. The codes the operator acts on are those of
``snapshot_operator.api.driver.DriverExit`` (0, 64, 65, 75, 77, 143) and are repeated here with
the same values. FENCED is never a failure: a newer execution owns the job. INTERRUPTED (a
SIGTERM, e.g. a node drain) restarts at once from the last snapshot, like RESTART_FORCEFUL, and
is not counted as a failure. The others tell a person (or a test) more precisely why a driver
stopped, and the operator treats them as failures.

====  ==================  =================================================================
code  name                meaning
====  ==================  =================================================================
0     COMPLETED           every source is exhausted and the last snapshot is committed
1     FAILED              the pipeline failed (user code, Spark, a sink); the operator
                          restarts it per ``restartPolicy``
2     BAD_INPUT           bad command line, pipeline module or SnapshotJob spec; no restart
                          helps
64    TERMINATED          a termination request (``status.termination``) was served: the
                          operator carries out its action (restart, suspend or cancel)
65    SNAPSHOT_CORRUPTED  restore found the restore point corrupted; the job fails for good
75    RESTART_FORCEFUL    the record write after a snapshot's decision was indeterminate
                          (docs/protocol.md, taking step 7a), or restore could not
                          finish: restart now
77    FENCED              a newer execution owns the job: this driver was a zombie
86    FAILPOINT_CRASH     a failpoint armed with ``crash`` (``SJ_FAILPOINTS``) fired
143   INTERRUPTED         SIGTERM or SIGINT: the current step finished, no snapshot taken
====  ==================  =================================================================
"""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    """How a driver process ended; see the module docstring for the table."""

    COMPLETED = 0
    FAILED = 1
    BAD_INPUT = 2
    TERMINATED = 64
    SNAPSHOT_CORRUPTED = 65
    RESTART_FORCEFUL = 75
    FENCED = 77
    FAILPOINT_CRASH = 86
    INTERRUPTED = 143
