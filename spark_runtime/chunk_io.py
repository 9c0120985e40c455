"""Writing and reading state partitions as Arrow IPC chunks, from inside Spark tasks.

State can be far larger than the driver's memory, so a snapshot must not funnel it through
the driver: each Spark task writes its own partition straight into the snapshot map and
reports only the chunk descriptors back (docs/concepts/protocol.md, taking step 4). Only a state
known to be small is collected by the driver, which writes the same chunks
(:func:`partition_chunks`). A task cannot carry the
driver's Hazelcast client, so every executor Python process connects its own client once and
caches it; the connection settings travel with the task as plain strings.

Chunks are Arrow IPC streams because Spark hands ``mapInArrow`` tasks Arrow record batches:
writing them needs no row conversion, and a chunk read back is a ready record batch.
"""

from __future__ import annotations

import io
import itertools
import os
import socket
import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pyarrow as pa
from pyspark.sql.types import StructType

from snapshot_protocol.chunks import ChunkDescriptor, ChunkKey, verify_chunk
from snapshot_store.directory import DirectorySnapshotStore
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect

CHUNK_TARGET_BYTES = 4 * 1024 * 1024
"""Record batches are grouped into chunks of about this size: big enough that per-put
overhead does not dominate, small enough that a member's partition migration stays quick."""

READ_WINDOW_CHUNKS = 16
"""Chunks a task reads at once: enough parallel gets to keep the members busy, few enough that
a worker holds about 64 MiB of them however large its state partition is."""

DESCRIPTOR_SCHEMA = pa.schema(
    [
        pa.field("key", pa.string(), nullable=False),
        pa.field("num_bytes", pa.int64(), nullable=False),
        pa.field("num_keys", pa.int64(), nullable=False),
        pa.field("checksum", pa.string(), nullable=False),
        pa.field("writer", pa.string(), nullable=False),
    ]
)
"""What a snapshot task returns for each chunk it wrote, and which process wrote it."""

EXECUTOR_POD_NAME_ENV = "SPARK_EXECUTOR_POD_NAME"
"""Set by Spark in every executor Pod; its Python workers inherit it from the executor JVM."""


@dataclass(frozen=True)
class StoreAddress:
    """How an executor reaches the snapshot store; picklable, unlike a client.

    Attributes:
        members: ``host:port`` addresses of Hazelcast members; none for the embedded store.
        cluster_name: The cluster's name.
        directory: The embedded store's directory
            (:class:`~snapshot_store.directory.DirectorySnapshotStore`), for a driver and
            executors on one machine; empty for Hazelcast.
    """

    members: tuple[str, ...]
    cluster_name: str
    directory: str = ""

    @classmethod
    def embedded(cls, directory: str) -> StoreAddress:
        """The embedded store in ``directory``."""
        return cls((), "", directory)

    @property
    def is_embedded(self) -> bool:
        """Whether this is the embedded store in a local directory."""
        return bool(self.directory)


ChunkStore = HazelcastSnapshotStore | DirectorySnapshotStore
"""A store that executors' tasks write chunks to and read them from."""

_stores: dict[StoreAddress, ChunkStore] = {}
_stores_lock = threading.Lock()


def store_for(address: StoreAddress) -> ChunkStore:
    """Returns this process's snapshot store client for ``address``, connecting on first use.

    Spark reuses Python workers between tasks, so the client (and its member connections)
    outlives a task; a new worker pays the connection once.
    """
    with _stores_lock:
        store = _stores.get(address)
        # A client that lost every member for longer than its connect timeout shut down for
        # good; the next task must not inherit it.
        if store is None or not store.running:
            if address.is_embedded:
                store = DirectorySnapshotStore(address.directory)
            else:
                store = HazelcastSnapshotStore(connect(address.members, address.cluster_name))
            _stores[address] = store
        return store


def encode_batches(schema: pa.Schema, batches: Sequence[pa.RecordBatch]) -> bytes:
    """Returns ``batches`` as one Arrow IPC stream."""
    sink = io.BytesIO()
    with pa.ipc.new_stream(sink, schema) as writer:
        for batch in batches:
            writer.write_batch(batch)
    return sink.getvalue()


def decode_batches(data: bytes | bytearray) -> list[pa.RecordBatch]:
    """Returns the record batches of an Arrow IPC stream written by :func:`encode_batches`."""
    with pa.ipc.open_stream(pa.BufferReader(data)) as reader:
        return list(reader)


def group_into_chunks(
    batches: Iterable[pa.RecordBatch], target_bytes: int = CHUNK_TARGET_BYTES
) -> Iterator[list[pa.RecordBatch]]:
    """Groups record batches into lists of about ``target_bytes`` (at least one batch each)."""
    group: list[pa.RecordBatch] = []
    size = 0
    for batch in batches:
        if batch.num_rows == 0:
            continue
        group.append(batch)
        size += batch.nbytes
        if size >= target_bytes:
            yield group
            group, size = [], 0
    if group:
        yield group


def partition_chunks(
    batches: Sequence[pa.RecordBatch], partition_column: str
) -> Iterator[tuple[int, int, bytes, int]]:
    """Splits collected rows into the chunks their partitions' tasks would have written.

    For a state the driver collected with its rows' partition ids in ``partition_column``:
    yields ``(partition, seq, chunk, rows)`` for every partition that has rows, each chunk an
    Arrow IPC stream of the other columns grouped as :func:`write_partition` groups them, so
    a snapshot's chunks do not depend on who wrote them.
    """
    if not batches:
        return
    table = pa.Table.from_batches(batches)
    ids = table.column(partition_column).to_numpy()
    rows = table.drop_columns([partition_column])
    for partition in sorted({int(p) for p in ids}):
        part = rows.filter(pa.array(ids == partition))
        for seq, group in enumerate(group_into_chunks(part.to_batches())):
            yield (
                partition,
                seq,
                encode_batches(group[0].schema, group),
                sum(b.num_rows for b in group),
            )


def write_partition(
    address: StoreAddress,
    map_name: str,
    snapshot_id: int,
    operator: str,
    partition: int,
    batches: Iterable[pa.RecordBatch],
) -> list[ChunkDescriptor]:
    """Writes one state partition as chunks ``<snapshot>/<operator>/<partition>/<seq>``.

    Runs inside a Spark task. An empty partition writes no chunk: restore treats a partition
    without chunks as empty. Each chunk keeps the schema Spark gave the batches (with the
    session's time zone on timestamps), so a restore reads back exactly what was written.

    Chunks are put as they are encoded, the client keeping a window of puts in flight, so a
    worker holds that window, not its whole partition (encoding every chunk before the
    first put made its memory grow with the state partition).

    Raises:
        IndeterminateChunkWrite: If a put may not have reached all backups.
        SnapshotStoreError: If a put failed.
    """
    descriptors: list[ChunkDescriptor] = []
    groups = group_into_chunks(batches)
    first = next(groups, None)
    if first is None:
        return descriptors

    def encoded() -> Iterator[tuple[ChunkKey, bytes]]:
        for seq, group in enumerate(itertools.chain([first], groups)):
            key = ChunkKey(snapshot_id, operator, partition, seq)
            data = encode_batches(group[0].schema, group)
            descriptors.append(ChunkDescriptor.of(key, data, sum(b.num_rows for b in group)))
            yield key, data

    store_for(address).put_chunks(map_name, encoded())
    return descriptors


def chunk_writer() -> str:
    """Names the process a task runs in: its executor Pod, else the host (local master)."""
    return os.environ.get(EXECUTOR_POD_NAME_ENV) or socket.gethostname()


def descriptors_batch(descriptors: Sequence[ChunkDescriptor], writer: str) -> pa.RecordBatch:
    """Returns descriptors as a record batch of :data:`DESCRIPTOR_SCHEMA`.

    Args:
        descriptors: The chunks a task wrote.
        writer: Who wrote them (:func:`chunk_writer`), for the driver's log.
    """
    return pa.RecordBatch.from_pydict(
        {
            "key": [str(d.key) for d in descriptors],
            "num_bytes": [d.num_bytes for d in descriptors],
            "num_keys": [d.num_keys for d in descriptors],
            "checksum": [d.checksum for d in descriptors],
            "writer": [writer] * len(descriptors),
        },
        schema=DESCRIPTOR_SCHEMA,
    )


def descriptor_struct() -> StructType:
    """:data:`DESCRIPTOR_SCHEMA` as the Spark schema of a ``mapInArrow`` that writes chunks."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(DESCRIPTOR_SCHEMA)


def descriptor_of_row(row: Mapping[str, Any]) -> ChunkDescriptor:
    """Reads one row of :data:`DESCRIPTOR_SCHEMA` back into a descriptor (without its writer)."""
    return ChunkDescriptor(
        ChunkKey.parse(row["key"]), row["num_bytes"], row["num_keys"], row["checksum"]
    )


def read_chunks(
    address: StoreAddress, map_name: str, snapshot_id: int, chunks: Sequence[ChunkDescriptor]
) -> Iterator[pa.RecordBatch]:
    """Yields the record batches of ``chunks``, read in parallel and verified before decoding.

    Chunks are read a window at a time (:data:`READ_WINDOW_CHUNKS`), so a task holds that
    many chunks, not its whole partition: reading every chunk first made a worker's memory
    grow with the state partition.

    Raises:
        SnapshotCorrupted: If a chunk does not match its checksum (naming it).
        SnapshotStoreError: If a chunk is absent or could not be read.
    """
    if not chunks:
        return
    store = store_for(address)
    for start in range(0, len(chunks), READ_WINDOW_CHUNKS):
        window = chunks[start : start + READ_WINDOW_CHUNKS]
        values: Sequence[bytes | bytearray] = store.read_chunks(
            map_name, [chunk.key for chunk in window]
        )
        for chunk, data in zip(window, values, strict=True):
            verify_chunk(map_name, snapshot_id, chunk, data)
            yield from decode_batches(data)


def writer_counts(rows: Iterable[Mapping[str, Any]]) -> str:
    """Returns how many chunks each writer wrote, as ``writer:count,...`` sorted by writer.

    The driver logs it per snapshot so an operator (or a test) sees that the executors, not
    the driver, wrote the state partitions.
    """
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["writer"]] = counts.get(row["writer"], 0) + 1
    return ",".join(f"{writer}:{count}" for writer, count in sorted(counts.items()))
