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

DRIVER_SNAPSHOT_MAX_BYTES_CONF = "spark.snapshotjob.driverSnapshotMaxBytes"
"""A keyed state the executors hold in at most this many bytes is snapshotted by the driver.

The driver then collects the state through the JVM's Arrow conversion and puts its chunks
itself: one Spark job without Python workers, where writing from the executors costs a job
whose tasks each run in a Python worker. The chunks are the same either way. Larger states
are always written by the executors, so the driver never holds more than this. ``0``: the
executors always write.
"""

DRIVER_SNAPSHOT_MAX_BYTES_DEFAULT = 1024 * 1024
"""The default of :data:`DRIVER_SNAPSHOT_MAX_BYTES_CONF`: the size up to which a restore also
reads a state through the driver."""

JVM_CHUNKS_CONF = "spark.snapshotjob.jvmChunks"
"""Whether executors write and read a keyed state's chunks in their JVM (``true``, the default).

The rows then go from Spark's internal rows to Arrow IPC chunks and back inside the JVM, with
the Hazelcast Java client, instead of crossing to a Python worker as Arrow and going through
the Python client: the same chunks, keys and checksums either way, so each side restores what
the other wrote. ``false`` keeps the Python workers, as does a session without the jars
(``hack/install.sh`` builds them from ``jvm/``).
"""
