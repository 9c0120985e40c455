"""spec.kafka as each Kafka client of a job gets it, and a refused connection told from an outage.

The translated settings are tested against the real clients in
``tests/integration/test_kafka_security.py`` (a SASL_SSL broker with its own CA); here, what
each client is given, and the messages.
"""

from __future__ import annotations

import pytest

from snapshotjob_contract.kafka import KafkaSaslMechanism, KafkaSecurityProtocol
from spark_runtime.kafka_security import (
    ClientErrors,
    KafkaConnectionRefused,
    KafkaSecurity,
    refusal,
)
from spark_runtime.sinks import KafkaSink
from spark_runtime.sources import KafkaSource

CA = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"
ENV = {
    "SJ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL",
    "SJ_KAFKA_SASL_MECHANISM": "SCRAM-SHA-512",
    "SJ_KAFKA_SASL_USERNAME": "app",
    "SJ_KAFKA_SASL_PASSWORD": 'pa"ss\\word',
    "SJ_KAFKA_CA_PEM": CA,
    "SJ_KAFKA_ORIGIN": "password from Secret app key password",
}


def secured() -> KafkaSecurity:
    security = KafkaSecurity.from_environment(ENV)
    assert security is not None
    return security


def test_the_environment_the_operator_sets_is_read_whole() -> None:
    security = secured()
    assert security.protocol is KafkaSecurityProtocol.SASL_SSL
    assert security.mechanism is KafkaSaslMechanism.SCRAM_SHA_512
    assert (security.username, security.password, security.ca_pem) == ("app", 'pa"ss\\word', CA)
    assert KafkaSecurity.from_environment({}) is None
    assert 'pa"ss' not in repr(security) and "BEGIN" not in repr(security)
    assert security.secrets() == ('pa"ss\\word',)


def test_librdkafka_gets_its_own_names_and_the_ca_as_text() -> None:
    assert secured().librdkafka_settings() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "app",
        "sasl.password": 'pa"ss\\word',
        "ssl.ca.pem": CA,
    }


def test_java_gets_a_jaas_line_with_quotes_escaped_and_a_pem_trust_store() -> None:
    assert secured().java_settings() == {
        "security.protocol": "SASL_SSL",
        "sasl.mechanism": "SCRAM-SHA-512",
        "sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required "
        'username="app" password="pa\\"ss\\\\word";',
        "ssl.truststore.type": "PEM",
        "ssl.truststore.certificates": CA,
    }
    plain = KafkaSecurity(
        KafkaSecurityProtocol.SASL_PLAINTEXT, KafkaSaslMechanism.PLAIN, "u", "p"
    ).java_settings()
    assert plain["sasl.jaas.config"].startswith(
        "org.apache.kafka.common.security.plain.PlainLoginModule required"
    )
    assert KafkaSecurity(KafkaSecurityProtocol.SSL).java_settings() == {"security.protocol": "SSL"}


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({"SJ_KAFKA_SECURITY_PROTOCOL": "SASL_SSL"}, "needs a SASL mechanism, user and password"),
        ({**ENV, "SJ_KAFKA_SECURITY_PROTOCOL": "SSL"}, "need security protocol SASL_SSL"),
        ({"SJ_KAFKA_SECURITY_PROTOCOL": "PLAINTEXT", "SJ_KAFKA_CA_PEM": CA}, "needs security"),
        ({**ENV, "SJ_KAFKA_CA_PEM": "not a certificate"}, "holds no PEM certificate"),
        ({**ENV, "SJ_KAFKA_SASL_MECHANISM": "GSSAPI"}, "GSSAPI"),
    ],
)
def test_settings_that_do_not_fit_are_refused_naming_what(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaSecurity.from_environment(env)


def test_a_source_and_a_sink_take_the_job_s_settings_and_their_own_options_win(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    source = KafkaSource("b:9093", ["t"], options={"sasl.username": "other"})
    assert source.security == secured()
    settings = source._client_settings()
    assert settings["sasl.password"] == 'pa"ss\\word' and settings["sasl.username"] == "other"
    sink = KafkaSink("b:9093", "out", options={"compression.type": "lz4"})
    assert sink._settings() == {
        "bootstrap.servers": "b:9093",
        **secured().librdkafka_settings(),
        "compression.type": "lz4",
    }
    own = KafkaSecurity(KafkaSecurityProtocol.SSL, ca_pem=CA)
    assert KafkaSource("b:9093", ["t"], security=own).security is own


def test_a_refused_password_and_a_certificate_that_does_not_verify_are_named() -> None:
    security = secured()
    wrong_password = refusal(
        security, "b:9093", {"_AUTHENTICATION"}, "SASL authentication error: invalid credentials"
    )
    assert wrong_password is not None
    assert "refused user 'app' with SCRAM-SHA-512" in str(wrong_password)
    assert "password from Secret app key password" in str(wrong_password)
    wrong_ca = refusal(
        security, "b:9093", {"_SSL"}, "SSL handshake failed: certificate verify failed"
    )
    assert wrong_ca is not None and "does not verify against the CA" in str(wrong_ca)
    assert refusal(security, "b:9093", {"_TRANSPORT"}, "Connection refused") is None
    # A broker that goes away mid-handshake is an outage, not a certificate refused.
    eof = "SSL handshake failed: unexpected eof while reading"
    assert refusal(security, "b:9093", {"_SSL"}, eof) is None
    assert not any('pa"ss' in str(e) for e in (wrong_password, wrong_ca))


class FakeKafkaError:
    """Plays ``confluent_kafka.KafkaError``: only ``name()`` and ``str()`` are read."""

    def __init__(self, name: str, text: str) -> None:
        self._name, self._text = name, text

    def name(self) -> str:
        return self._name

    def __str__(self) -> str:
        return f"KafkaError{{str={self._text!r}}}"

    str = lambda self: self._text  # noqa: E731 - KafkaError's method shadows the builtin


def test_client_errors_tell_a_refusal_from_an_outage_and_forget_after_a_success() -> None:
    errors = ClientErrors(secured(), "b:9093")
    timeout = Exception(FakeKafkaError("_TRANSPORT", "Failed to get metadata"))
    errors.raise_if_refused(timeout)  # nothing recorded: an outage
    errors(FakeKafkaError("_AUTHENTICATION", "SASL authentication error"))
    with pytest.raises(KafkaConnectionRefused, match="refused user 'app'"):
        errors.raise_if_refused(timeout)
    errors.clear()
    errors.raise_if_refused(timeout)
    for index in range(20):
        errors(FakeKafkaError("_TRANSPORT", f"down {index}"))
    errors.raise_if_refused(timeout)  # a bounded history of outages
    # The same error retried is told once, without its timing.
    for took in (3, 9):
        errors(FakeKafkaError("_SSL", f"certificate verify failed (after {took}ms in state SSL)"))
    with pytest.raises(KafkaConnectionRefused) as refused:
        errors.raise_if_refused(timeout)
    assert str(refused.value).count("certificate verify failed") == 1
    assert "after" not in str(refused.value) and "KafkaError{" not in str(refused.value)
