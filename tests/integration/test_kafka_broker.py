"""The test bed's Kafka broker is a real one: transactions, ``read_committed``, crash recovery.

The Kafka source and sink rest on exactly these broker behaviours, so they are checked here
on their own before anything is built on them: a committed transaction's records are read,
an aborted or still open one's are not under ``read_committed``, offsets are dense per
partition apart from transaction markers, and after a SIGKILL the broker comes back on the
same address with every committed record and a transaction that was open aborted by a new
producer of the same ``transactional.id`` (fencing).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from testbed.kafka import KafkaBroker, new_cluster_id

pytestmark = pytest.mark.integration


def _producer(broker: KafkaBroker, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": transactional_id,
            "enable.idempotence": True,
            "log_level": 3,
        }
    )
    producer.init_transactions(30)
    return producer


def _read_committed(broker: KafkaBroker, topic: str, partitions: int, want: int) -> list[str]:
    """Every committed value of ``topic`` from the start, polling until ``want`` or 20 s."""
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"check-{topic}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "log_level": 3,
        }
    )
    consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
    values: list[str] = []
    deadline = time.monotonic() + 20
    try:
        while time.monotonic() < deadline and len(values) < want:
            message = consumer.poll(0.5)
            if message is not None and message.error() is None:
                values.append((message.value() or b"").decode())
        # Anything beyond ``want`` would be a visible duplicate or an aborted record.
        for _ in range(4):
            message = consumer.poll(0.25)
            if message is not None and message.error() is None:
                values.append((message.value() or b"").decode())
    finally:
        consumer.close()
    return values


def test_committed_records_are_read_and_aborted_ones_are_not(
    kafka: KafkaBroker, kafka_topic: str
) -> None:
    producer = _producer(kafka, f"tx-{kafka_topic}")
    producer.begin_transaction()
    for n in range(20):
        producer.produce(kafka_topic, key=str(n % 4), value=f"c{n}")
    producer.commit_transaction(30)
    producer.begin_transaction()
    for n in range(5):
        producer.produce(kafka_topic, value=f"aborted{n}")
    producer.abort_transaction(30)

    values = _read_committed(kafka, kafka_topic, 4, 20)
    assert sorted(values) == sorted(f"c{n}" for n in range(20))


def test_a_killed_broker_keeps_committed_records_and_a_new_producer_fences_the_open_one(
    tmp_path: Path,
) -> None:
    broker = KafkaBroker(tmp_path / "kafka")
    try:
        broker.start()
        topic = broker.create_topic(partitions=2)
        first = _producer(broker, "tx-restart")
        first.begin_transaction()
        for n in range(10):
            first.produce(topic, value=f"kept{n}")
        first.commit_transaction(30)
        first.begin_transaction()
        first.produce(topic, value="open")
        first.flush(30)  # the open transaction's record is on the broker, uncommitted

        broker.kill()
        broker.restart()

        # A new producer of the same id aborts the open transaction and fences the old one.
        second = _producer(broker, "tx-restart")
        with pytest.raises(KafkaException):
            first.commit_transaction(10)
        second.begin_transaction()
        second.produce(topic, value="after")
        second.commit_transaction(30)

        values = _read_committed(broker, topic, 2, 11)
        assert sorted(values) == sorted([*(f"kept{n}" for n in range(10)), "after"])
    finally:
        broker.stop()


def test_a_cluster_id_that_starts_with_a_dash_formats_the_storage(tmp_path: Path) -> None:
    """One random id in 64 starts with ``-``; the tool must not read it as an option.

    CI once failed on exactly that (``--cluster-id: expected one argument``).
    """
    broker = KafkaBroker(tmp_path / "kafka")
    cluster_id = "-" + new_cluster_id()[1:]
    broker.format_storage(cluster_id)
    meta = (broker.datadir / "meta.properties").read_text()
    assert f"cluster.id={cluster_id}\n" in meta
