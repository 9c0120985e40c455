"""Example SnapshotJob specs shared by the model tests and the CRD's API-server tests.

One table of invalid specs serves both tiers, so the pydantic models (which the operator uses
to re-validate stored objects) and the generated CRD (which the API server enforces at
admission) are held to the same rules. ``VALID_SPEC``, the spec they vary, is the test bed's
(:mod:`testbed.snapshotjob_crd`): the operator harness creates its jobs from it too.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

from testbed.snapshotjob_crd import VALID_SPEC

__all__ = ["INVALID_SPECS", "VALID_SPEC", "InvalidSpecCase"]


@dataclass(frozen=True)
class InvalidSpecCase:
    """A spec that both the models and the API server must reject.

    Attributes:
        name: Test id.
        changes: Top-level spec fields to set on a copy of VALID_SPEC (None removes one).
        field: The field path the API server names in its rejection.
        message: Text of a CEL rule's message both must report, or None for schema rules.
    """

    name: str
    changes: dict[str, Any]
    field: str
    message: str | None = None

    def spec(self) -> dict[str, Any]:
        """Returns the invalid spec."""
        spec = copy.deepcopy(VALID_SPEC)
        for key, value in self.changes.items():
            if value is None:
                spec.pop(key, None)
            else:
                spec[key] = value
        return spec


INVALID_SPECS = (
    InvalidSpecCase(
        "cancel-job-without-name",
        {"exportSnapshot": {"cancelJob": True}},
        "spec.exportSnapshot",
        "exportSnapshot.cancelJob needs exportSnapshot.name",
    ),
    InvalidSpecCase(
        "export-name-not-dns-label",
        {"exportSnapshot": {"name": "Nightly_Export"}},
        "spec.exportSnapshot.name",
    ),
    InvalidSpecCase(
        "initial-snapshot-name-too-long",
        {"initialSnapshotName": "x" * 64},
        "spec.initialSnapshotName",
    ),
    InvalidSpecCase(
        "max-backoff-below-backoff",
        {"restartPolicy": {"backoffSeconds": 400}},
        "spec.restartPolicy",
        "restartPolicy.maxBackoffSeconds must be at least backoffSeconds",
    ),
    InvalidSpecCase(
        "no-guarantee-with-snapshot-upgrades",
        {"processingGuarantee": "NONE"},
        "spec",
        "processingGuarantee NONE takes no snapshots, so upgradeMode must be stateless",
    ),
    InvalidSpecCase(
        "cluster-name-without-address",
        {"hazelcast": {"clusterName": "analytics"}},
        "spec.hazelcast",
        "hazelcast.clusterName names an external cluster, so it needs hazelcast.address",
    ),
    InvalidSpecCase(
        "zero-snapshot-interval", {"snapshotIntervalSeconds": 0}, "spec.snapshotIntervalSeconds"
    ),
    InvalidSpecCase(
        "unknown-guarantee", {"processingGuarantee": "SOMETIMES"}, "spec.processingGuarantee"
    ),
    InvalidSpecCase("no-pipeline", {"pipeline": None}, "spec.pipeline"),
    InvalidSpecCase(
        "memory-not-spark-notation",
        {"spark": {"driver": {"memory": "lots"}}},
        "spec.spark.driver.memory",
    ),
    InvalidSpecCase(
        "too-many-backups", {"hazelcast": {"backupCount": 7}}, "spec.hazelcast.backupCount"
    ),
    InvalidSpecCase("unknown-upgrade-mode", {"upgradeMode": "savepoint"}, "spec.upgradeMode"),
    InvalidSpecCase("zero-state-partitions", {"statePartitions": 0}, "spec.statePartitions"),
    InvalidSpecCase("too-many-state-partitions", {"statePartitions": 1025}, "spec.statePartitions"),
    InvalidSpecCase(
        "durable-storage-bucket-upper-case",
        {"durableStorage": {"bucket": "Team-Snapshots", "credentialsSecret": "s3-keys"}},
        "spec.durableStorage.bucket",
    ),
    InvalidSpecCase(
        "durable-storage-prefix-trailing-slash",
        {"durableStorage": {"bucket": "snapshots", "prefix": "team/", "credentialsSecret": "k"}},
        "spec.durableStorage.prefix",
    ),
    InvalidSpecCase(
        "durable-storage-endpoint-without-scheme",
        {
            "durableStorage": {
                "bucket": "snapshots",
                "endpoint": "minio.storage:9000",
                "credentialsSecret": "k",
            }
        },
        "spec.durableStorage.endpoint",
    ),
    InvalidSpecCase(
        "durable-storage-credentials-not-a-name",
        {"durableStorage": {"bucket": "snapshots", "credentialsSecret": "S3_Keys"}},
        "spec.durableStorage.credentialsSecret",
    ),
    InvalidSpecCase(
        "durable-copies-more-often-than-every-10-s",
        {
            "durableStorage": {
                "bucket": "snapshots",
                "credentialsSecret": "k",
                "snapshotCopyIntervalSeconds": 5,
            }
        },
        "spec.durableStorage.snapshotCopyIntervalSeconds",
    ),
    InvalidSpecCase(
        "snapshot-chains-without-incremental-snapshots",
        {"snapshotChains": {"maxDeltas": 32}},
        "spec",
        "snapshotChains bounds the chains of incremental snapshots: set incrementalSnapshots "
        "to true, or remove snapshotChains",
    ),
    InvalidSpecCase(
        "snapshot-chains-too-long",
        {"incrementalSnapshots": True, "snapshotChains": {"maxDeltas": 65}},
        "spec.snapshotChains.maxDeltas",
    ),
    InvalidSpecCase(
        "snapshot-chains-deltas-larger-than-the-full-version",
        {"incrementalSnapshots": True, "snapshotChains": {"maxDeltaPercent": 101}},
        "spec.snapshotChains.maxDeltaPercent",
    ),
    InvalidSpecCase(
        "durable-restore-of-a-copy-not-older",
        {"durableRestore": {"acceptSnapshotId": 17, "insteadOfSnapshotId": 17}},
        "spec.durableRestore",
        "durableRestore.acceptSnapshotId must be older (lower) than insteadOfSnapshotId",
    ),
    InvalidSpecCase(
        "kafka-sasl-protocol-without-a-user",
        {"kafka": {"securityProtocol": "SASL_SSL"}},
        "spec.kafka",
        "kafka.sasl (user and password) goes with securityProtocol SASL_SSL or SASL_PLAINTEXT, "
        "and those need it",
    ),
    InvalidSpecCase(
        "kafka-user-without-a-sasl-protocol",
        {
            "kafka": {
                "securityProtocol": "SSL",
                "sasl": {"username": "u", "passwordSecret": {"name": "u", "key": "password"}},
            }
        },
        "spec.kafka",
        "kafka.sasl (user and password) goes with securityProtocol SASL_SSL or SASL_PLAINTEXT, "
        "and those need it",
    ),
    InvalidSpecCase(
        "kafka-ca-without-tls",
        {
            "kafka": {
                "securityProtocol": "PLAINTEXT",
                "tls": {"caSecret": {"name": "ca", "key": "ca.crt"}},
            }
        },
        "spec.kafka",
        "kafka.tls (the brokers' CA) needs securityProtocol SSL or SASL_SSL",
    ),
    InvalidSpecCase(
        "kafka-unknown-mechanism",
        {
            "kafka": {
                "securityProtocol": "SASL_SSL",
                "sasl": {
                    "mechanism": "GSSAPI",
                    "username": "u",
                    "passwordSecret": {"name": "u", "key": "password"},
                },
            }
        },
        "spec.kafka.sasl.mechanism",
    ),
    InvalidSpecCase(
        "spark-ui-ingress-without-host",
        {"sparkUi": {"enabled": True, "ingress": {"ingressClassName": "nginx"}}},
        "spec.sparkUi.ingress.host",
    ),
    InvalidSpecCase(
        "spark-ui-ingress-host-with-an-unknown-placeholder",
        {"sparkUi": {"enabled": True, "ingress": {"host": "{job}.example.com"}}},
        "spec.sparkUi.ingress.host",
    ),
    InvalidSpecCase(
        "spark-ui-unknown-service-type",
        {"sparkUi": {"enabled": True, "serviceType": "ExternalName"}},
        "spec.sparkUi.serviceType",
    ),
    InvalidSpecCase(
        "spark-ui-service-port-out-of-range",
        {"sparkUi": {"enabled": True, "servicePort": 70000}},
        "spec.sparkUi.servicePort",
    ),
)
