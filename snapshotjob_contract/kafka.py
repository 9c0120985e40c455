"""``SnapshotJob.spec.kafka``: how every Kafka source and sink of a job reaches secured brokers.

One block for the whole job, with Secret references instead of values, because the job's Kafka
clients are two libraries whose security settings have different names: librdkafka (the
driver's reads and the exactly-once sink's producers) and Spark's Java client (the executors'
reads, the at-least-once writer). The runtime translates the block for each
(``spark_runtime.kafka_security``); docs/guides/kafka-security.md shows it with a broker run by
Strimzi.
"""

from __future__ import annotations

import enum
from typing import ClassVar

from pydantic import ConfigDict, Field

from snapshotjob_contract.base import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    SECRET_KEY_PATTERN,
    ApiModel,
    CrossFieldRule,
)


class KafkaSecurityProtocol(enum.StrEnum):
    """How clients talk to the brokers, Kafka's ``security.protocol`` values."""

    PLAINTEXT = "PLAINTEXT"
    SSL = "SSL"
    SASL_PLAINTEXT = "SASL_PLAINTEXT"
    SASL_SSL = "SASL_SSL"

    @property
    def uses_sasl(self) -> bool:
        """Whether clients authenticate with SASL."""
        return self in (KafkaSecurityProtocol.SASL_PLAINTEXT, KafkaSecurityProtocol.SASL_SSL)

    @property
    def uses_tls(self) -> bool:
        """Whether the connection is TLS."""
        return self in (KafkaSecurityProtocol.SSL, KafkaSecurityProtocol.SASL_SSL)


class KafkaSaslMechanism(enum.StrEnum):
    """The SASL mechanisms both clients support with a user and a password."""

    PLAIN = "PLAIN"
    SCRAM_SHA_256 = "SCRAM-SHA-256"
    SCRAM_SHA_512 = "SCRAM-SHA-512"


class SecretKeyRef(ApiModel):
    """One value of a Secret in the job's namespace."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)
    """The Secret's name."""
    key: str = Field(max_length=253, pattern=SECRET_KEY_PATTERN)
    """The key of its data."""


class KafkaSaslSpec(ApiModel):
    """A user and a password the brokers check with a SASL mechanism."""

    model_config = ConfigDict(extra="forbid")

    mechanism: KafkaSaslMechanism = KafkaSaslMechanism.SCRAM_SHA_512
    """The SASL mechanism, as the brokers' listener enables it."""
    username: str = Field(min_length=1, max_length=256)
    """The user name (for a Strimzi KafkaUser: its name)."""
    password_secret: SecretKeyRef
    """Where the password is (for a Strimzi KafkaUser: the Secret of the user's name, key
    `password`)."""


class KafkaTlsSpec(ApiModel):
    """The certificate authority the brokers' certificates are checked against."""

    model_config = ConfigDict(extra="forbid")

    ca_secret: SecretKeyRef
    """The CA certificates, PEM (for Strimzi: Secret `<cluster>-cluster-ca-cert`, key
    `ca.crt`). The brokers' host names are checked against their certificates."""


class KafkaSpec(ApiModel):
    """Security settings of every Kafka source and sink in the job, translated for both of
    the job's Kafka clients (docs/guides/kafka-security.md). A source's or sink's own
    `options` still win over them."""

    model_config = ConfigDict(extra="forbid")

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="(self.securityProtocol == 'SASL_SSL' || self.securityProtocol == "
            "'SASL_PLAINTEXT') == has(self.sasl)",
            message="kafka.sasl (user and password) goes with securityProtocol SASL_SSL or "
            "SASL_PLAINTEXT, and those need it",
            holds=lambda kafka: kafka.security_protocol.uses_sasl == (kafka.sasl is not None),
        ),
        CrossFieldRule(
            cel="!has(self.tls) || self.securityProtocol == 'SSL' || "
            "self.securityProtocol == 'SASL_SSL'",
            message="kafka.tls (the brokers' CA) needs securityProtocol SSL or SASL_SSL",
            holds=lambda kafka: kafka.tls is None or kafka.security_protocol.uses_tls,
        ),
    )

    security_protocol: KafkaSecurityProtocol
    """How clients talk to the brokers: SASL_SSL (TLS and a user), SSL (TLS only),
    SASL_PLAINTEXT or PLAINTEXT."""
    sasl: KafkaSaslSpec | None = Field(default=None, exclude_if=lambda value: value is None)
    """The user and password; required with SASL_SSL and SASL_PLAINTEXT."""
    tls: KafkaTlsSpec | None = Field(default=None, exclude_if=lambda value: value is None)
    """The brokers' CA; unset to trust the image's system CAs."""
