"""Offsets of the replayable sources: where each epoch ends, and when a source is exhausted."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spark_runtime.sources import FileSource, SequenceSource, jdbc_url


def test_sequence_by_epoch_advances_by_the_rate_and_stops_at_the_end() -> None:
    source = SequenceSource(rows_per_epoch=400, end=1000)
    offset = source.initial_offset()
    ends = []
    while (offset := source.next_offset(offset)) is not None:
        ends.append(offset["next"])
    assert ends == [400, 800, 1000]
    assert source.is_exhausted({"next": 1000, "startedMs": None})
    assert not source.is_exhausted({"next": 999, "startedMs": None})


def test_endless_sequence_is_never_exhausted() -> None:
    source = SequenceSource(rows_per_epoch=10)
    assert not source.is_exhausted({"next": 10**12, "startedMs": None})


def test_paced_sequence_keeps_its_start_time_in_the_offset(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    source = SequenceSource(rows_per_second=100)
    first = source.initial_offset()
    assert source.next_offset(first) is None  # no time has passed yet
    now[0] = 1002.5
    second = source.next_offset({"next": 0, "startedMs": 1_000_000})
    assert second == {"next": 250, "startedMs": 1_000_000}
    # A restored job catches up from the saved start instead of starting over.
    now[0] = 1010.0
    assert source.next_offset(second) == {"next": 1000, "startedMs": 1_000_000}


def test_paced_sequence_starts_its_clock_on_the_first_look(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The driver keeps the initial offset until an epoch reads a row, so the clock must not
    # restart on every look (it did: the sequence never produced a row).
    now = [1000.0]
    monkeypatch.setattr(time, "time", lambda: now[0])
    source = SequenceSource(rows_per_second=100)
    offset = source.initial_offset()
    assert source.next_offset(offset) is None
    now[0] = 1000.5
    assert source.next_offset(offset) == {"next": 50, "startedMs": 1_000_000}


def test_paced_sequence_caps_an_epoch_when_catching_up(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(time, "time", lambda: 2000.0)
    source = SequenceSource(rows_per_second=1000, max_rows_per_epoch=50)
    assert source.next_offset({"next": 0, "startedMs": 1_000_000}) == {
        "next": 50,
        "startedMs": 1_000_000,
    }


def test_sequence_needs_exactly_one_rate() -> None:
    with pytest.raises(ValueError, match="exactly one"):
        SequenceSource()
    with pytest.raises(ValueError, match="exactly one"):
        SequenceSource(rows_per_epoch=1, rows_per_second=1)


def test_files_are_taken_in_name_order_skipping_hidden_and_in_progress(tmp_path: Path) -> None:
    for name in ["b.json", "a.json", ".c.json.tmp", "_d.json", "e.json"]:
        (tmp_path / name).write_text("{}\n")
    source = FileSource(tmp_path, "json", "x int", max_files_per_epoch=2)
    first = source.next_offset(source.initial_offset())
    assert first == {"last": "b.json"}
    second = source.next_offset(first)
    assert second == {"last": "e.json"}
    assert source.next_offset(second) is None
    assert not source.is_exhausted(second)  # unbounded: more files may come


def test_bounded_file_source_is_exhausted_once_every_file_was_read(tmp_path: Path) -> None:
    (tmp_path / "1.txt").write_text("x\n")
    source = FileSource(tmp_path, "text", bounded=True)
    assert not source.is_exhausted(source.initial_offset())
    assert source.is_exhausted({"last": "1.txt"})


def test_file_source_needs_a_schema_except_for_text(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="needs a schema"):
        FileSource(tmp_path, "csv")
    with pytest.raises(ValueError, match="not one of"):
        FileSource(tmp_path, "xml", "x int")


def test_jdbc_url_from_a_libpq_dsn() -> None:
    url, properties = jdbc_url("postgresql://alice:secret@db.example:6543/shop")
    assert url == "jdbc:postgresql://db.example:6543/shop"
    assert properties == {"driver": "org.postgresql.Driver", "user": "alice", "password": "secret"}
