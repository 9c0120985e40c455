"""How the operator starts a driver: its command and the environment it sets.

The operator writes these into the driver Pod (``snapshot_operator.manifests``) and the runtime
reads them (``spark_runtime``); both import the names from here so neither can drift.
"""

from __future__ import annotations

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
