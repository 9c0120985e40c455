"""The Kafka sink's pure rules: names, markers, and the columns it accepts.

The sink itself runs against a real broker in ``tests/integration/test_kafka_sink.py``.
"""

from __future__ import annotations

import re

import pytest
from pyspark.sql.types import BinaryType, LongType, StringType, StructField, StructType

from spark_runtime.sinks.kafka import (
    KafkaSink,
    check_schema,
    commit_topic_name,
    latest_marker,
    marker_value,
    transactional_id,
)

pytestmark = pytest.mark.unit


def test_commit_topic_names_use_only_kafkas_legal_characters() -> None:
    name = commit_topic_name("0b5e-uid", "sink/kafka out.1_x")
    assert re.fullmatch(r"[a-zA-Z0-9._-]{1,249}", name)
    assert name == "sj-commits-0b5e-uid-sink-kafka-out-1-x"
    assert len(commit_topic_name("u" * 300, "s")) <= 249


def test_each_partition_keeps_its_transactional_id_across_executions() -> None:
    assert transactional_id("uid", "out", 2) == transactional_id("uid", "out", 2)
    assert len({transactional_id("uid", "out", p) for p in range(4)}) == 4
    assert transactional_id("uid", "out", 0) != transactional_id("other", "out", 0)


def test_the_latest_marker_is_the_last_of_the_partitions_own() -> None:
    mine, other = "sj-uid-out-0", "sj-uid-out-1"
    records = [
        (mine.encode(), marker_value(3, 10)),
        (other.encode(), marker_value(9, 1)),
        (mine.encode(), marker_value(4, 0)),
        (None, b"not a marker"),
        (other.encode(), marker_value(11, 1)),
    ]
    assert latest_marker(records, mine) == 4
    assert latest_marker(records, other) == 11
    assert latest_marker(records, "sj-uid-out-2") is None
    assert latest_marker([], mine) is None


def _schema(**columns: object) -> StructType:
    return StructType([StructField(name, kind) for name, kind in columns.items()])  # type: ignore[arg-type]


def test_output_needs_a_string_or_binary_value_and_may_have_a_key() -> None:
    assert check_schema(_schema(value=StringType()), "t") is False
    assert check_schema(_schema(key=BinaryType(), value=BinaryType()), "t") is True
    with pytest.raises(ValueError, match=r"needs a 'value' column .* has \['id'\]"):
        check_schema(_schema(id=LongType()), "t")
    with pytest.raises(ValueError, match=r"'key' as string or binary, not bigint; cast it"):
        check_schema(_schema(key=LongType(), value=StringType()), "t")


def test_another_jobs_staged_output_is_published_under_that_jobs_markers() -> None:
    sink = KafkaSink("127.0.0.1:9092", "out", security=None)
    # What open() sets: the job's identity and its default commit topic.
    sink._job_uid, sink._name = "job-a", "events"
    sink.commit_topic = commit_topic_name("job-a", "events")
    assert sink.as_writer("job-a") is sink
    writer = sink.as_writer("job-b")
    assert (writer._job_uid, writer.commit_topic) == ("job-b", commit_topic_name("job-b", "events"))
    assert (sink._job_uid, sink.commit_topic) == ("job-a", commit_topic_name("job-a", "events"))
    given = KafkaSink("127.0.0.1:9092", "out", commit_topic="markers", security=None)
    given._job_uid, given._name = "job-a", "events"
    assert given.as_writer("job-b").commit_topic == "markers"
