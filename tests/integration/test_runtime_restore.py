"""Every source, state operator and sink: a restore from a snapshot taken mid-stream reproduces
the output of an uninterrupted run.

Each scenario runs one pipeline three times against real Hazelcast, PostgreSQL and Spark: with a
snapshot after every epoch, stopped after three epochs; restored and stopped again after two
epochs without a snapshot (their output must be withheld or replayed); restored and run to the
end. The output must equal that of an uninterrupted run of the same pipeline under another job
id (or a closed-form expectation). The driver runs in-process on the session's SparkSession.
"""

from __future__ import annotations

import glob
import json
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd
import psycopg
import pyarrow as pa
import pytest
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.streaming.state import GroupState, GroupStateTimeout

from examples.sequence_sum import expected_sums
from snapshot_protocol import ChunkWriter, SnapshotRef
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.chunk_io import decode_batches
from spark_runtime.lineage import driver_snapshot_max_bytes, stored_bytes
from spark_runtime.session import JAR_DIR
from spark_runtime.sinks import ConsoleSink, FileSink, HazelcastMapSink, PostgresSink
from spark_runtime.sources import FileSource, PostgresSource, SequenceSource
from spark_runtime.state import RunningAggregate, StateContext
from spark_runtime.state import keyed as state_module
from spark_runtime.streaming import Pipeline
from tests.fixtures.in_process_driver import Build, Runner


def _job() -> str:
    return f"restore-{uuid.uuid4().hex[:8]}"


def _rows(dsn: str, query: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as conn:
        return conn.execute(query).fetchall()


def _reference_database(postgres_dsn: str) -> str:
    """A new database on the same server, for the uninterrupted run's output; its DSN."""
    server = postgres_dsn.rsplit("/", 1)[0]
    name = f"ref_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(f"{server}/postgres", autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    return f"{server}/{name}"


def _prepared(dsn: str) -> list[str]:
    return [row[0] for row in _rows(dsn, "SELECT gid FROM pg_prepared_xacts")]


def test_sequence_running_sum_to_postgres_two_phase_commit(
    runner: Runner, postgres_dsn: str
) -> None:
    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=700, end=7000), name="numbers")
        keyed = numbers.select((F.col("value") % 7).alias("key"), "value")
        sums = keyed.groupBy("key").agg(F.sum("value").alias("total"), F.count("*").alias("count"))
        sums.writeStream(PostgresSink(postgres_dsn, "sums", ["key"]))

    runner.interrupted(build, _job(), ProcessingGuarantee.EXACTLY_ONCE)
    actual = {k: (t, c) for k, t, c in _rows(postgres_dsn, "SELECT key, total, count FROM sums")}
    assert actual == expected_sums(7000, 7)
    assert _prepared(postgres_dsn) == []


def test_min_max_and_pandas_state_to_appending_postgres_sink_exactly_once(
    runner: Runner, postgres_dsn: str
) -> None:
    def running_mean(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        count, total = state.get if state.exists else (0, 0)
        for rows in batches:
            count, total = count + len(rows), total + int(rows["value"].sum())
        state.update((count, total))
        yield pd.DataFrame({"key": [key[0]], "n": [count], "mean": [total / count]})

    def build_into(dsn: str) -> Build:
        def build(p: Pipeline) -> None:
            numbers = p.readStream(SequenceSource(rows_per_epoch=300, end=3000))
            keyed = numbers.select((F.col("value") % 4).alias("key"), "value")
            extremes = keyed.groupBy("key").agg(
                F.min("value").alias("low"), F.max("value").alias("high"), name="minmax"
            )
            means = keyed.groupBy("key").applyInPandasWithState(
                running_mean,
                "key long, n long, mean double",
                "n long, s long",
                "update",
                GroupStateTimeout.NoTimeout,
            )
            extremes.writeStream(PostgresSink(dsn, "extremes", ["key"]))
            # Appending: a replayed epoch would show up as a duplicate row.
            means.writeStream(PostgresSink(dsn, "means"))

        return build

    reference_dsn = _reference_database(postgres_dsn)

    runner.clean(build_into(reference_dsn), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    runner.interrupted(build_into(postgres_dsn), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    for table in ("extremes", "means"):
        query = f"SELECT * FROM {table} ORDER BY 1, 2"
        assert _rows(postgres_dsn, query) == _rows(reference_dsn, query)
    means = _rows(postgres_dsn, "SELECT key, n FROM means")
    assert len(means) == len(set(means)) == 40  # 4 keys x 10 epochs, no duplicates
    assert _rows(postgres_dsn, "SELECT * FROM extremes ORDER BY key") == [
        (k, k, 2996 + k) for k in range(4)
    ]


@pytest.mark.parametrize("fmt", ["json", "csv", "parquet", "text"])
def test_files_dedup_to_file_sink_with_staging(runner: Runner, tmp_path: Path, fmt: str) -> None:
    inputs = tmp_path / f"in-{fmt}"
    inputs.mkdir()
    spark = runner.spark
    for index in range(8):
        # Every file repeats ids of the previous one, so de-duplication has work across epochs.
        rows = [(i, f"name-{i}") for i in range(index * 5, index * 5 + 8)]
        frame = spark.createDataFrame(rows, "id long, name string")
        if fmt == "text":
            frame = frame.select(F.concat_ws(",", "id", "name").alias("value"))
        target = inputs / f"_tmp-{index}"
        frame.coalesce(1).write.format(fmt).save(str(target))
        (part,) = glob.glob(str(target / "part-*"))
        Path(part).rename(inputs / f"file-{index:02d}.{fmt}")

    schema = None if fmt == "text" else "id long, name string"

    def build_into(output: Path) -> Build:
        def build(p: Pipeline) -> None:
            frame = p.readStream(
                FileSource(inputs, fmt, schema, max_files_per_epoch=1, bounded=True)
            )
            if fmt == "text":
                parts = F.split("value", ",")
                frame = frame.select(parts[0].cast("long").alias("id"), parts[1].alias("name"))
            unique = frame.dropDuplicates(["id"])
            unique.writeStream(FileSink(output, "json"))

        return build

    runner.interrupted(build_into(tmp_path / "out"), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    published = [
        json.loads(line)
        for path in glob.glob(str(tmp_path / "out" / "*" / "part-*"))
        for line in Path(path).read_text().splitlines()
    ]
    assert Counter((r["id"], r["name"]) for r in published) == Counter(
        (i, f"name-{i}") for i in range(7 * 5 + 8)
    )
    assert list((tmp_path / "out" / "_staging").iterdir()) == []


def test_event_time_timeouts_and_the_watermark_survive_restores(
    runner: Runner, postgres_dsn: str
) -> None:
    """Each key's timeout and the operator's watermark are in the snapshot: a restored run
    times keys out in the same epochs, with the same counts, as an uninterrupted one."""

    def sessions(
        key: tuple[Any, ...], batches: Iterator[pd.DataFrame], state: GroupState
    ) -> Iterator[pd.DataFrame]:
        if state.hasTimedOut:
            (seen,) = state.get
            state.remove()
            yield pd.DataFrame({"key": [key[0]], "events": [seen]})
            return
        (seen,) = state.get if state.exists else (0,)
        latest = 0
        for rows in batches:
            seen += len(rows)
            latest = max(latest, int(rows["at_ms"].max()))
        state.update((seen,))
        state.setTimeoutTimestamp(latest + 4000)

    def build_into(dsn: str) -> Build:
        def build(p: Pipeline) -> None:
            numbers = p.readStream(
                SequenceSource(rows_per_epoch=30, end=300, event_time_step_ms=1000)
            )
            # Key k is active for values 30k .. 30k + 59: it goes quiet, then times out.
            keyed = numbers.select(
                (F.col("value") / 30).cast("long").alias("key"),
                "timestamp",
                F.unix_millis("timestamp").alias("at_ms"),
            ).unionByName(
                numbers.select(
                    ((F.col("value") / 30).cast("long") - 1).alias("key"),
                    "timestamp",
                    F.unix_millis("timestamp").alias("at_ms"),
                ).filter(F.col("key") >= 0)
            )
            quiet = (
                keyed.withWatermark("timestamp", "2 seconds")
                .groupBy("key")
                .applyInPandasWithState(
                    sessions,
                    "key long, events long",
                    "events long",
                    "append",
                    GroupStateTimeout.EventTimeTimeout,
                    name="sessions",
                )
            )
            quiet.writeStream(PostgresSink(dsn, "quiet"))

        return build

    reference_dsn = _reference_database(postgres_dsn)
    runner.clean(build_into(reference_dsn), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    runner.interrupted(build_into(postgres_dsn), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    query = "SELECT key, events FROM quiet ORDER BY key"
    # Keys 0 .. 7 went quiet before the input ended (the watermark reached 297 s), each after
    # 60 events; keys 8 and 9 were active until the end.
    assert _rows(reference_dsn, query) == [(k, 60) for k in range(8)]
    assert _rows(postgres_dsn, query) == _rows(reference_dsn, query)


def test_tumbling_window_to_hazelcast_map(runner: Runner) -> None:
    def build_into(map_name: str) -> Build:
        def build(p: Pipeline) -> None:
            numbers = p.readStream(
                SequenceSource(rows_per_epoch=45, end=450, event_time_step_ms=1000)
            )
            keyed = numbers.select((F.col("value") % 3).alias("key"), "value", "timestamp")
            windows = (
                keyed.withWatermark("timestamp", "5 seconds")
                .groupBy("key", F.window("timestamp", "1 minute"))
                .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
                .select("key", F.col("window.start").alias("window_start"), "n", "total")
            )
            windows.writeStream(
                HazelcastMapSink(
                    list(runner.address.members),
                    runner.address.cluster_name,
                    map_name,
                    ["key", "window_start"],
                ),
            )

        return build

    reference, restored = f"windows-{uuid.uuid4().hex[:6]}", f"windows-{uuid.uuid4().hex[:6]}"
    runner.clean(build_into(reference), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    runner.interrupted(build_into(restored), _job(), ProcessingGuarantee.EXACTLY_ONCE)
    expected = dict(runner.client.get_map(reference).blocking().entry_set())
    actual = dict(runner.client.get_map(restored).blocking().entry_set())
    assert actual == expected
    # Values 0..449 seconds: the watermark (444 s) closed the windows ending by 420 s, and the
    # end of the bounded input closed the last one (420-480 s); 3 keys each.
    assert len(actual) == 8 * 3
    (first_key,) = [k for k in actual if k.startswith("0|1970-01-01 00:00:00")]
    first = json.loads(actual[first_key])
    assert (first["n"], first["total"]) == (20, sum(range(0, 60, 3)))
    (last_key,) = [k for k in actual if k.startswith("0|1970-01-01 00:07:00")]
    last = json.loads(actual[last_key])
    assert (last["n"], last["total"]) == (10, sum(range(420, 450, 3)))


def test_bounded_tumbling_window_emits_open_windows_once_across_restores(
    runner: Runner, postgres_dsn: str
) -> None:
    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=45, end=450, event_time_step_ms=1000))
        keyed = numbers.select((F.col("value") % 3).alias("key"), "value", "timestamp")
        windows = (
            keyed.withWatermark("timestamp", "5 seconds")
            .groupBy("key", F.window("timestamp", "60 seconds"))
            .agg(F.count("*").alias("n"))
            .select("key", F.col("window.start").alias("window_start"), "n")
        )
        # Appending: a window emitted twice would show up as a duplicate row.
        windows.writeStream(PostgresSink(postgres_dsn, "windows"))

    def published() -> list[tuple[Any, ...]]:
        return _rows(postgres_dsn, "SELECT key, extract(epoch FROM window_start), n FROM windows")

    job = _job()
    # All 10 epochs of input, a snapshot after each: the watermark (444 s) closed 7 windows.
    assert runner.run(build, job, 0, 10) is DriverExit.INTERRUPTED
    assert len(published()) == 7 * 3
    # The closing epoch emits the open window, but no snapshot commits it.
    assert runner.run(build, job, 10**9, 1) is DriverExit.INTERRUPTED
    assert len(published()) == 7 * 3
    # Restored from before the closing epoch: it runs again and the final snapshot commits it.
    assert runner.run(build, job, 10**9, None) is DriverExit.COMPLETED
    # Restored from the final snapshot: nothing is emitted again.
    assert runner.run(build, job, 10**9, None) is DriverExit.COMPLETED
    rows = published()
    assert len(rows) == len(set(rows)) == 8 * 3
    assert sorted((k, int(start), n) for k, start, n in rows if start == 420) == [
        (0, 420, 10),
        (1, 420, 10),
        (2, 420, 10),
    ]
    assert _prepared(postgres_dsn) == []


def test_postgres_table_source(runner: Runner, postgres_dsn: str) -> None:
    jars = sorted(JAR_DIR.glob("postgresql-*.jar"))
    assert jars, f"PostgreSQL JDBC driver missing in {JAR_DIR}: run `make install`"
    runner.spark.sql(f"ADD JAR '{jars[-1]}'")
    with psycopg.connect(postgres_dsn) as conn:
        conn.execute("CREATE TABLE orders (id bigint PRIMARY KEY, customer text, amount bigint)")
        conn.execute(
            "INSERT INTO orders SELECT i, 'c' || (i % 5), i * 10 FROM generate_series(1, 900) i"
        )

    def build(p: Pipeline) -> None:
        orders = p.readStream(
            PostgresSource(postgres_dsn, "orders", max_rows_per_epoch=100, bounded=True)
        )
        totals = orders.groupBy("customer").agg(F.sum("amount").alias("amount"))
        totals.writeStream(PostgresSink(postgres_dsn, "totals", ["customer"]))

    runner.interrupted(build, _job(), ProcessingGuarantee.EXACTLY_ONCE)
    expected = {f"c{k}": sum(i * 10 for i in range(1, 901) if i % 5 == k) for k in range(5)}
    assert dict(_rows(postgres_dsn, "SELECT customer, amount FROM totals")) == expected


def test_console_sink_prints_every_epoch_at_least_once(
    runner: Runner, capsys: pytest.CaptureFixture[str]
) -> None:
    def build(p: Pipeline) -> None:
        numbers = p.readStream(SequenceSource(rows_per_epoch=10, end=100))
        numbers.select("value").writeStream(ConsoleSink(limit=100))

    runner.interrupted(build, _job(), ProcessingGuarantee.AT_LEAST_ONCE)
    printed = [json.loads(line)["value"] for line in capsys.readouterr().out.splitlines()]
    assert set(printed) == set(range(100))
    # Epochs after the last snapshot were printed again after the restore.
    assert len(printed) > 100


@pytest.mark.parametrize("through_driver", [True, False])
def test_state_restore_paths_read_back_the_saved_partitions(
    runner: Runner, monkeypatch: pytest.MonkeyPatch, through_driver: bool
) -> None:
    # Small states are rebuilt on the driver, larger ones in executor tasks; both must give
    # back the saved rows, hash-partitioned as the state must be.
    monkeypatch.setattr(state_module, "DRIVER_RESTORE_MAX_BYTES", 2**40 if through_driver else 0)
    spark = runner.spark
    context = StateContext(spark, 4, runner.address)
    batch = spark.range(5000).select((F.col("id") % 613).alias("key"), F.col("id").alias("v"))
    aggs = {"total": ("sum", "v"), "n": ("count", None)}
    operator = RunningAggregate("paths", context, ["key"], aggs, batch.schema)
    operator.update(batch)
    map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
    descriptors = operator.save_and_prepare(
        1, ChunkWriter(runner.store, map_name, 1, operator.name), False
    )
    restored = RunningAggregate("paths", context, ["key"], aggs, batch.schema)
    restored.restore(SnapshotRef(map_name, 1, tuple(descriptors), 4), runner.store)
    runner.store.destroy(map_name)
    assert restored.state.schema == operator.state_schema
    assert sorted(restored.state.collect()) == sorted(operator.state.collect())
    misplaced = restored.state.filter(F.spark_partition_id() != F.pmod(F.hash("key"), F.lit(4)))
    assert misplaced.count() == 0


def _chunk_tables(runner: Runner, map_name: str, descriptors: Any) -> dict[Any, pa.Table]:
    """The state chunks of a snapshot, decoded, by ``(partition, seq)``."""
    chunks = {}
    for descriptor in descriptors:
        if descriptor.key.partition < 4:
            data = runner.store.read_chunks(map_name, [descriptor.key])[0]
            table = pa.Table.from_batches(decode_batches(data))
            chunks[descriptor.key.partition, descriptor.key.seq] = (table, descriptor.num_keys)
    return chunks


def test_a_small_state_is_snapshotted_by_the_driver_as_the_executors_would(
    runner: Runner, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A state held in at most driverSnapshotMaxBytes is collected and written by the driver:
    # its chunks (keys, schema with the session's time zone, rows) must be exactly those the
    # executors' tasks write, and restore the same state.
    spark = runner.spark
    context = StateContext(spark, 4, runner.address)
    batch = spark.range(3000).select(
        (F.col("id") % 211).cast("string").alias("key"),
        F.col("id").alias("v"),
        F.timestamp_seconds(F.col("id")).alias("at"),
    )
    aggs = {"total": ("sum", "v"), "last": ("max", "at"), "n": ("count", None)}
    operator = RunningAggregate("paths", context, ["key"], aggs, batch.schema)
    operator.update(batch)
    held = stored_bytes(operator._state)
    assert held is not None and 0 < held <= driver_snapshot_max_bytes(spark), held

    written: dict[str, dict[Any, Any]] = {}
    for path, limit in (("default", None), ("driver", 2**40), ("executors", 0)):
        if limit is not None:
            monkeypatch.setattr(state_module, "driver_snapshot_max_bytes", lambda _s, n=limit: n)
        map_name = f"__sj.test.{uuid.uuid4().hex[:8]}"
        caplog.clear()
        with caplog.at_level("INFO", logger=state_module.__name__):
            descriptors = operator.save_and_prepare(
                1, ChunkWriter(runner.store, map_name, 1, operator.name), False
            )
        (line,) = [r.getMessage() for r in caplog.records if "chunks written" in r.getMessage()]
        writers = line.split("writers=")[1].split()[0]
        assert writers.startswith("driver:") == (path != "executors"), line
        written[path] = _chunk_tables(runner, map_name, descriptors)
        restored = RunningAggregate("paths", context, ["key"], aggs, batch.schema)
        restored.restore(SnapshotRef(map_name, 1, tuple(descriptors), 4), runner.store)
        runner.store.destroy(map_name)
        assert sorted(restored.state.collect()) == sorted(operator.state.collect()), path

    assert written["driver"].keys() == written["executors"].keys() == written["default"].keys()
    assert len(written["driver"]) >= 4
    for key, (table, keys) in written["executors"].items():
        driver_table, driver_keys = written["driver"][key]
        assert driver_keys == keys
        assert driver_table.schema.equals(table.schema, check_metadata=True), key
        assert driver_table.equals(table), key
