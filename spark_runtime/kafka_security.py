"""The job's Kafka security settings (``spec.kafka``), translated for each of its Kafka clients.

A job's Kafka sources and sinks use two client libraries whose security settings have different
names: librdkafka (through confluent-kafka: the driver's offsets and small reads, the
exactly-once sink's producers) and Spark's Java ``kafka-clients`` (the executors' reads, the
at-least-once writer). The user gives one block; :class:`KafkaSecurity` holds it, read from the
variables the operator sets from it (``SJ_KAFKA_*``, the password and CA by Secret reference),
and writes each client's settings. Both clients get the CA as PEM text, not as a file, so no
Pod needs a mounted file and the executors need nothing in their environment: the settings
travel inside the source and sink objects, as the rest of their options do.

A connection the brokers refuse for the credentials or the certificate is told apart from an
outage (:func:`refusal`), so the driver stops at once with a message naming the cause and where
the setting came from, instead of retrying as if the brokers were down: only a new Pod reads a
rotated Secret. Pure: no Kafka client is imported here.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from snapshotjob_contract.environment import (
    ENV_KAFKA_CA_PEM,
    ENV_KAFKA_ORIGIN,
    ENV_KAFKA_SASL_MECHANISM,
    ENV_KAFKA_SASL_PASSWORD,
    ENV_KAFKA_SASL_USERNAME,
    ENV_KAFKA_SECURITY_PROTOCOL,
)
from snapshotjob_contract.kafka import KafkaSaslMechanism, KafkaSecurityProtocol

_JAAS_MODULES = {
    KafkaSaslMechanism.PLAIN: "org.apache.kafka.common.security.plain.PlainLoginModule",
    KafkaSaslMechanism.SCRAM_SHA_256: "org.apache.kafka.common.security.scram.ScramLoginModule",
    KafkaSaslMechanism.SCRAM_SHA_512: "org.apache.kafka.common.security.scram.ScramLoginModule",
}
"""The Java client's login module per mechanism (librdkafka needs none)."""

AUTHENTICATION_ERRORS = frozenset({"_AUTHENTICATION", "SASL_AUTHENTICATION_FAILED"})
"""librdkafka error names of a refused user or password."""
CERTIFICATE_REFUSED = "certificate verify failed"
"""What OpenSSL says, through librdkafka (as ``_SSL`` or ``_TRANSPORT``), of a broker
certificate that does not verify against the CA or does not name the host. Other TLS errors
(a broker going away mid-handshake) are outages."""


_TOOK = re.compile(r" \(after \d+ms in state \w+\)")
"""The timing librdkafka appends to a connection's error."""


class KafkaConnectionRefused(Exception):  # noqa: N818 - names the condition, like BadInput
    """The brokers refused the job's credentials or failed its certificate check: retrying in
    the same Pod cannot help, a new Pod reads the Secrets again."""


@dataclass(frozen=True)
class KafkaSecurity:
    """How the job's Kafka clients connect: protocol, SASL user and password, the brokers' CA.

    Args:
        protocol: Kafka's ``security.protocol``.
        mechanism: The SASL mechanism; with SASL protocols only.
        username: The SASL user.
        password: The SASL password (never in ``repr``).
        ca_pem: The CA certificates the brokers' certificates must verify against, PEM; None
            for the system's trust store.
        origin: Where the settings came from (Secret names and keys, never a value), for the
            messages of a refused connection.

    Raises:
        ValueError: A SASL protocol without a user, password and mechanism, SASL settings
            without a SASL protocol, or a CA without TLS.
    """

    protocol: KafkaSecurityProtocol
    mechanism: KafkaSaslMechanism | None = None
    username: str | None = None
    password: str | None = field(default=None, repr=False)
    ca_pem: str | None = field(default=None, repr=False)
    origin: str = ""

    def __post_init__(self) -> None:
        sasl = (self.mechanism, self.username, self.password)
        if self.protocol.uses_sasl and None in sasl:
            raise ValueError(
                f"Kafka security protocol {self.protocol} needs a SASL mechanism, user and "
                "password (spec.kafka.sasl)"
            )
        if not self.protocol.uses_sasl and any(value is not None for value in sasl):
            raise ValueError(
                f"Kafka SASL settings need security protocol SASL_SSL or SASL_PLAINTEXT, "
                f"not {self.protocol}"
            )
        if self.ca_pem is not None and not self.protocol.uses_tls:
            raise ValueError(
                f"A Kafka CA needs security protocol SSL or SASL_SSL, not {self.protocol}"
            )
        if self.ca_pem is not None and "-----BEGIN CERTIFICATE-----" not in self.ca_pem:
            raise ValueError(
                f"The Kafka CA{_from(self.origin)} holds no PEM certificate "
                "(-----BEGIN CERTIFICATE-----)"
            )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] | None = None) -> KafkaSecurity | None:
        """The settings the operator set from ``spec.kafka``; None for a job without it.

        Raises:
            ValueError: An unknown protocol or mechanism, or settings that do not fit together.
        """
        env = os.environ if environ is None else environ
        protocol = env.get(ENV_KAFKA_SECURITY_PROTOCOL)
        if not protocol:
            return None
        mechanism = env.get(ENV_KAFKA_SASL_MECHANISM)
        try:
            return cls(
                protocol=KafkaSecurityProtocol(protocol),
                mechanism=KafkaSaslMechanism(mechanism) if mechanism else None,
                username=env.get(ENV_KAFKA_SASL_USERNAME),
                password=env.get(ENV_KAFKA_SASL_PASSWORD),
                ca_pem=env.get(ENV_KAFKA_CA_PEM),
                origin=env.get(ENV_KAFKA_ORIGIN, ""),
            )
        except ValueError as error:
            raise ValueError(
                f"Kafka security settings ({ENV_KAFKA_SECURITY_PROTOCOL}...): {error}"
            ) from error

    def librdkafka_settings(self) -> dict[str, str]:
        """Settings for a confluent-kafka client (librdkafka's names)."""
        settings = {"security.protocol": self.protocol.value}
        if self.mechanism is not None and self.username is not None and self.password is not None:
            settings["sasl.mechanisms"] = self.mechanism.value
            settings["sasl.username"] = self.username
            settings["sasl.password"] = self.password
        if self.ca_pem is not None:
            settings["ssl.ca.pem"] = self.ca_pem
        return settings

    def java_settings(self) -> dict[str, str]:
        """Settings for Spark's Java ``kafka-clients`` (without Spark's ``kafka.`` prefix)."""
        settings = {"security.protocol": self.protocol.value}
        if self.mechanism is not None and self.username is not None and self.password is not None:
            settings["sasl.mechanism"] = self.mechanism.value
            settings["sasl.jaas.config"] = (
                f"{_JAAS_MODULES[self.mechanism]} required "
                f'username="{_jaas_quoted(self.username)}" '
                f'password="{_jaas_quoted(self.password)}";'
            )
        if self.ca_pem is not None:
            settings["ssl.truststore.type"] = "PEM"
            settings["ssl.truststore.certificates"] = self.ca_pem
        return settings

    def secrets(self) -> tuple[str, ...]:
        """The values that must never be logged or reported."""
        return (self.password,) if self.password else ()


def refusal(
    security: KafkaSecurity | None, bootstrap_servers: str, error_names: set[str], text: str
) -> KafkaConnectionRefused | None:
    """The refused connection a client's errors show, with a message naming the cause; None
    when they show something else (an outage, a missing topic).

    Args:
        security: The settings the client connected with (None: the job has no spec.kafka).
        bootstrap_servers: The brokers the client connected to.
        error_names: librdkafka's error names the client reported (``KafkaError.name()``).
        text: What librdkafka said, for the message (it never contains the password).
    """
    where = _from(security.origin if security is not None else "")
    if error_names & AUTHENTICATION_ERRORS:
        user = security.username if security is not None else None
        mechanism = security.mechanism if security is not None else None
        return KafkaConnectionRefused(
            f"Kafka brokers {bootstrap_servers} refused user {user!r} with {mechanism}: the "
            f"password or user is wrong{where}, or the user does not exist on the brokers; "
            f"fix the Secret or spec.kafka.sasl, the next restart reads it ({text})"
        )
    if CERTIFICATE_REFUSED in text:
        return KafkaConnectionRefused(
            f"The certificate of Kafka brokers {bootstrap_servers} does not verify against the "
            f"CA{where}: give spec.kafka.tls.caSecret the CA that signed the brokers' "
            f"certificates (for Strimzi, <cluster>-cluster-ca-cert, key ca.crt), and reach "
            f"the brokers by a host name their certificates name ({text})"
        )
    return None


def _from(origin: str) -> str:
    return f" ({origin})" if origin else ""


def _jaas_quoted(value: str) -> str:
    """A value inside a JAAS line's double quotes: backslashes and quotes escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"')


class ClientErrors:
    """A driver-side client's latest errors, recorded by its ``error_cb``: a call that fails
    says only that it timed out, the callback says why (a refused password, a certificate).

    Args:
        security: The settings the client connects with.
        bootstrap_servers: The brokers it connects to.
    """

    _KEPT = 8

    def __init__(self, security: KafkaSecurity | None, bootstrap_servers: str) -> None:
        self._security = security
        self._bootstrap_servers = bootstrap_servers
        self._recent: list[tuple[str, str]] = []

    def __call__(self, error: object) -> None:
        """Records one error (a ``confluent_kafka.KafkaError``)."""
        name = getattr(error, "name", None)
        text = getattr(error, "str", None)
        # The retries differ only in how long they took: one line each is enough.
        said = _TOOK.sub("", str(text()) if callable(text) else str(error))
        entry = (str(name()) if callable(name) else "", said)
        if entry not in self._recent:
            self._recent = [*self._recent[-(self._KEPT - 1) :], entry]

    def clear(self) -> None:
        """Forgets the errors: a call succeeded since."""
        self._recent = []

    def raise_if_refused(self, failure: BaseException) -> None:
        """Raises what the recorded errors and ``failure`` show if the brokers refused the
        connection; returns for anything else.

        Raises:
            KafkaConnectionRefused: With the cause and where its setting came from.
        """
        first = failure.args[0] if failure.args else None
        name = getattr(first, "name", None)
        names = {n for n, _ in self._recent} | ({str(name())} if callable(name) else set())
        texts = [t for _, t in self._recent] or [str(failure)]
        refused = refusal(self._security, self._bootstrap_servers, names, "; ".join(texts))
        if refused is not None:
            raise refused from failure
