"""The driver's metrics: what each observation moves, read back from the registry.

No endpoint is started here (unit tests open no sockets); a real driver's endpoint is scraped
over HTTP by ``tests/integration/test_driver_metrics.py``. What a snapshot came to is read
from the real coordinator running on the protocol's in-memory fakes, with their faults making
each step of the taking procedure fail.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, cast

import pytest
from pyspark.sql import DataFrame

from snapshot_protocol import ChunkWriter, CoordinatorState, SnapshotOutcome
from snapshotjob_contract.observability import (
    DRIVER_EPOCH_DURATION,
    DRIVER_LAST_SNAPSHOT_TIME,
    DRIVER_METRICS,
    DRIVER_RESTORE_DURATION,
    DRIVER_ROWS_IN,
    DRIVER_ROWS_OUT,
    DRIVER_SNAPSHOT_CHUNKS,
    DRIVER_SNAPSHOT_DURATION,
    DRIVER_SNAPSHOT_FAILURES,
    DRIVER_SNAPSHOT_INTERVAL,
    DRIVER_SNAPSHOT_SIZE,
    DRIVER_SNAPSHOTS,
)
from snapshotjob_contract.record import SnapshotStats
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.lineage import Checkpointed
from spark_runtime.metrics import DriverMetrics, SnapshotFailure, taken_snapshot
from spark_runtime.sinks.base import Sink, TransactionalSink
from spark_runtime.sinks.participant import SinkParticipant
from spark_runtime.sources import KafkaSource, PostgresSource, SequenceSource
from tests.unit.protocol.fakes import Cluster, Fault, Op

pytestmark = pytest.mark.unit


def value(metrics: DriverMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def test_every_defined_metric_is_served_with_its_type() -> None:
    families = {family.name: family.type for family in DriverMetrics().registry.collect()}
    # prometheus_client names a counter's family without its _total suffix.
    assert families == {m.name.removesuffix("_total"): m.type.value for m in DRIVER_METRICS}


def test_a_new_execution_shows_its_interval_and_no_snapshot_yet() -> None:
    metrics = DriverMetrics()
    metrics.configured(2.5)
    assert value(metrics, DRIVER_SNAPSHOT_INTERVAL.name) == 2.5
    assert value(metrics, DRIVER_SNAPSHOTS.name) == 0
    assert value(metrics, DRIVER_LAST_SNAPSHOT_TIME.name) == 0
    assert value(metrics, DRIVER_RESTORE_DURATION.name) == 0
    assert value(metrics, f"{DRIVER_SNAPSHOT_DURATION.name}_count") == 0
    # Every reason is there from the start, so increase() sees the first failure.
    for reason in SnapshotFailure:
        assert value(metrics, DRIVER_SNAPSHOT_FAILURES.name, reason=reason.value) == 0


def test_a_snapshot_taken_moves_count_figures_and_time() -> None:
    metrics = DriverMetrics()
    metrics.snapshot_taken(0.4, size_bytes=1200, chunks=7, at_unix_s=1_700_000_000.5)
    metrics.snapshot_attempted(0.6, SnapshotStats(3, 1_700_000_010_000, 0, 900, 12, 5))
    assert value(metrics, DRIVER_SNAPSHOTS.name) == 2
    assert value(metrics, DRIVER_SNAPSHOT_SIZE.name) == 900
    assert value(metrics, DRIVER_SNAPSHOT_CHUNKS.name) == 5
    assert value(metrics, DRIVER_LAST_SNAPSHOT_TIME.name) == 1_700_000_010.0
    assert value(metrics, f"{DRIVER_SNAPSHOT_DURATION.name}_count") == 2
    assert value(metrics, f"{DRIVER_SNAPSHOT_DURATION.name}_sum") == pytest.approx(1.0)


def test_a_failed_snapshot_is_timed_and_counted_by_reason_and_leaves_the_last_one() -> None:
    metrics = DriverMetrics()
    metrics.snapshot_taken(0.4, size_bytes=1200, chunks=7, at_unix_s=100.0)
    metrics.snapshot_failed(2.0, SnapshotFailure.PHASE_ONE_FAILED)
    metrics.snapshot_attempted(1.0, SnapshotFailure.PHASE_ONE_FAILED)
    failures = DRIVER_SNAPSHOT_FAILURES.name
    assert value(metrics, failures, reason="PhaseOneFailed") == 2
    assert value(metrics, failures, reason="StartFailed") == 0
    assert value(metrics, DRIVER_SNAPSHOTS.name) == 1
    assert value(metrics, DRIVER_SNAPSHOT_SIZE.name) == 1200
    assert value(metrics, DRIVER_LAST_SNAPSHOT_TIME.name) == 100.0
    assert value(metrics, f"{DRIVER_SNAPSHOT_DURATION.name}_count") == 3


def test_a_restore_from_a_snapshot_resets_the_restore_points_age() -> None:
    fresh, restarted = DriverMetrics(), DriverMetrics()
    fresh.restored(0.2, None)
    restarted.restored(3.5, 1_700_000_000.0)
    assert value(fresh, DRIVER_RESTORE_DURATION.name) == 0.2
    assert value(fresh, DRIVER_LAST_SNAPSHOT_TIME.name) == 0
    assert value(restarted, DRIVER_RESTORE_DURATION.name) == 3.5
    assert value(restarted, DRIVER_LAST_SNAPSHOT_TIME.name) == 1_700_000_000.0


def test_epochs_and_rows_are_counted() -> None:
    metrics = DriverMetrics()
    for seconds in (0.3, 0.7, 12.0):
        metrics.epoch_done(seconds)
    metrics.rows_in("numbers", 50)
    metrics.rows_in("numbers", 25)
    metrics.rows_out("sums", 3)
    assert value(metrics, f"{DRIVER_EPOCH_DURATION.name}_count") == 3
    assert value(metrics, f"{DRIVER_EPOCH_DURATION.name}_bucket", le="1.0") == 2
    assert value(metrics, f"{DRIVER_ROWS_IN.name}", source="numbers") == 75
    assert value(metrics, f"{DRIVER_ROWS_OUT.name}", sink="sums") == 3
    assert value(metrics, f"{DRIVER_ROWS_OUT.name}", sink="other") is None


def test_closing_an_endpoint_never_started_does_nothing() -> None:
    DriverMetrics().close()


# --- What a snapshot came to, from the real coordinator ---------------------------------------


def _taken_with(faults: Sequence[tuple[Op, int, Fault]]) -> SnapshotStats | SnapshotFailure:
    cluster = Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    driver.pipeline.process(5)
    cluster.faults.arm(faults)
    outcome = driver.coordinator.take_snapshot()
    return taken_snapshot(outcome, driver.coordinator)


def test_a_successful_snapshot_gives_its_figures_from_the_record() -> None:
    cluster = Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    driver.pipeline.process(5)
    outcome = driver.coordinator.take_snapshot()
    taken = taken_snapshot(outcome, driver.coordinator)
    assert isinstance(taken, SnapshotStats)
    assert taken.snapshot_id == outcome.snapshot_id
    assert taken.num_bytes == outcome.num_bytes > 0
    assert taken.num_chunks > 0


@pytest.mark.parametrize(
    ("fault", "reason"),
    [
        ((Op.RECORD_SAFE, 0, Fault.FAILED), SnapshotFailure.START_FAILED),
        ((Op.CLEAR, 0, Fault.FAILED), SnapshotFailure.START_FAILED),
        ((Op.CHUNK_PUT, 0, Fault.FAILED), SnapshotFailure.PHASE_ONE_FAILED),
        ((Op.VALIDATION_PUT, 0, Fault.FAILED), SnapshotFailure.VALIDATION_RECORD_FAILED),
        ((Op.RECORD_SAFE, 1, Fault.FAILED), SnapshotFailure.RECORD_NOT_SAFE),
    ],
    ids=lambda case: case.value if isinstance(case, SnapshotFailure) else None,
)
def test_each_failing_step_has_its_own_reason(
    fault: tuple[Op, int, Fault], reason: SnapshotFailure
) -> None:
    """Keeps the mapping in step with the coordinator's failure texts: none is Unknown."""
    assert _taken_with([fault]) is reason


def test_a_failure_text_naming_no_step_is_unknown() -> None:
    cluster = Cluster()
    driver = cluster.start_driver()
    driver.coordinator.restore()
    outcome = driver.coordinator.take_snapshot()
    odd = SnapshotOutcome(
        outcome.snapshot_id, outcome.kind, outcome.map_name, None, False, "something new"
    )
    assert taken_snapshot(odd, driver.coordinator) is SnapshotFailure.UNKNOWN
    assert driver.coordinator.state is CoordinatorState.PHASE_2_PENDING


# --- Rows read: what the sources' offsets tell ---------------------------------------------------


def test_the_sequence_counts_its_range_exactly() -> None:
    source = SequenceSource(rows_per_epoch=50, end=120)
    start = source.initial_offset()
    end = source.next_offset(start)
    assert source.rows_between(start, end) == 50


def test_kafka_counts_the_offsets_of_every_partitions_range() -> None:
    source = KafkaSource("127.0.0.1:1", ["a", "b"])
    start = {"a": {"0": 10, "1": 4}, "b": {}}
    # Partition b/0 just entered at its earliest offset: an empty range.
    end = {"a": {"0": 15, "1": 4}, "b": {"0": 7}}
    assert source.rows_between(start, end) == 5


class _Rows:
    def __init__(self, row: tuple[Any, ...]) -> None:
        self._row = row

    def fetchone(self) -> tuple[Any, ...]:
        return self._row


class _Connection:
    """Answers next_offset's query like a server with 40 new rows, the last id 180."""

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, statement: str, params: object = None) -> _Rows:
        assert "count(*)" in statement
        return _Rows((180, 40))


def test_postgres_counts_the_range_with_the_query_that_found_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(
        "spark_runtime.sources.postgres.psycopg.connect", lambda *a, **k: _Connection()
    )
    source = PostgresSource("dbname=x", "events")
    start = {"lastId": 100}
    end = source.next_offset(start)
    assert end == {"lastId": 180}
    assert source.rows_between(start, end) == 40
    # Another range was not counted: no guess.
    assert source.rows_between({"lastId": 90}, end) is None


# --- Rows written: what the sinks count while writing --------------------------------------------


class _CountingSink(TransactionalSink):
    """Writes nothing; reports the rows it was told to, as a sink that counts would."""

    def __init__(self, rows: int | None) -> None:
        self.rows = rows

    def write(self, frame: DataFrame) -> int | None:
        return self.rows

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        return [f"txn-{snapshot_id}"]

    def prepared_rows(self, transaction_ids: Sequence[str]) -> int | None:
        return self.rows

    def commit(self, transaction_ids: Sequence[str]) -> None:
        return None

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        return None

    def abort(self, snapshot_id: int) -> None:
        return None

    def roll_back_older(self, snapshot_id: int) -> list[str]:
        return []

    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        return [], []


def _participant(
    sink: Sink, guarantee: ProcessingGuarantee
) -> tuple[SinkParticipant, list[tuple[str, int]]]:
    published: list[tuple[str, int]] = []
    participant = SinkParticipant("out", sink, guarantee, lambda n, r: published.append((n, r)))
    return participant, published


def _frame() -> DataFrame:
    return cast(DataFrame, object())


@pytest.mark.parametrize(("rows", "reported"), [(4, [("out", 4)]), (None, [])])
def test_a_sink_writing_every_epoch_reports_what_it_counted(
    rows: int | None, reported: list[tuple[str, int]]
) -> None:
    participant, published = _participant(_CountingSink(rows), ProcessingGuarantee.AT_LEAST_ONCE)
    participant.accept(0, _frame())
    assert published == reported


def _prepared(participant: SinkParticipant, snapshot_id: int) -> None:
    # Buffering an epoch materialises it in Spark; the buffer is filled by hand instead.
    participant._pending = [Checkpointed(_frame())]
    writer = ChunkWriter(Cluster().snapshots, "map", snapshot_id, participant.name)
    (chunk,) = participant.save_and_prepare(snapshot_id, writer, export_only=False)
    assert chunk.num_keys == 1


def test_a_transactional_sink_reports_its_rows_when_they_are_committed() -> None:
    participant, published = _participant(_CountingSink(6), ProcessingGuarantee.EXACTLY_ONCE)
    _prepared(participant, 0)
    assert published == []
    participant.commit_finish(0, success=True)
    assert published == [("out", 6)]


def test_rolled_back_or_uncounted_rows_are_not_reported() -> None:
    participant, published = _participant(_CountingSink(6), ProcessingGuarantee.EXACTLY_ONCE)
    _prepared(participant, 0)
    participant.commit_finish(0, success=False)
    uncounted, nothing = _participant(_CountingSink(None), ProcessingGuarantee.EXACTLY_ONCE)
    _prepared(uncounted, 1)
    uncounted.commit_finish(1, success=True)
    assert published == nothing == []
