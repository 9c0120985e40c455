"""Sink checks that need no server: the two-phase-commit sink's setup error."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from pyspark.sql.types import LongType, StructField, StructType

from spark_runtime.sinks import MaxPreparedTransactionsDisabled, PostgresSink
from spark_runtime.sinks.postgres import SpeculationEnabled


class _Result:
    def __init__(self, row: tuple[Any, ...]) -> None:
        self._row = row

    def fetchone(self) -> tuple[Any, ...]:
        return self._row


class _Connection:
    """Answers SHOW max_prepared_transactions with ``max_prepared`` (0: the feature off)."""

    def __init__(self, max_prepared: str = "0") -> None:
        self.statements: list[str] = []
        self._max_prepared = max_prepared

    def __enter__(self) -> _Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def execute(self, statement: Any, *args: Any) -> _Result:
        self.statements.append(str(statement))
        return _Result((self._max_prepared,))


def test_postgres_sink_refuses_a_server_without_prepared_transactions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    connection = _Connection()
    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: connection)
    sink = PostgresSink("postgresql://db/x", "sums", ["key"], partitions=4)
    schema = StructType([StructField("key", LongType()), StructField("total", LongType())])
    with pytest.raises(MaxPreparedTransactionsDisabled, match="max_prepared_transactions = 0"):
        sink.open(schema, "job-1", "postgres")
    assert connection.statements == ["SHOW max_prepared_transactions"]  # no table created


def test_transaction_ids_name_job_sink_snapshot_partition_and_task_attempt(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: _Connection("64"))
    sink = PostgresSink("postgresql://db/x", "sums", ["key"])
    sink.open(StructType([StructField("key", LongType())]), "job-1", "postgres")
    assert sink.gid(12, 3, 41) == "sj:job-1:postgres:12:3:41"


def test_the_insert_statement_is_rendered_once_when_the_sink_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The upsert is rendered at open, quoting odd names, so writes need no driver connection."""

    connections: list[_Connection] = []

    def connect(*_args: Any, **_kwargs: Any) -> _Connection:
        connections.append(_Connection("64"))
        return connections[-1]

    monkeypatch.setattr(psycopg, "connect", connect)
    sink = PostgresSink("postgresql://db/x", 'app."sums"', ["key"])
    schema = StructType([StructField("key", LongType()), StructField('odd"name', LongType())])
    sink.open(schema, "job-1", "postgres")
    assert len(connections) == 1
    assert sink._statement == (
        'INSERT INTO "app"."""sums""" ("key", "odd""name") VALUES (%s, %s) '
        'ON CONFLICT ("key") DO UPDATE SET "odd""name" = EXCLUDED."odd""name"'
    )


class _Conf:
    def __init__(self, settings: dict[str, str]) -> None:
        self._settings = settings

    def get(self, key: str, default: str) -> str:
        return self._settings.get(key, default)


class _Frame:
    """Only what ``prepare`` reads before it writes: the session's settings."""

    def __init__(self, settings: dict[str, str]) -> None:
        self.sparkSession = type("Session", (), {"conf": _Conf(settings)})()


def test_the_exactly_once_sink_refuses_speculative_task_copies(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A speculative copy could roll back the transaction its twin prepared: refused, named."""
    monkeypatch.setattr(psycopg, "connect", lambda *a, **k: _Connection("64"))
    sink = PostgresSink("postgresql://db/x", "sums", ["key"])
    sink.open(StructType([StructField("key", LongType())]), "job-1", "postgres")
    frame: Any = _Frame({"spark.speculation": "True"})
    with pytest.raises(SpeculationEnabled, match=r"table sums cannot run with spark\.speculation"):
        sink.prepare(frame, 3)
