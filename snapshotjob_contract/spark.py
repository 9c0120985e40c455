"""Spark settings the operator and the driver both know: one definition for both sides."""

from __future__ import annotations

STATE_REPLICAS_CONF = "spark.snapshotjob.stateReplicas"
"""How many executors keep each block of the materialised state and sink buffers (1 or 2).

The operator sets 2 when a job has two executors or more (``spec.spark.conf`` may override
it): losing one executor then costs the re-run of its tasks, not a restart of the job from
its last snapshot. It doubles the memory the state takes in the executors.
"""

PROACTIVE_REPLICATION_CONF = "spark.storage.replication.proactive"
"""Spark's own setting: re-replicate the blocks of a lost executor, so a second loss later
finds a copy again."""
