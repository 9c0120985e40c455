"""spec.kafka against a secured broker: SASL_SSL with SCRAM-SHA-512 and the test's own CA.

One broker of ``KafkaBroker(..., security=BrokerSecurity.new())`` for the module. Its own
checks first: real librdkafka clients with
:meth:`~testbed.kafka.BrokerSecurity.client_settings` list, produce and consume. Then the bad
input of ``spec.kafka``, as the runtime reads it from the variables the operator sets: a CA
that did not sign the broker's certificate refuses a Kafka source with a message naming the
CA's Secret, and a wrong password stops a real driver at once with exit code 69 and a message
naming the user and the password's Secret, never the password. The exactly-once run against
the same kind of broker is ``test_kafka_exactly_once.py``.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from snapshotjob_contract.exits import DriverExit
from spark_runtime.kafka_security import KafkaConnectionRefused, KafkaSecurity
from spark_runtime.sources import KafkaSource
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.kafka import BrokerSecurity, KafkaBroker
from testbed.kafka_tls import other_ca_pem

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


@pytest.fixture(scope="module")
def secured() -> Iterator[KafkaBroker]:
    """One secured broker for the module."""
    workdir = Path(tempfile.mkdtemp(prefix="sj-kafka-sasl-ssl-"))
    broker = KafkaBroker(workdir, partitions=1, security=BrokerSecurity.new())
    try:
        broker.start()
        yield broker
    finally:
        broker.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def _security(broker: KafkaBroker) -> BrokerSecurity:
    assert broker.security is not None
    return broker.security


def _client(broker: KafkaBroker, **overrides: Any) -> dict[str, Any]:
    """A client's settings for the secured listener, with ``overrides`` (``sasl_password``
    for ``sasl.password``)."""
    settings: dict[str, Any] = {
        "bootstrap.servers": broker.bootstrap,
        **_security(broker).client_settings(),
        "log_level": 3,
    }
    settings.update({key.replace("_", "."): value for key, value in overrides.items()})
    return settings


def test_the_client_settings_list_produce_and_consume(secured: KafkaBroker) -> None:
    topic = secured.create_topic("secured")  # on the internal PLAINTEXT listener
    metadata = AdminClient(_client(secured)).list_topics(timeout=30)
    assert topic in metadata.topics
    # The broker tells clients the secured address only, never the internal one.
    assert [f"{b.host}:{b.port}" for b in metadata.brokers.values()] == [secured.bootstrap]

    producer = Producer(_client(secured))
    value = uuid.uuid4().hex.encode()
    producer.produce(topic, key=b"k", value=value, partition=0)
    assert producer.flush(30) == 0

    consumer = Consumer(_client(secured, group_id=f"g-{topic}", enable_auto_commit=False))
    try:
        consumer.assign([TopicPartition(topic, 0, 0)])
        message = consumer.poll(30)
        assert message is not None, "nothing consumed in 30 s"
        assert message.error() is None, message.error()
        assert (message.key(), message.value()) == (b"k", value)
    finally:
        consumer.close()
    # The test bed's helper reads the same record on the PLAINTEXT listener.
    assert secured.read_committed(topic) == [("k", value.decode())]


def test_a_source_given_a_ca_that_did_not_sign_the_brokers_certificate_is_refused_naming_it(
    secured: KafkaBroker,
) -> None:
    topic = secured.create_topic("wrong-ca")
    security = KafkaSecurity.from_environment(
        _security(secured).job_environment(ca_pem=other_ca_pem())
    )
    source = KafkaSource(secured.bootstrap, [topic], security=security)
    with pytest.raises(KafkaConnectionRefused) as refused:
        source.next_offset(source.initial_offset())
    message = str(refused.value)
    print(f"refused: {message}")
    assert f"The certificate of Kafka brokers {secured.bootstrap} does not verify" in message
    assert "CA from Secret kafka-tls key ca.crt" in message
    assert "certificate verify failed" in message
    # Given the right CA, the same source reads the topic's (empty) partitions.
    right = KafkaSource(
        secured.bootstrap,
        [topic],
        security=KafkaSecurity.from_environment(_security(secured).job_environment()),
    )
    assert right.next_offset(right.initial_offset()) == {topic: {"0": 0}}


def test_a_driver_given_a_wrong_password_stops_at_once_naming_the_user_and_the_secret(
    secured: KafkaBroker,
    healthy_hazelcast: HazelcastCluster,
    postgres_dsn: str,
    tmp_path: Path,
) -> None:
    """The job's Kafka sink is opened with the pipeline: the refusal ends the execution with
    69 (restarted with a backoff by the operator) instead of a retry in the same Pod."""
    topic, out_topic = secured.create_topic("in"), secured.create_topic("out")
    wrong = "not-" + _security(secured).password
    (tmp_path / "driver").mkdir()
    harness = DriverHarness(
        workdir=tmp_path / "driver",
        members=[node.address for node in healthy_hazelcast.nodes],
        cluster_name=healthy_hazelcast.cluster_name,
        job_uid=f"refused-{uuid.uuid4().hex[:8]}",
        pipeline="examples.kafka_sum",
        args={"bootstrap": secured.bootstrap, "topic": topic, "dsn": postgres_dsn,
              "out_topic": out_topic},
        environment=_security(secured).job_environment(password=wrong),
    )  # fmt: skip
    harness.start()
    assert harness.wait(timeout=180) == DriverExit.TRANSIENT_FAILURE, harness.log_tail()
    log = harness.log_text()
    assert (
        f"Kafka brokers {secured.bootstrap} refused user 'snapshotjob' with SCRAM-SHA-512" in log
    ), harness.log_tail()
    assert "password from Secret kafka-user key password" in log
    assert wrong not in log and _security(secured).password not in log
