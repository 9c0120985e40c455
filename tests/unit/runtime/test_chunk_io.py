"""Arrow IPC chunks: what a Spark task writes is what a restore reads back."""

from __future__ import annotations

import socket
from collections.abc import Iterable, Iterator, Sequence

import pyarrow as pa
import pytest

from snapshot_protocol import ChunkDescriptor, ChunkKey
from snapshot_protocol.errors import SnapshotCorrupted
from spark_runtime import chunk_io
from spark_runtime.chunk_io import (
    DESCRIPTOR_SCHEMA,
    READ_WINDOW_CHUNKS,
    StoreAddress,
    chunk_writer,
    decode_batches,
    descriptor_of_row,
    descriptors_batch,
    encode_batches,
    group_into_chunks,
    read_chunks,
    write_partition,
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


ADDRESS = StoreAddress(("127.0.0.1:1",), "unit")


class _RecordingStore:
    """Plays the store a task reaches: keeps what is put, and logs every call with
    ``events`` (which the test's batch source also writes to) so order can be checked."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.values: dict[str, bytes] = {}

    @property
    def read_sizes(self) -> list[int]:
        """How many chunks each read asked for, in order."""
        return [int(event.split()[1]) for event in self.events if event.startswith("read ")]

    def put_chunks(self, map_name: str, chunks: Iterable[tuple[ChunkKey, bytes]]) -> None:
        for key, data in chunks:
            self.events.append(f"put {key}")
            self.values[str(key)] = data

    def read_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[bytes]:
        self.events.append(f"read {len(keys)}")
        return [self.values[str(key)] for key in keys]


@pytest.fixture
def store(monkeypatch: pytest.MonkeyPatch) -> _RecordingStore:
    recording = _RecordingStore([])
    monkeypatch.setattr(chunk_io, "store_for", lambda _address: recording)
    return recording


def _source(events: list[str], count: int, rows: int) -> Iterator[pa.RecordBatch]:
    for i in range(count):
        events.append(f"batch {i}")
        yield _batch(i * rows, rows)


def test_a_partition_is_put_chunk_by_chunk_while_spark_still_sends_it(
    store: _RecordingStore,
) -> None:
    rows = chunk_io.CHUNK_TARGET_BYTES // _batch(0, 1).nbytes + 1
    written = write_partition(ADDRESS, "m", 3, "sums", 2, _source(store.events, 3, rows))
    assert [str(d.key) for d in written] == ["3/sums/2/0", "3/sums/2/1", "3/sums/2/2"]
    # The first chunk is handed to the client before Spark's second batch is read: the task
    # never holds its whole partition.
    assert store.events == [
        "batch 0",
        "put 3/sums/2/0",
        "batch 1",
        "put 3/sums/2/1",
        "batch 2",
        "put 3/sums/2/2",
    ]
    assert [d.num_keys for d in written] == [rows] * 3
    assert [store.values[str(d.key)] for d in written] == [
        encode_batches(SCHEMA, [_batch(i * rows, rows)]) for i in range(3)
    ]


def test_an_empty_partition_writes_nothing_and_needs_no_client(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_client(_address: StoreAddress) -> None:
        raise AssertionError("an empty partition connected to the store")

    monkeypatch.setattr(chunk_io, "store_for", no_client)
    assert write_partition(ADDRESS, "m", 1, "sums", 0, iter([_batch(0, 0)])) == []


def test_chunks_are_read_a_window_at_a_time_and_each_verified(store: _RecordingStore) -> None:
    count = READ_WINDOW_CHUNKS * 2 + 1
    descriptors = []
    for seq in range(count):
        key = ChunkKey(5, "sums", 0, seq)
        data = encode_batches(SCHEMA, [_batch(seq * 10, 10)])
        store.values[str(key)] = data
        descriptors.append(ChunkDescriptor.of(key, data, 10))
    batches = read_chunks(ADDRESS, "m", 5, descriptors)
    first = next(batches)
    # One window was read to yield the first batch, not the whole partition.
    assert store.read_sizes == [READ_WINDOW_CHUNKS]
    read = [first, *batches]
    assert store.read_sizes == [READ_WINDOW_CHUNKS, READ_WINDOW_CHUNKS, 1]
    assert pa.Table.from_batches(read) == pa.Table.from_batches(
        [_batch(seq * 10, 10) for seq in range(count)]
    )
    store.values[str(descriptors[-1].key)] = encode_batches(SCHEMA, [_batch(0, 10)])
    with pytest.raises(SnapshotCorrupted, match="5/sums/0/"):
        list(read_chunks(ADDRESS, "m", 5, descriptors))
