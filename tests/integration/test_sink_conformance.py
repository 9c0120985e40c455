"""The sink conformance kit against the project's own sinks and against broken ones.

The project's two-phase sinks (``PostgresSink`` on the session's real PostgreSQL server,
``FileSink`` on a local directory) and its staged sink (``KafkaSink`` on the session's real
broker) must pass every scenario of ``spark_runtime.testing.sink_conformance``. Each broken sink
below breaks one rule of the contract, the way a sink author could: the kit must fail it, in
the scenario that tests that rule, with a message saying what it saw. Broken sinks run only the
scenarios they are meant to fail, to keep the module quick.
"""

from __future__ import annotations

import json
import re
import shutil
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql
from pyspark.sql import DataFrame, SparkSession

from spark_runtime.sinks import FileSink, KafkaSink, PostgresSink, TransactionalSink
from spark_runtime.testing.sink_conformance import (
    STAGED_SCENARIOS,
    TRANSACTIONAL_SCENARIOS,
    SinkConformanceError,
    check_staged_sink,
    check_transactional_sink,
)
from testbed.kafka import KafkaBroker
from testbed.postgres import prepared_transactions

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "custom-sources-and-sinks.md"


@pytest.fixture
def dsn(postgres_dsn: str) -> Iterator[str]:
    """The test's database; every transaction left prepared there is rolled back after it."""
    yield postgres_dsn
    with psycopg.connect(postgres_dsn, autocommit=True) as conn:
        for gid in prepared_transactions(postgres_dsn):
            conn.execute(sql.SQL("ROLLBACK PREPARED {}").format(sql.Literal(gid)))


def table_values(dsn: str, table: str) -> list[str]:
    """Every committed ``value`` of ``table``, as any other session reads it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [
            row[0]
            for row in conn.execute(sql.SQL("SELECT value FROM {}").format(sql.Identifier(table)))
        ]


def file_values(directory: Path) -> list[str]:
    """Every ``value`` a reader of a JSON FileSink's published directories sees."""
    values: list[str] = []
    for part in sorted(directory.glob("*/part-*")):
        lines = part.read_text(encoding="utf-8").splitlines()
        values.extend(json.loads(line)["value"] for line in lines if line)
    return values


def topic_values(kafka: KafkaBroker, topic: str) -> list[str]:
    """Every committed record's value, as a ``read_committed`` consumer reads them."""
    return [value for _key, value in kafka.read_committed(topic)]


def failures_of(error: pytest.ExceptionInfo[SinkConformanceError]) -> dict[str, str]:
    """Scenario name -> what the kit said was wrong."""
    return {failure.scenario: failure.problem for failure in error.value.failures}


# --- the project's own sinks -----------------------------------------------------------------


def test_the_postgres_sink_passes_every_scenario(spark: SparkSession, dsn: str) -> None:
    passed = check_transactional_sink(
        lambda: PostgresSink(dsn, "kit_rows"), lambda: table_values(dsn, "kit_rows"), spark
    )

    assert passed == list(TRANSACTIONAL_SCENARIOS)
    assert prepared_transactions(dsn) == [], "the kit or the sink left transactions prepared"


def test_the_file_sink_passes_every_scenario(spark: SparkSession, tmp_path: Path) -> None:
    passed = check_transactional_sink(
        lambda: FileSink(tmp_path), lambda: file_values(tmp_path), spark
    )

    assert passed == list(TRANSACTIONAL_SCENARIOS)
    assert list((tmp_path / "_staging").iterdir()) == [], "a staging directory was left"


def test_the_kafka_sink_passes_every_scenario(spark: SparkSession, kafka: KafkaBroker) -> None:
    topic = kafka.create_topic(partitions=2)

    passed = check_staged_sink(
        lambda: KafkaSink(kafka.bootstrap, topic, partitions=2),
        lambda: topic_values(kafka, topic),
        spark,
    )

    assert passed == list(STAGED_SCENARIOS)


def guide_outline_sink() -> Callable[[str], TransactionalSink]:
    """The guide's ``SnapshotFilesSink`` outline, run from the page as it is written."""
    blocks = re.findall(r"```python\n(.*?)```", GUIDE.read_text(encoding="utf-8"), re.S)
    namespace: dict[str, Any] = {"__name__": "guide_outline"}
    for marker in ("class JsonLinesSink", "class SnapshotFilesSink"):
        code = next(block for block in blocks if marker in block)
        exec(compile(code, str(GUIDE), "exec"), namespace)
    sink: Callable[[str], TransactionalSink] = namespace["SnapshotFilesSink"]
    return sink


def test_the_guides_outline_sink_passes_every_scenario(spark: SparkSession, tmp_path: Path) -> None:
    outline = guide_outline_sink()

    def published() -> list[str]:
        return [
            json.loads(line)["value"]
            for path in tmp_path.glob("*.jsonl")
            for line in path.read_text(encoding="utf-8").splitlines()
        ]

    passed = check_transactional_sink(lambda: outline(str(tmp_path)), published, spark)

    assert passed == list(TRANSACTIONAL_SCENARIOS)


# --- broken sinks: the kit must catch each -------------------------------------------------


class PublishAtPrepareSink(FileSink):
    """Broken: prepare publishes at once, so a reader sees output no snapshot committed."""

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        ids = super().prepare(frame, snapshot_id)
        for transaction_id in ids:
            shutil.copytree(self.staging / transaction_id, self.directory / transaction_id)
        return ids


class CopyingCommitSink(FileSink):
    """Broken: commit copies the staging directory under a fresh name instead of moving it, so
    a second commit (phase 2, then a restore's) publishes the rows again."""

    def commit(self, transaction_ids: Sequence[str]) -> None:
        for transaction_id in transaction_ids:
            staged = self.staging / transaction_id
            if staged.is_dir():
                shutil.copytree(staged, self.directory / f"{transaction_id}-{uuid.uuid4().hex}")


class GreedyRecoverSink(FileSink):
    """Broken: recover rolls back every other prepared transaction, also those of snapshots
    above ``through_snapshot_id``, which only a newer execution can have prepared."""

    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        return super().recover(committed, 10**9)


def test_a_sink_that_publishes_at_prepare_fails_with_the_dirty_read(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(SinkConformanceError) as error:
        check_transactional_sink(
            lambda: PublishAtPrepareSink(tmp_path),
            lambda: file_values(tmp_path),
            spark,
            scenarios=["prepare-commit"],
        )

    problem = failures_of(error)["prepare-commit"]
    assert "after prepare of snapshot 1, before any commit (a dirty read)" in problem
    assert "expected each of its 6 rows absent, but 6 seen once" in problem
    assert "PublishAtPrepareSink fails 1 scenario(s)" in str(error.value)


def test_a_commit_that_is_not_idempotent_fails_with_the_duplicates(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(SinkConformanceError) as error:
        check_transactional_sink(
            lambda: CopyingCommitSink(tmp_path),
            lambda: file_values(tmp_path),
            spark,
            scenarios=["prepare-commit", "commit-twice"],
        )

    failures = failures_of(error)
    assert list(failures) == ["commit-twice"], "a single commit is right; only a repeat is not"
    assert "after a second commit of the same ids by the same instance" in failures["commit-twice"]
    assert "6 seen twice (commit-twice:2:0" in failures["commit-twice"]


def test_a_recover_that_rolls_back_a_newer_execution_fails(
    spark: SparkSession, tmp_path: Path
) -> None:
    with pytest.raises(SinkConformanceError) as error:
        check_transactional_sink(
            lambda: GreedyRecoverSink(tmp_path),
            lambda: file_values(tmp_path),
            spark,
            scenarios=["recover-leaves-newer"],
        )

    problem = failures_of(error)["recover-leaves-newer"]
    assert "committing snapshot 8's ids: recover(through_snapshot_id=7) must leave them" in problem
    assert "6 absent" in problem


class NoMarkerKafkaSink(KafkaSink):
    """Broken: publishes without reading the partition's marker, so a repeated publish (a
    restore's) writes the rows again and a late older one writes rows nobody committed."""

    def _latest_marker(self, partition: int, txn_id: str) -> int | None:
        return None


def test_a_staged_sink_without_markers_fails_with_duplicates(
    spark: SparkSession, kafka: KafkaBroker
) -> None:
    topic = kafka.create_topic(partitions=2)

    with pytest.raises(SinkConformanceError) as error:
        check_staged_sink(
            lambda: NoMarkerKafkaSink(kafka.bootstrap, topic, partitions=2),
            lambda: topic_values(kafka, topic),
            spark,
            scenarios=["publish-once", "publish-twice", "older-after-newer"],
        )

    failures = failures_of(error)
    assert sorted(failures) == ["older-after-newer", "publish-twice"]
    assert "6 seen twice" in failures["publish-twice"]
    assert (
        "after a publish of snapshot 3 after partition 0 published snapshot 4"
        in (failures["older-after-newer"])
    )


def test_unknown_scenarios_are_refused(spark: SparkSession, tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"No scenario \['commit-thrice'\]"):
        check_transactional_sink(
            lambda: FileSink(tmp_path), lambda: [], spark, scenarios=["commit-thrice"]
        )
