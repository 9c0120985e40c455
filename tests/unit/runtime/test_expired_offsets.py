"""Restored offsets that retention deleted: the Kafka source's check, the message, the policy.

The source compares each restored position with its partition's earliest offset; the
pipeline asks it once per execution, before the offset is first used, and
``spec.expiredOffsets`` decides: Fail raises :class:`OffsetsExpired` (exit 71 in the driver),
Earliest goes on from the earliest offsets, logged and counted. No broker here: the source's
admin calls are replaced by the offsets a broker would give.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from snapshotjob_contract.observability import DRIVER_RECORDS_SKIPPED
from snapshotjob_contract.spec import ExpiredOffsetsPolicy, ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.metrics import DriverMetrics
from spark_runtime.pipeline import EpochPlan, Pipeline
from spark_runtime.sources import KafkaSource
from spark_runtime.sources import kafka as kafka_source
from spark_runtime.sources.base import (
    ExpiredOffsets,
    ExpiredRange,
    Offset,
    OffsetsExpired,
    Source,
)
from spark_runtime.state import StateContext

pytestmark = pytest.mark.unit


class _Brokers:
    """What the source's admin calls would return: the partitions and their earliest offsets."""

    def __init__(self, earliest: dict[str, dict[str, int]]) -> None:
        self.earliest = earliest
        self.asked: list[list[tuple[str, int]]] = []

    def attach(self, source: KafkaSource, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(source, "_partitions", self.partitions)
        monkeypatch.setattr(source, "_list_offsets", self.list_offsets)

    def partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, int(part))
            for topic, parts in self.earliest.items()
            for part in sorted(parts, key=int)
        ]

    def list_offsets(
        self, partitions: Sequence[TopicPartition], spec: object
    ) -> dict[str, dict[str, int]]:
        assert spec is kafka_source._EARLIEST
        self.asked.append([(tp.topic, tp.partition) for tp in partitions])
        found: dict[str, dict[str, int]] = {}
        for tp in partitions:
            found.setdefault(tp.topic, {})[str(tp.partition)] = self.earliest[tp.topic][
                str(tp.partition)
            ]
        return found


def test_kafka_finds_the_partitions_below_their_earliest_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = KafkaSource("127.0.0.1:1", ["orders", "refunds"])
    brokers = _Brokers({"orders": {"0": 25, "1": 0, "2": 7}, "refunds": {"0": 5}})
    brokers.attach(source, monkeypatch)
    restored = {"orders": {"0": 10, "1": 40, "2": 3}, "refunds": {"0": 5}, "gone": {"0": 1}}

    found = source.expired(restored)

    assert found is not None
    assert found.ranges == (
        ExpiredRange("orders-0", restored=10, earliest=25),
        ExpiredRange("orders-2", restored=3, earliest=7),
    )
    assert [r.lost for r in found.ranges] == [15, 4]
    assert found.lost == 19
    # Only the expired partitions move; a position at its earliest offset lost nothing.
    assert found.resumed == {
        "orders": {"0": 25, "1": 40, "2": 7},
        "refunds": {"0": 5},
        "gone": {"0": 1},
    }
    assert restored["orders"] == {"0": 10, "1": 40, "2": 3}, "the restored offset is not changed"
    # A topic the source no longer reads is not asked for (its partitions may not exist).
    assert brokers.asked == [[("orders", 0), ("orders", 1), ("orders", 2), ("refunds", 0)]]


def test_kafka_reports_nothing_when_every_position_is_retained(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = KafkaSource("127.0.0.1:1", ["orders"])
    brokers = _Brokers({"orders": {"0": 25, "1": 0}})
    brokers.attach(source, monkeypatch)
    assert source.expired({"orders": {"0": 25, "1": 3}}) is None
    # A new job's offset has no partition yet: nothing to ask the brokers.
    assert source.expired(source.initial_offset()) is None
    assert len(brokers.asked) == 1


def test_the_message_names_each_partition_its_offsets_and_the_records_gone() -> None:
    error = OffsetsExpired(
        "orders-in",
        [ExpiredRange("orders-0", 10, 25), ExpiredRange("orders-2", 3, 7)],
    )
    assert str(error) == (
        "Source orders-in: the restored offsets are below the earliest offsets the log still "
        "holds, so 19 records the job never read are gone (retention or deleted records): "
        "orders-0 restored offset 10, earliest 25, 15 records gone; orders-2 restored offset "
        "3, earliest 7, 4 records gone. Set spec.expiredOffsets to Earliest (local mode: "
        "--expired-offsets Earliest) to go on from the earliest offsets without them, or "
        "restore another snapshot"
    )
    assert error.source == "orders-in"
    assert [r.part for r in error.ranges] == ["orders-0", "orders-2"]


# --- the policy, applied by the pipeline -----------------------------------------------------


class _Spark:
    """Just enough of a session to define sources: no JVM in the unit tier."""

    def createDataFrame(self, rows: Any, schema: Any) -> object:  # noqa: N802 - Spark's name
        return object()


class _Numbers(Source):
    """Offsets are ``{"n": position}``; whatever is below ``earliest`` is gone upstream."""

    def __init__(self, earliest: int | None) -> None:
        self.earliest = earliest
        self.checks = 0
        self.failures = 0

    def schema(self, spark: SparkSession) -> StructType:
        return StructType([StructField("value", LongType())])

    def initial_offset(self) -> Offset:
        return {"n": 0}

    def next_offset(self, offset: Offset) -> Offset | None:
        return {"n": offset["n"] + 5}

    def is_exhausted(self, offset: Offset) -> bool:
        return False

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> Any:
        raise AssertionError("not read in these tests")

    def expired(self, offset: Offset) -> ExpiredOffsets | None:
        self.checks += 1
        if self.failures:
            self.failures -= 1
            raise ConnectionError("brokers unreachable")
        if self.earliest is None or offset["n"] >= self.earliest:
            return None
        return ExpiredOffsets(
            (ExpiredRange("numbers-0", offset["n"], self.earliest),), {"n": self.earliest}
        )


class _Plain(_Numbers):
    """A source that keeps the base class's ``expired``: its upstream never deletes."""

    expired = Source.expired


def _pipeline(policy: ExpiredOffsetsPolicy, metrics: DriverMetrics, **sources: Source) -> Pipeline:
    spark = cast(SparkSession, _Spark())
    pipeline = Pipeline(
        spark,
        StateContext(spark, 2, StoreAddress.embedded("/nonexistent")),
        ProcessingGuarantee.EXACTLY_ONCE,
        "uid",
        {},
        rows=metrics,
        expired_offsets=policy,
    )
    for name, source in sources.items():
        pipeline.readStream(source, name=name)
    return pipeline


def _restore(pipeline: Pipeline, name: str, offset: Offset) -> None:
    """Puts ``offset`` where a restore puts it: the source participant's offset."""
    (participant,) = [p for p in pipeline.participants if p.name == name]
    participant.offset = offset  # type: ignore[attr-defined]


def _plan(pipeline: Pipeline) -> EpochPlan | None:
    """Plans an epoch as the driver does: the offsets checked first."""
    pipeline.check_offsets()
    return pipeline.plan_epoch()


def _skipped(metrics: DriverMetrics, source: str) -> float | None:
    return metrics.registry.get_sample_value(DRIVER_RECORDS_SKIPPED.name, {"source": source})


def test_fail_stops_before_the_first_epoch_and_moves_nothing() -> None:
    metrics = DriverMetrics()
    source = _Numbers(earliest=25)
    pipeline = _pipeline(ExpiredOffsetsPolicy.FAIL, metrics, numbers=source)
    _restore(pipeline, "numbers", {"n": 10})
    # Only the driver's check ends the execution, not a plan made elsewhere (the test kit's).
    assert pipeline.plan_epoch() is not None

    with pytest.raises(OffsetsExpired) as raised:
        _plan(pipeline)

    assert raised.value.source == "numbers"
    assert raised.value.ranges == (ExpiredRange("numbers-0", 10, 25),)
    assert "numbers-0 restored offset 10, earliest 25, 15 records gone" in str(raised.value)
    assert _skipped(metrics, "numbers") is None, "nothing skipped"


def test_earliest_goes_on_from_the_earliest_offset_logged_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    metrics = DriverMetrics()
    source, plain = _Numbers(earliest=25), _Plain(earliest=None)
    pipeline = _pipeline(ExpiredOffsetsPolicy.EARLIEST, metrics, numbers=source, other=plain)
    _restore(pipeline, "numbers", {"n": 10})

    with caplog.at_level("WARNING", logger="spark_runtime.pipeline"):
        plan = _plan(pipeline)

    assert plan is not None
    assert plan.ranges["numbers"] == ({"n": 25}, {"n": 30}), "read on from the earliest offset"
    assert plan.ranges["other"] == ({"n": 0}, {"n": 5}), "a source that lost nothing is as it was"
    assert (
        "Skipped records no longer in the source source=numbers records=15 "
        "partitions=numbers-0 restored offset 10, earliest 25, 15 records gone "
        "policy=Earliest"
    ) in caplog.text
    assert _skipped(metrics, "numbers") == 15
    assert _skipped(metrics, "other") == 0, "every source checked gets its series"

    # Once per execution: later epochs do not ask again, and go on from the moved offset.
    again = _plan(pipeline)
    assert again is not None and again.ranges["numbers"] == ({"n": 25}, {"n": 30})
    assert source.checks == 1


def test_a_check_that_fails_is_asked_again_at_the_next_epoch() -> None:
    metrics = DriverMetrics()
    source = _Numbers(earliest=25)
    source.failures = 1
    pipeline = _pipeline(ExpiredOffsetsPolicy.FAIL, metrics, numbers=source)
    _restore(pipeline, "numbers", {"n": 10})

    # The driver retries a planning error for sourceLostSeconds, as next_offset's.
    with pytest.raises(ConnectionError):
        _plan(pipeline)
    with pytest.raises(OffsetsExpired):
        _plan(pipeline)
    assert source.checks == 2


def test_sources_that_never_lose_data_are_not_affected() -> None:
    metrics = DriverMetrics()
    pipeline = _pipeline(ExpiredOffsetsPolicy.FAIL, metrics, other=_Plain(earliest=None))
    _restore(pipeline, "other", {"n": 10})
    plan = _plan(pipeline)
    assert plan is not None and plan.ranges["other"] == ({"n": 10}, {"n": 15})
    assert _skipped(metrics, "other") == 0
