"""Termination requests, signals and fencing in a running driver, with real servers.

The driver serves the operator's requests at epoch boundaries: graceful modes take a terminal
snapshot whose 2nd phase publishes the sink's output, forceful modes stop at once. A driver
whose record was claimed by a newer execution must stop as a zombie without publishing.

No operator runs here: the tests play it. The driver runs in-process in local mode, its
record in a file (:class:`~spark_runtime.file_record_store.FileRecordStore`); a test hands
it a termination request through its ``poll_termination`` callback, or claims the record
file for a newer execution, where the operator would write the SnapshotJob's status.
Hazelcast, PostgreSQL and Spark are real. The same requests written by the operator into
the status of a real API server are served in ``tests/integration/test_driver_kubernetes.py``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest
from pyspark.sql import SparkSession
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from snapshot_protocol import (
    JobIdentity,
    TerminationMode,
    TerminationRequest,
    export_map_name,
    validate_snapshot,
)
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings, StopSignals
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.sinks import PostgresSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline
from testbed.hazelcast import HazelcastCluster

EPOCH_ROWS = 100


@pytest.fixture
def store(healthy_hazelcast: HazelcastCluster) -> Iterator[HazelcastSnapshotStore]:
    client = connect([n.address for n in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    yield HazelcastSnapshotStore(client)
    client.shutdown()


def _build(dsn: str) -> Callable[[Pipeline], None]:
    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=EPOCH_ROWS), name="numbers")
        keyed = numbers.select((F.col("value") % 3).alias("key"), "value")
        counts = keyed.groupBy("key").agg(F.count("*").alias("n"), name="counts")
        counts.writeStream(PostgresSink(dsn, "counts", ["key"]), name="postgres")

    return build


def _driver(
    spark: SparkSession,
    cluster: HazelcastCluster,
    store: HazelcastSnapshotStore,
    records: FileRecordStore,
    dsn: str,
    *,
    after_epochs: int,
    request: TerminationRequest | None = None,
    signals: StopSignals | None = None,
    before_poll: Callable[[], None] | None = None,
) -> Driver:
    settings = DriverSettings(
        job=JobIdentity(records.path.stem, "test", 1),
        guarantee=ProcessingGuarantee.EXACTLY_ONCE,
        snapshot_interval_ms=10**9,  # only terminal snapshots
        state_partitions=4,
        store=StoreAddress(tuple(n.address for n in cluster.nodes), cluster.cluster_name),
        idle_sleep_s=0.05,
    )
    driver: Driver

    def poll() -> TerminationRequest | None:
        if driver.epochs < after_epochs:
            return None
        if before_poll is not None:
            before_poll()
        return request

    driver = Driver(
        spark, _build(dsn), {}, settings, records, store, poll_termination=poll, signals=signals
    )
    return driver


def _counts(dsn: str) -> int:
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT coalesce(sum(n), 0), count(*) FROM counts").fetchone()
        prepared = conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone()
    assert prepared == (0,)
    assert row is not None
    return int(row[0])


def _records(tmp_path: Path) -> FileRecordStore:
    return FileRecordStore.claim(tmp_path / f"job-{uuid.uuid4().hex[:8]}.json", "exec-1")


@pytest.mark.parametrize(
    "mode",
    [
        TerminationMode.CANCEL_GRACEFUL,
        TerminationMode.SUSPEND_GRACEFUL,
        TerminationMode.RESTART_GRACEFUL,
    ],
)
def test_graceful_request_takes_a_terminal_snapshot_that_publishes_everything(
    spark: SparkSession,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    postgres_dsn: str,
    tmp_path: Path,
    mode: TerminationMode,
) -> None:
    records = _records(tmp_path)
    driver = _driver(
        spark,
        healthy_hazelcast,
        store,
        records,
        postgres_dsn,
        after_epochs=3,
        request=TerminationRequest(mode),
    )
    assert driver.run() is DriverExit.TERMINATED
    record = records.read()
    assert record.snapshot_id == 0
    assert record.suspended is (mode is TerminationMode.SUSPEND_GRACEFUL)
    assert _counts(postgres_dsn) == 3 * EPOCH_ROWS


def test_cancel_with_export_writes_a_valid_exported_snapshot(
    spark: SparkSession,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    postgres_dsn: str,
    tmp_path: Path,
) -> None:
    records = _records(tmp_path)
    export = f"final-{uuid.uuid4().hex[:6]}"
    driver = _driver(
        spark,
        healthy_hazelcast,
        store,
        records,
        postgres_dsn,
        after_epochs=2,
        request=TerminationRequest(TerminationMode.CANCEL_GRACEFUL, export),
    )
    assert driver.run() is DriverExit.TERMINATED
    record = records.read()
    assert record.exported_snapshot_name == export
    validation = validate_snapshot(store, export_map_name("test", export), record.snapshot_id)
    assert {key.operator for key in validation.chunk_keys} == {"numbers", "counts", "postgres"}
    assert _counts(postgres_dsn) == 2 * EPOCH_ROWS


def test_forceful_request_stops_without_snapshot_and_publishes_nothing(
    spark: SparkSession,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    postgres_dsn: str,
    tmp_path: Path,
) -> None:
    records = _records(tmp_path)
    driver = _driver(
        spark,
        healthy_hazelcast,
        store,
        records,
        postgres_dsn,
        after_epochs=2,
        request=TerminationRequest(TerminationMode.CANCEL_FORCEFUL),
    )
    assert driver.run() is DriverExit.TERMINATED
    assert records.read().snapshot_id == -1
    assert _counts(postgres_dsn) == 0


def test_stop_signal_ends_the_run_at_the_next_epoch_boundary(
    spark: SparkSession,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    postgres_dsn: str,
    tmp_path: Path,
) -> None:
    class SignalAfterTwoEpochs(StopSignals):
        @property
        def received(self) -> bool:
            return driver.epochs >= 2

    records = _records(tmp_path)
    driver = _driver(
        spark,
        healthy_hazelcast,
        store,
        records,
        postgres_dsn,
        after_epochs=0,
        signals=SignalAfterTwoEpochs(),
    )
    assert driver.run() is DriverExit.INTERRUPTED
    assert driver.epochs == 2
    assert driver.snapshots_taken == 0


def test_a_zombie_driver_is_fenced_and_publishes_nothing(
    spark: SparkSession,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    postgres_dsn: str,
    tmp_path: Path,
) -> None:
    records = _records(tmp_path)

    def newer_execution_starts() -> None:
        # The terminal snapshot's record write (taking step 2) must now be refused.
        FileRecordStore.claim(records.path, "exec-2")

    driver = _driver(
        spark,
        healthy_hazelcast,
        store,
        records,
        postgres_dsn,
        after_epochs=2,
        request=TerminationRequest(TerminationMode.CANCEL_GRACEFUL),
        before_poll=newer_execution_starts,
    )
    assert driver.run() is DriverExit.FENCED
    assert _counts(postgres_dsn) == 0
