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
ENV_INITIAL_SNAPSHOT_JOB_UID = "SJ_INITIAL_SNAPSHOT_JOB_UID"
"""With ``SJ_INITIAL_SNAPSHOT_ID``: the export the name must resolve to, as its
SnapshotJobExport recorded it when it completed (the uid of the job that took it); unset when no
completed SnapshotJobExport has the name, and the name's highest snapshot id is taken."""
ENV_INITIAL_SNAPSHOT_ID = "SJ_INITIAL_SNAPSHOT_ID"
"""The snapshot id of that export (see ``SJ_INITIAL_SNAPSHOT_JOB_UID``)."""
ENV_SNAPSHOT_KEY_IDS = "SJ_SNAPSHOT_KEY_IDS"
"""``spec.snapshotSigning``'s key ids, comma-separated, the signing key first; unset for a
job that signs nothing."""
ENV_SNAPSHOT_KEY_PREFIX = "SJ_SNAPSHOT_KEY_"
"""``SJ_SNAPSHOT_KEY_<n>``: the key of the n-th id of ``SJ_SNAPSHOT_KEY_IDS``, from the Secret."""
ENV_SNAPSHOT_ACCEPT_UNSIGNED = "SJ_SNAPSHOT_ACCEPT_UNSIGNED"
"""``true`` when ``spec.snapshotSigning.acceptUnsigned`` is set."""

# Kafka security (spec.kafka): what every Kafka source and sink of the job connects with, each
# client's settings translated from it by spark_runtime.kafka_security.
ENV_KAFKA_SECURITY_PROTOCOL = "SJ_KAFKA_SECURITY_PROTOCOL"
"""``spec.kafka.securityProtocol``; unset for a job without ``spec.kafka``."""
ENV_KAFKA_SASL_MECHANISM = "SJ_KAFKA_SASL_MECHANISM"
"""``spec.kafka.sasl.mechanism``; unset without SASL."""
ENV_KAFKA_SASL_USERNAME = "SJ_KAFKA_SASL_USERNAME"
"""``spec.kafka.sasl.username``."""
ENV_KAFKA_SASL_PASSWORD = "SJ_KAFKA_SASL_PASSWORD"
"""The password, from ``spec.kafka.sasl.passwordSecret`` (by reference: the operator never
reads it)."""
ENV_KAFKA_CA_PEM = "SJ_KAFKA_CA_PEM"
"""The brokers' CA certificates (PEM), from ``spec.kafka.tls.caSecret``; unset for the
system's trust store."""
ENV_KAFKA_ORIGIN = "SJ_KAFKA_ORIGIN"
"""Where the settings came from (the Secrets' names and keys, never a value), for the
messages of a refused connection."""

# Durable storage (spec.durableStorage, or the operator's default): the operator resolves which
# applies and sets all of it, so the driver never merges two sources.
ENV_DURABLE_BUCKET = "SJ_DURABLE_BUCKET"
"""The bucket of durable copies; unset when the job has no durable storage."""
ENV_DURABLE_PREFIX = "SJ_DURABLE_PREFIX"
"""The key prefix under the bucket ("" for its root)."""
ENV_DURABLE_ENDPOINT = "SJ_DURABLE_ENDPOINT"
"""The S3 API's URL; unset for AWS S3 itself."""
ENV_DURABLE_REGION = "SJ_DURABLE_REGION"
"""The region requests are signed for."""
ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS = "SJ_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS"
"""How often the automatic snapshot is copied; unset for no periodic copies."""
ENV_DURABLE_RESTORE = "SJ_DURABLE_RESTORE"
"""``<acceptSnapshotId>:<insteadOfSnapshotId>`` from ``spec.durableRestore``; unset without it."""
ENV_DURABLE_ACCESS_KEY_ID = "AWS_ACCESS_KEY_ID"
"""The access key, from the credentials Secret (boto3 reads the same variable)."""
ENV_DURABLE_SECRET_ACCESS_KEY = "AWS_SECRET_ACCESS_KEY"
"""The secret key, from the credentials Secret (boto3 reads the same variable)."""
SECRET_ACCESS_KEY_ID_KEY = "accessKeyId"
"""The credentials Secret's key holding the access key."""
SECRET_SECRET_ACCESS_KEY_KEY = "secretAccessKey"
"""The credentials Secret's key holding the secret key."""
