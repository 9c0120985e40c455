"""End to end with Kafka on kind: a broker Pod, executors reading it, exactly-once out of it.

Why this test: a streaming job on Kubernetes reads Kafka from inside the cluster, with its
executors fetching their offset ranges in parallel. The broker here is a Pod of the test-only
image ``snapshotjob/test-kafka-broker`` (``examples/kubernetes/kafka.yaml``, Kafka's jars from
Maven Central started by ``hack/images/kafka-broker``), as no container registry offers one.
The job is ``examples/kafka_sum.py``: Kafka -> running sum per key -> PostgreSQL, plus every event
appended to a table without a key (a replay would be an extra row) and to a Kafka topic
through the transactional sink, read back with ``read_committed``. Its driver Pod is deleted
after the first snapshot: the next execution must restore it, and the output must hold every
event exactly once. Records are produced and read back by a Python client run with
``kubectl exec`` in a container of the e2e job image beside the broker (it has
``confluent_kafka``).
"""

from __future__ import annotations

import json
from collections import Counter

import pytest

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

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

KAFKA_MANIFEST = REPO_ROOT / "examples" / "kubernetes" / "kafka.yaml"
EVENTS = 6000
PARTITIONS = 4

_PRODUCE = """
import sys
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
topic, out_topic = sys.argv[1], sys.argv[2]
events, partitions = int(sys.argv[3]), int(sys.argv[4])
admin = AdminClient({"bootstrap.servers": "kafka:9092"})
for name, future in admin.create_topics(
    [NewTopic(topic, partitions, 1), NewTopic(out_topic, partitions, 1)]
).items():
    future.result(60)
producer = Producer({"bootstrap.servers": "kafka:9092", "enable.idempotence": True})
for n in range(events):
    producer.produce(topic, key=str(n), value=str(n))
    producer.poll(0)
assert producer.flush(60) == 0
print("produced", events)
"""

_READ_COMMITTED = """
import json, sys
from confluent_kafka import Consumer, KafkaError, TopicPartition
topic = sys.argv[1]
consumer = Consumer({"bootstrap.servers": "kafka:9092", "group.id": "e2e-check",
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


def _deploy_kafka(release: Release, broker_image: str) -> None:
    deploy_example(release, KAFKA_MANIFEST, "kafka", broker_image, client=True)


def _python_beside_broker(release: Release, script: str, *args: str) -> str:
    return release.kubectl(
        "exec", "kafka-0", "-c", CLIENT_CONTAINER, "--", "python", "-c", script, *args,
        timeout=180,
    )  # fmt: skip


def test_kafka_in_the_cluster_to_postgres_and_kafka_exactly_once_across_a_lost_driver(
    release: Release, postgres: str, service_images: dict[str, str]
) -> None:
    job = "kafka-sum"
    table = job.replace("-", "_")
    topic, out_topic = f"{table}_in", f"{table}_out"
    with Step("kafka-ready"):
        _deploy_kafka(release, service_images["test-kafka-broker"])
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
