"""Records behind per source, and the restore point's time a restore leaves on the age gauge.

The lag is found when an epoch is planned, from what the source's ``next_offset`` learnt:
Kafka's latest offsets, here given by a stand-in for its admin calls (no broker, no JVM).
The age gauge after a restore is the restored snapshot's time from the execution record,
so it does not restart at 0 with each execution.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from confluent_kafka import TopicPartition
from pyspark.sql import SparkSession
from pyspark.sql.types import LongType, StructField, StructType

from snapshotjob_contract.observability import (
    DRIVER_LAST_SNAPSHOT_TIME,
    DRIVER_SOURCE_RECORDS_BEHIND,
)
from snapshotjob_contract.record import ExecutionRecord, SnapshotStats
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.metrics import DriverMetrics, restore_point_time
from spark_runtime.pipeline import Pipeline
from spark_runtime.sources import KafkaSource
from spark_runtime.sources import kafka as kafka_source
from spark_runtime.sources.base import Offset, Source
from spark_runtime.sources.kafka_lag import records_behind
from spark_runtime.state import StateContext

pytestmark = pytest.mark.unit


def behind(metrics: DriverMetrics, source: str) -> float | None:
    return metrics.registry.get_sample_value(DRIVER_SOURCE_RECORDS_BEHIND.name, {"source": source})


def test_the_lag_sums_each_known_partitions_distance_to_its_latest_offset() -> None:
    latest = {"orders": {"0": 120, "1": 40, "2": 9}, "refunds": {"0": 5}}
    position = {"orders": {"0": 100, "1": 40}, "refunds": {"0": 2}, "gone": {"0": 7}}
    # orders-2 is not in the position yet (it enters at its earliest offset, which the plan
    # did not list); a topic the brokers no longer list has nothing behind.
    assert records_behind(latest, position) == 20 + 0 + 3
    assert records_behind(latest, {"orders": {"0": 130}}) == 0, "never below 0"
    assert records_behind(latest, {"orders": {}}) == 0


class _Brokers:
    """What a Kafka source's admin calls would return: partitions, latest and earliest."""

    def __init__(self, latest: dict[str, dict[str, int]]) -> None:
        self.latest = latest
        self.listed = 0

    def attach(self, source: KafkaSource, monkeypatch: pytest.MonkeyPatch) -> None:
        monkeypatch.setattr(source, "_partitions", self.partitions)
        monkeypatch.setattr(source, "_list_offsets", self.list_offsets)

    def partitions(self) -> list[TopicPartition]:
        return [
            TopicPartition(topic, int(part))
            for topic, parts in self.latest.items()
            for part in parts
        ]

    def list_offsets(
        self, partitions: Sequence[TopicPartition], spec: object
    ) -> dict[str, dict[str, int]]:
        self.listed += 1
        found: dict[str, dict[str, int]] = {}
        for tp in partitions:
            offset = self.latest[tp.topic][str(tp.partition)] if spec is kafka_source._LATEST else 0
            found.setdefault(tp.topic, {})[str(tp.partition)] = offset
        return found


def test_kafka_answers_from_the_latest_offsets_its_plan_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = KafkaSource("127.0.0.1:1", ["orders"], max_rows_per_epoch=10)
    brokers = _Brokers({"orders": {"0": 50, "1": 30}})
    brokers.attach(source, monkeypatch)
    position = {"orders": {"0": 20, "1": 30}}
    assert source.records_behind(position) is None, "no plan yet: unknown"

    end = source.next_offset(position)
    listed = brokers.listed
    assert end == {"orders": {"0": 30, "1": 30}}
    assert source.records_behind(position) == 30
    assert source.records_behind(end) == 20
    assert brokers.listed == listed, "the lag asks the brokers nothing of its own"

    brokers.latest["orders"]["1"] = 45  # New records: seen at the next plan.
    source.next_offset(end)
    assert source.records_behind(end) == 20 + 15


class _Spark:
    """Just enough of a session to define sources: no JVM in the unit tier."""

    def createDataFrame(self, rows: Any, schema: Any) -> object:  # noqa: N802 - Spark's name
        return object()


class _Numbers(Source):
    """Offsets are ``{"n": position}``; the upstream holds ``end`` records, 5 per epoch."""

    def __init__(self, end: int, *, knows_its_end: bool = True) -> None:
        self.end = end
        self.knows_its_end = knows_its_end

    def schema(self, spark: SparkSession) -> StructType:
        return StructType([StructField("value", LongType())])

    def initial_offset(self) -> Offset:
        return {"n": 0}

    def next_offset(self, offset: Offset) -> Offset | None:
        return {"n": min(offset["n"] + 5, self.end)} if offset["n"] < self.end else None

    def is_exhausted(self, offset: Offset) -> bool:
        return False

    def read(self, spark: SparkSession, start: Offset, end: Offset) -> Any:
        raise AssertionError("not read in these tests")

    def records_behind(self, offset: Offset) -> int | None:
        return self.end - int(offset["n"]) if self.knows_its_end else None


def test_each_plan_reports_the_lag_of_the_sources_that_know_it() -> None:
    metrics = DriverMetrics()
    spark = cast(SparkSession, _Spark())
    pipeline = Pipeline(
        spark,
        StateContext(spark, 2, StoreAddress.embedded("/nonexistent")),
        ProcessingGuarantee.EXACTLY_ONCE,
        "uid",
        {},
        rows=metrics,
    )
    numbers, files = _Numbers(12), _Numbers(12, knows_its_end=False)
    pipeline.readStream(numbers, name="numbers")
    pipeline.readStream(files, name="files")
    (participant,) = [p for p in pipeline.participants if p.name == "numbers"]

    plan = pipeline.plan_epoch()
    assert plan is not None
    assert behind(metrics, "numbers") == 12, "behind by what the position has not read"
    assert behind(metrics, "files") is None, "unknown: no series"

    participant.offset = plan.ranges["numbers"][1]  # type: ignore[attr-defined]  # the epoch ran
    pipeline.plan_epoch()
    assert behind(metrics, "numbers") == 7
    participant.offset = {"n": 12}  # type: ignore[attr-defined]
    assert pipeline.plan_epoch() is not None  # "files" still has records
    assert behind(metrics, "numbers") == 0, "caught up"


def _stats(snapshot_id: int, start_ms: int) -> SnapshotStats:
    return SnapshotStats(snapshot_id, start_ms, start_ms + 300, 100, 10, 2)


def test_a_restore_leaves_the_restored_snapshots_time_on_the_age_gauge() -> None:
    now = 1_767_225_900.0
    taken = ExecutionRecord(snapshot_id=4, ongoing_snapshot_id=4, data_map_index=0)
    restored = ExecutionRecord(
        snapshot_id=4,
        ongoing_snapshot_id=4,
        data_map_index=0,
        snapshot_stats=_stats(4, 1_767_225_600_000),
    )
    assert restore_point_time(restored, now) == 1_767_225_600.0, "the snapshot's start"
    # A later attempt failed: the restore point is older than its start, which is shown.
    failed_later = ExecutionRecord(
        snapshot_id=4,
        ongoing_snapshot_id=5,
        data_map_index=0,
        snapshot_stats=_stats(5, 1_767_225_700_000),
        last_snapshot_failure="1st phase failed: broken sink",
    )
    assert restore_point_time(failed_later, now) == 1_767_225_700.0
    # No figures, or a job restored from an export: its history starts at the restore.
    assert restore_point_time(taken, now) == now
    assert restore_point_time(ExecutionRecord(), now) == now
    assert restore_point_time(None, now) == now

    metrics = DriverMetrics()
    metrics.restored(2.0, restore_point_time(restored, now))
    value = metrics.registry.get_sample_value(DRIVER_LAST_SNAPSHOT_TIME.name)
    assert value == 1_767_225_600.0, "the age goes on from the restored snapshot"
