"""End to end with a secured Kafka on kind: a SASL_SSL broker Pod, executors reading it,
exactly-once out of it.

Why this test: a streaming job on Kubernetes reads Kafka from inside the cluster, with its
executors fetching their offset ranges in parallel, and production brokers are secured. The
broker here is a Pod of the test-only image ``snapshotjob/test-kafka-broker``
(``examples/kubernetes/kafka-sasl-ssl.yaml``, Kafka's jars from Maven Central started by
``hack/images/kafka-broker``), as no container registry offers one: its clients' listener
``kafka:9092`` is SASL_SSL with SCRAM-SHA-512 and a certificate of a CA the test makes
(:func:`testbed.kafka_tls.server_tls`). The test creates the Secrets ``kafka-tls`` (certificate,
key, CA) and ``kafka-user`` (a random password) first; the job reaches the broker through
``spec.kafka`` alone, with Secret references: the driver's librdkafka clients and Spark's Java
reader on the executors (``driver_read_max_records: 0``) both go through the secured listener.

The job is ``examples/kafka_sum.py``: Kafka -> running sum per key -> PostgreSQL, plus every event
appended to a table without a key (a replay would be an extra row) and to a Kafka topic
through the transactional sink, read back with ``read_committed``. Its driver Pod is deleted
after the first snapshot: the next execution must restore it, and the output must hold every
event exactly once. Records are produced and read back by a Python client run with
``kubectl exec`` in a container of the e2e job image beside the broker (it has
``confluent_kafka``), on the broker's PLAINTEXT listener ``127.0.0.1:9094``, which only the
Pod reaches. At the end the password is searched for in the logs of the job's Pods left and
the operator's, in the namespace's Events and in the job's object with its status.
"""

from __future__ import annotations

import json
import secrets
from collections import Counter

import pytest

from testbed.kafka_tls import server_tls
from tests.e2e.release import (
    CLIENT_CONTAINER,
    REPO_ROOT,
    SUM_KEYS,
    Release,
    Step,
    assert_exactly_once,
    deploy_example,
    next_execution,
    wait_phase,
    wait_snapshot,
)
from tests.e2e.secret_search import SecretSearch

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

KAFKA_MANIFEST = REPO_ROOT / "examples" / "kubernetes" / "kafka-sasl-ssl.yaml"
EVENTS = 6000
PARTITIONS = 4
KAFKA_USER = "snapshotjob"
"""The SCRAM user of the manifest (``SJ_KAFKA_SCRAM_USERNAME``)."""
IN_POD_BOOTSTRAP = "127.0.0.1:9094"
"""The broker's PLAINTEXT listener: reachable from within its Pod only, for the test's
clients run there."""

_PRODUCE = """
import sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
bootstrap, topic, out_topic = sys.argv[1], sys.argv[2], sys.argv[3]
events, partitions = int(sys.argv[4]), int(sys.argv[5])
admin = AdminClient({"bootstrap.servers": bootstrap})
for name, future in admin.create_topics(
    [NewTopic(topic, partitions, 1), NewTopic(out_topic, partitions, 1)]
).items():
    future.result(60)
producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
for n in range(events):
    producer.produce(topic, key=str(n), value=str(n))
    producer.poll(0)
assert producer.flush(60) == 0
print("produced", events)
"""

_READ_COMMITTED = """
import json, sys
from confluent_kafka import Consumer, KafkaError, TopicPartition
bootstrap, topic = sys.argv[1], sys.argv[2]
consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "e2e-check",
                     "isolation.level": "read_committed", "enable.partition.eof": True,
                     "enable.auto.commit": False})
values = []
for partition in sorted(consumer.list_topics(topic, timeout=30).topics[topic].partitions):
    consumer.assign([TopicPartition(topic, partition, 0)])
    while True:
        message = consumer.poll(30)
        assert message is not None, f"no end of {topic}[{partition}]"
        if message.error():
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
            break
        values.append(int(message.value()))
consumer.close()
print(json.dumps(values))
"""


def _deploy_kafka(release: Release, broker_image: str) -> str:
    """Creates the broker's Secrets ``kafka-tls`` and ``kafka-user``, then the secured broker;
    returns the password."""
    ns = release.namespace
    tls = server_tls(["kafka", f"kafka.{ns}.svc", f"kafka.{ns}.svc.cluster.local"])
    password = secrets.token_hex(16)  # letters and digits: what the launcher accepts
    for name, kind, data in (
        (
            "kafka-tls",
            "kubernetes.io/tls",
            {"tls.crt": tls.cert_pem, "tls.key": tls.key_pem, "ca.crt": tls.ca_pem},
        ),
        ("kafka-user", "Opaque", {"password": password}),
    ):
        release.apply(
            {
                "apiVersion": "v1",
                "kind": "Secret",
                "type": kind,
                "metadata": {"name": name, "namespace": ns},
                "stringData": data,
            }
        )
    deploy_example(release, KAFKA_MANIFEST, "kafka", broker_image, client=True)
    return password


def _python_beside_broker(release: Release, script: str, *args: str) -> str:
    """Runs ``script`` in the broker's Pod with the in-Pod bootstrap servers as its first
    argument, then ``args``."""
    return release.kubectl(
        "exec", "kafka-0", "-c", CLIENT_CONTAINER, "--", "python", "-c", script,
        IN_POD_BOOTSTRAP, *args, timeout=180,
    )  # fmt: skip


def test_kafka_in_the_cluster_to_postgres_and_kafka_exactly_once_across_a_lost_driver(
    release: Release, postgres: str, service_images: dict[str, str]
) -> None:
    job = "kafka-sum"
    table = job.replace("-", "_")
    topic, out_topic = f"{table}_in", f"{table}_out"
    with Step("kafka-ready"):
        password = _deploy_kafka(release, service_images["test-kafka-broker"])
    with Step("kafka-produced"):
        out = _python_beside_broker(
            release, _PRODUCE, topic, out_topic, str(EVENTS), str(PARTITIONS)
        )
        assert f"produced {EVENTS}" in out, out

    with Step("kafka-first-snapshot"):
        release.apply_job(
            job,
            {
                "bootstrap": "kafka:9092",
                "topic": topic,
                "dsn": postgres,
                "table": f"{table}_sums",
                "events_table": f"{table}_events",
                "out_topic": out_topic,
                "keys": SUM_KEYS,
                # 6 epochs or more, a snapshot after each (about 5 s on kind): the job is
                # still running when its driver is lost after the first.
                "max_rows_per_epoch": EVENTS // 6,
                "group_id": f"{table}-group",
                "bounded": "true",
                # The executor Pods read the ranges (epochs this small would be read by the
                # driver's consumer otherwise): the path a job with larger epochs takes.
                "driver_read_max_records": 0,
            },
            pipeline="examples.kafka_sum",
            kafka={
                "securityProtocol": "SASL_SSL",
                "sasl": {
                    "mechanism": "SCRAM-SHA-512",
                    "username": KAFKA_USER,
                    "passwordSecret": {"name": "kafka-user", "key": "password"},
                },
                "tls": {"caSecret": {"name": "kafka-tls", "key": "ca.crt"}},
            },
        )
        running = wait_snapshot(release, job, 0, timeout=300)

    with Step("kafka-driver-pod-deleted"):
        driver = release.current_driver(job)
        release.kubectl("delete", "pod", driver["metadata"]["name"], "--wait=false")
        next_execution(release, job, running)

    with Step("kafka-completed"):
        done = wait_phase(release, job, {"COMPLETED"}, timeout=600)
    assert done["status"]["phase"] == "COMPLETED", done["status"]
    assert_exactly_once(release, job, EVENTS)
    published = json.loads(
        _python_beside_broker(release, _READ_COMMITTED, out_topic).splitlines()[-1]
    )
    repeated = {n: c for n, c in Counter(published).items() if c > 1}
    assert sorted(published) == list(range(EVENTS)), (
        f"{len(published)} records, {len(repeated)} repeated (e.g. {list(repeated)[:5]}), "
        f"{len(set(range(EVENTS)) - set(published))} missing"
    )

    with Step("kafka-no-password-in-logs-events-status"):
        leaks = SecretSearch({"the Kafka password": password}).search(release, job)
        assert leaks == [], leaks
