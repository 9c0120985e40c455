"""Arrow IPC chunks: what a Spark task writes is what a restore reads back."""

from __future__ import annotations

import socket

import pyarrow as pa
import pytest

from snapshot_protocol import ChunkDescriptor, ChunkKey
from spark_runtime.chunk_io import (
    DESCRIPTOR_SCHEMA,
    chunk_writer,
    decode_batches,
    descriptor_of_row,
    descriptors_batch,
    encode_batches,
    group_into_chunks,
    writer_counts,
)

SCHEMA = pa.schema([pa.field("key", pa.int64()), pa.field("total", pa.int64())])


def _batch(start: int, rows: int) -> pa.RecordBatch:
    keys = list(range(start, start + rows))
    return pa.RecordBatch.from_pydict({"key": keys, "total": [k * 2 for k in keys]}, SCHEMA)


def test_batches_survive_the_round_trip() -> None:
    batches = [_batch(0, 5), _batch(5, 3)]
    decoded = decode_batches(encode_batches(SCHEMA, batches))
    assert pa.Table.from_batches(decoded) == pa.Table.from_batches(batches)


def test_batches_are_grouped_to_about_the_target_size_and_empty_ones_dropped() -> None:
    batches = [_batch(i * 100, 100) for i in range(10)] + [_batch(0, 0)]
    target = batches[0].nbytes * 3
    groups = list(group_into_chunks(batches, target))
    assert [len(group) for group in groups] == [3, 3, 3, 1]
    assert sum(b.num_rows for group in groups for b in group) == 1000


def test_no_batches_make_no_chunk() -> None:
    assert list(group_into_chunks([_batch(0, 0)])) == []


def test_descriptors_travel_as_a_record_batch() -> None:
    descriptor = ChunkDescriptor(ChunkKey(7, "sums", 3, 1), 1234, 10, "00ff")
    batch = descriptors_batch([descriptor], "job-exec-2")
    assert batch.schema == DESCRIPTOR_SCHEMA
    (row,) = batch.to_pylist()
    assert row == {
        "key": "7/sums/3/1",
        "num_bytes": 1234,
        "num_keys": 10,
        "checksum": "00ff",
        "writer": "job-exec-2",
    }
    assert descriptor_of_row(row) == descriptor


def test_a_task_names_its_executor_pod_as_the_writer(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SPARK_EXECUTOR_POD_NAME", "wordcount-exec-1")
    assert chunk_writer() == "wordcount-exec-1"
    monkeypatch.delenv("SPARK_EXECUTOR_POD_NAME")
    assert chunk_writer() == socket.gethostname()


def test_the_driver_counts_chunks_per_writer() -> None:
    rows = [{"writer": "b-exec-2"}, {"writer": "a-exec-1"}, {"writer": "b-exec-2"}]
    assert writer_counts(rows) == "a-exec-1:1,b-exec-2:2"
    assert writer_counts([]) == ""
