"""The Python side of the chunk vectors the JUnit tests of ``jvm/`` read.

``jvm/src/test/resources/io/snapshotjob/chunks/`` holds a chunk, its descriptor line and its
serialised value as the Python side makes them (``tests/unit/chunk_vectors.py``); the JUnit
tests decode that chunk, verify its checksum and build the same value. These tests fail when
the Python side would now write anything else, so neither side drifts from the other unseen.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from snapshot_protocol.chunks import ChunkDescriptor, ChunkKey, checksum, verify_chunk
from snapshot_protocol.errors import SnapshotCorrupted
from spark_runtime.chunk_io import decode_batches
from spark_runtime.jvm_chunks import chunk_line
from tests.unit import chunk_vectors as vectors

pytestmark = pytest.mark.unit


def test_the_checked_in_chunk_is_what_a_python_worker_encodes_now() -> None:
    """Byte for byte: the JVM's tests read exactly what the Python workers write."""
    assert vectors.CHUNK_FILE.read_bytes() == vectors.chunk_bytes(), (
        "regenerate with .venv/bin/python -m tests.unit.chunk_vectors, then run the JUnit tests"
    )


def test_the_checked_in_chunk_decodes_to_its_rows() -> None:
    batches = decode_batches(vectors.CHUNK_FILE.read_bytes())
    assert pa.Table.from_batches(batches).equals(pa.Table.from_batches([vectors.chunk_batch()]))


def test_the_descriptor_line_is_the_one_the_driver_hands_the_jvm() -> None:
    """Key, size, rows and xxh3-64 checksum: the line ``ChunkDescriptor.parse`` reads."""
    data = vectors.CHUNK_FILE.read_bytes()
    line = vectors.LINE_FILE.read_text().rstrip("\n")
    assert line == chunk_line(vectors.descriptor(data))
    key, num_bytes, num_keys, digest = line.split("\t")
    assert (ChunkKey.parse(key), int(num_bytes), int(num_keys)) == (vectors.CHUNK_KEY, len(data), 3)
    assert digest == checksum(data) and len(digest) == 16


def test_a_delta_chunk_line_ends_with_the_delta_mark() -> None:
    chunk = ChunkDescriptor(vectors.CHUNK_KEY, 10, 2, "00000000000000ff", delta=True)
    assert chunk_line(chunk) == "7/keyed-sum/3/0\t10\t2\t00000000000000ff\tdelta"


def test_the_checked_in_checksum_rejects_a_changed_byte() -> None:
    """The same check the JVM's ``ChunkDescriptor.verify`` makes, on the same file."""
    data = bytearray(vectors.CHUNK_FILE.read_bytes())
    chunk = vectors.descriptor(bytes(data))
    verify_chunk("m", 7, chunk, data)
    data[len(data) // 2] ^= 0x01
    with pytest.raises(SnapshotCorrupted, match="keyed-sum/3/0"):
        verify_chunk("m", 7, chunk, data)


def test_the_checked_in_value_is_what_the_python_client_puts() -> None:
    """Partition hash 0, type id -12 (``byte[]``), length, then the chunk: what the JVM's
    ``ChunkBuffer.value`` builds for its puts, so the members hold the same bytes."""
    data = vectors.CHUNK_FILE.read_bytes()
    value = vectors.VALUE_FILE.read_bytes()
    assert value == vectors.client_value(data)
    assert value[:12] == (0).to_bytes(4, "big") + (-12).to_bytes(4, "big", signed=True) + len(
        data
    ).to_bytes(4, "big")
    assert value[12:] == data
