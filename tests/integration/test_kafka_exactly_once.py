"""Exactly-once from Kafka: a real driver reading a real secured broker, faulted, publishes
every event once to PostgreSQL and to Kafka.

The broker's clients' listener is SASL_SSL (SCRAM-SHA-512) with a certificate of the test's own
CA, and the driver gets the ``SJ_KAFKA_*`` variables the operator sets from ``spec.kafka``: its
librdkafka clients and Spark's Java reader (epochs over ``driver_read_max_records``) connect
with the settings the runtime translates from them. The test's own clients use the broker's
internal PLAINTEXT listener.

The pipeline is :mod:`examples.kafka_sum`: each Kafka record is an event id, summed per key
and appended as one row per event to a PostgreSQL table without a unique constraint, both
sinks with two-phase commit, and written as one record per event to an output topic by the
Kafka sink (staged in the snapshot, published in one transaction per partition). The input
is written by transactional producers, with aborted transactions of ids that must never
appear, in two halves: one before the job starts and one while it runs. The driver is
faulted in turn: SIGKILLed at random moments; its broker SIGKILLed once the driver has read
everything and waits for more (the driver retries for ``--source-lost-seconds``, exits 69,
and a new execution restores once the broker is back); a Hazelcast member SIGKILLed while
snapshots are taken. Then every id must be in the events table and in the output topic
(read ``read_committed``) exactly once, the sums exact, no prepared transaction left, and
the consumer group at the topic's end (the offsets of the last snapshot, committed for
monitoring).
"""

from __future__ import annotations

import random
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from examples.sequence_sum import check_event_ids, expected_sums
from snapshotjob_contract.exits import DriverExit
from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster
from testbed.kafka import BrokerSecurity, KafkaBroker
from testbed.postgres import prepared_transactions

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(1200)]

KEYS = 10
END = 20_000
PARTITIONS = 4
BATCH = 500
STRAY = 10_000_000
"""Ids of aborted transactions start here: any of them in the output is a read of an abort."""


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A broker of this test's own, SASL_SSL with its own CA: the test kills and restarts it."""
    kafka = KafkaBroker(tmp_path / "kafka", security=BrokerSecurity.new())
    kafka.start()
    try:
        yield kafka
    finally:
        kafka.stop()


def _security(broker: KafkaBroker) -> BrokerSecurity:
    assert broker.security is not None
    return broker.security


def _load_producer(broker: KafkaBroker, transactional_id: str) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": broker.internal_bootstrap,
            "transactional.id": transactional_id,
            "log_level": 0,
        }
    )
    producer.init_transactions(30)
    return producer


def _produce(broker: KafkaBroker, topic: str, ids: range) -> None:
    """Commits ``ids`` in transactions of :data:`BATCH`, with an aborted one after every 4th.

    An abort that fails fatally is finished by a new producer of the same transactional id,
    whose ``init_transactions`` aborts whatever the old one left open: once, on a broker just
    restarted next to a killed member, the broker answered an abort with INVALID_TXN_STATE
    (its log: the transaction "is COMPLETE_COMMIT, but received transaction marker result to
    send: ABORT"). The strays stay uncommitted either way, and the test checks none is read.
    """
    transactional_id = f"load-{topic}-{ids.start}"
    producer = _load_producer(broker, transactional_id)
    for number, start in enumerate(range(ids.start, ids.stop, BATCH)):
        producer.begin_transaction()
        for n in range(start, min(start + BATCH, ids.stop)):
            producer.produce(topic, value=str(n).encode(), partition=n % PARTITIONS)
        producer.commit_transaction(30)
        if number % 4 == 3:
            producer.begin_transaction()
            for n in range(STRAY + start, STRAY + start + 50):
                producer.produce(topic, value=str(n).encode(), partition=n % PARTITIONS)
            try:
                producer.abort_transaction(30)
            except KafkaException as error:
                if not error.args[0].fatal():
                    raise
                print(f"load producer: abort failed fatally ({error}), fenced by a new producer")
                producer = _load_producer(broker, transactional_id)


def _snapshots_done(harness: DriverHarness) -> int:
    return harness.log_text().count("Snapshot done")


def _wait_snapshots(harness: DriverHarness, more: int, timeout: float = 180.0) -> None:
    target = _snapshots_done(harness) + more
    deadline = time.monotonic() + timeout
    while _snapshots_done(harness) < target:
        assert harness.running(), f"driver ended:\n{harness.log_tail()}"
        assert time.monotonic() < deadline, f"no {more} snapshots in {timeout}s"
        time.sleep(0.2)


def _wait_published(
    broker: KafkaBroker, topic: str, rows: int, harness: DriverHarness, timeout: float = 120
) -> None:
    """Waits until ``topic`` holds ``rows`` committed records (the Kafka sink's phase 2)."""
    deadline = time.monotonic() + timeout
    while len(broker.read_committed(topic)) < rows:
        assert harness.running(), f"driver ended:\n{harness.log_tail()}"
        assert time.monotonic() < deadline, f"{rows} records not published in {timeout}s"
        time.sleep(0.5)


def _wait_committed(dsn: str, rows: int, harness: DriverHarness, timeout: float = 240) -> None:
    """Waits until the events table holds ``rows`` rows (published by snapshots' 2nd phase)."""
    deadline = time.monotonic() + timeout
    while True:
        with psycopg.connect(dsn) as conn:
            exists = conn.execute("SELECT to_regclass('events') IS NOT NULL").fetchone()
            count = (
                conn.execute("SELECT count(*) FROM events").fetchone()
                if exists and exists[0]
                else (0,)
            )
        if count is not None and count[0] >= rows:
            return
        assert harness.running(), f"driver ended:\n{harness.log_tail()}"
        assert time.monotonic() < deadline, f"{rows} events not committed in {timeout}s"
        time.sleep(0.5)


def test_kafka_to_postgres_exactly_once_under_driver_broker_and_member_faults(
    broker: KafkaBroker,
    healthy_hazelcast: HazelcastCluster,
    postgres_dsn: str,
    tmp_path: Path,
) -> None:
    topic = broker.create_topic("events", partitions=PARTITIONS)
    out_topic = broker.create_topic("out", partitions=PARTITIONS)
    (tmp_path / "driver").mkdir()
    group = f"sj-{topic}"
    harness = DriverHarness(
        workdir=tmp_path / "driver",
        members=[node.address for node in healthy_hazelcast.nodes],
        cluster_name=healthy_hazelcast.cluster_name,
        job_uid=f"kafka-{uuid.uuid4().hex[:8]}",
        pipeline="examples.kafka_sum",
        args={
            "bootstrap": broker.bootstrap,
            "topic": topic,
            "dsn": postgres_dsn,
            "keys": KEYS,
            "events_table": "events",
            "max_rows_per_epoch": 3000,
            "group_id": group,
            "out_topic": out_topic,
            # Epochs of 3000 records go to Spark's Java reader, the last of each half to the
            # driver's librdkafka consumer: both through the secured listener.
            "driver_read_max_records": 2000,
        },
        snapshot_interval_ms=1000,
        extra_args=["--source-lost-seconds", "15"],
        environment=_security(broker).job_environment(),
    )
    rng = random.Random(20261123)
    codes: list[int] = []
    try:
        _produce(broker, topic, range(0, END // 2))

        # Driver SIGKILLs at random moments: start, restore, epochs, snapshots.
        for _ in range(2):
            harness.start()
            _wait_snapshots(harness, 1)
            time.sleep(rng.uniform(0.0, 4.0))
            assert harness.kill(), harness.log_tail()

        # The broker crashes under a driver that has read everything and waits for more: it
        # retries for --source-lost-seconds, then exits 69 naming the outage.
        harness.start()
        # This driver's own snapshot first: the drivers killed above may have finished the
        # first half already, and an outage before the sinks are open is another failure.
        _wait_snapshots(harness, 1)
        _wait_committed(postgres_dsn, END // 2, harness)
        # Both sinks done, so the outage finds the driver idle, not publishing (a publish cut
        # short is a failed phase 2, exit 69 too, which the driver kills above already cover).
        _wait_published(broker, out_topic, END // 2, harness)
        broker.kill()
        codes.append(harness.wait(timeout=180))
        assert codes[-1] == DriverExit.TRANSIENT_FAILURE, harness.log_tail()
        assert "A source has been unavailable for" in harness.log_text()
        broker.restart()

        # A store member dies while snapshots are taken; the second half arrives meanwhile.
        harness.start()
        _wait_snapshots(harness, 1)
        healthy_hazelcast.kill(1)
        _produce(broker, topic, range(END // 2, END))
        _wait_snapshots(harness, 2)
        healthy_hazelcast.restart(1)
        healthy_hazelcast.wait_cluster_safe()
        assert harness.kill(), harness.log_tail()

        harness.args["bounded"] = "true"
        harness.start()
        codes.append(harness.wait(timeout=600))
        assert codes[-1] == DriverExit.COMPLETED, harness.log_tail()
    finally:
        if harness.running():
            harness.kill()

    events = check_event_ids(postgres_dsn, "events", END)
    assert events.exact, events
    with psycopg.connect(postgres_dsn) as conn:
        rows = conn.execute("SELECT key, total, count FROM sums ORDER BY key").fetchall()
    assert {key: (total, count) for key, total, count in rows} == expected_sums(END, KEYS)
    assert prepared_transactions(postgres_dsn) == []
    published = [int(value) for _, value in broker.read_committed(out_topic)]
    assert len(published) == len(set(published)), "an event was published twice to Kafka"
    assert sorted(published) == list(range(END)), f"Kafka output lacks {END - len(published)}"

    # The last snapshot's offsets went to the consumer group: the end of every partition.
    reader = Consumer(
        {"bootstrap.servers": broker.internal_bootstrap, "group.id": group, "log_level": 0}
    )
    try:
        committed = reader.committed(
            [TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=30
        )
        ends = [reader.get_watermark_offsets(tp, timeout=30)[1] for tp in committed]
    finally:
        reader.close()
    assert [tp.offset for tp in committed] == ends
