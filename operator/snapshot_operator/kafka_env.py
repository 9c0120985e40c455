"""The driver's environment for ``spec.kafka``: Kafka security settings, Secrets by reference.

The password and the CA are references to the Secrets' keys, so the operator never reads them
and they never appear in the Pod's spec; a missing Secret or key keeps the container from
starting with a reason that names them (``CreateContainerConfigError``, the DriverNotStarting
condition). Only the driver gets them: the runtime hands each Kafka client its settings inside
the source and sink objects (``spark_runtime.kafka_security``).
"""

from __future__ import annotations

from typing import Any

from snapshotjob_contract.environment import (
    ENV_KAFKA_CA_PEM,
    ENV_KAFKA_ORIGIN,
    ENV_KAFKA_SASL_MECHANISM,
    ENV_KAFKA_SASL_PASSWORD,
    ENV_KAFKA_SASL_USERNAME,
    ENV_KAFKA_SECURITY_PROTOCOL,
)
from snapshotjob_contract.kafka import KafkaSpec, SecretKeyRef


def kafka_env(kafka: KafkaSpec | None) -> list[dict[str, Any]]:
    """Returns the driver's environment for ``kafka``; none without it."""
    if kafka is None:
        return []
    env: list[dict[str, Any]] = [
        {"name": ENV_KAFKA_SECURITY_PROTOCOL, "value": kafka.security_protocol.value}
    ]
    origins: list[str] = []
    if kafka.sasl is not None:
        env += [
            {"name": ENV_KAFKA_SASL_MECHANISM, "value": kafka.sasl.mechanism.value},
            {"name": ENV_KAFKA_SASL_USERNAME, "value": kafka.sasl.username},
            _from_secret(ENV_KAFKA_SASL_PASSWORD, kafka.sasl.password_secret),
        ]
        origins.append(f"password from Secret {_named(kafka.sasl.password_secret)}")
    if kafka.tls is not None:
        env.append(_from_secret(ENV_KAFKA_CA_PEM, kafka.tls.ca_secret))
        origins.append(f"CA from Secret {_named(kafka.tls.ca_secret)}")
    if origins:
        env.append({"name": ENV_KAFKA_ORIGIN, "value": ", ".join(origins)})
    return env


def _from_secret(name: str, ref: SecretKeyRef) -> dict[str, Any]:
    return {"name": name, "valueFrom": {"secretKeyRef": {"name": ref.name, "key": ref.key}}}


def _named(ref: SecretKeyRef) -> str:
    return f"{ref.name} key {ref.key}"
