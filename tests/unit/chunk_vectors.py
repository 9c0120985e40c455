"""The chunk both sides read: the byte-level vectors under ``jvm/src/test/resources``.

A state chunk written by a Python worker (:func:`spark_runtime.chunk_io.encode_batches`) is
read by the executors' JVMs and the other way round, so the JUnit tests of ``jvm/`` read files
this module writes, and ``tests/unit/runtime/test_chunk_vectors.py`` checks that the Python side
still writes exactly those bytes:

- ``python-chunk.arrow``: one chunk, an Arrow IPC stream of every column type the JVM copies
  without Spark's conversion (``ArrowLayout``), with nulls and non-ASCII text;
- ``python-chunk.tsv``: its descriptor line as the driver hands it to the JVM
  (:func:`spark_runtime.jvm_chunks.chunk_line`), checksum included;
- ``python-chunk.value``: the chunk as the Hazelcast Python client sends it to a member (the
  serialised ``byte[]``), which ``ChunkBuffer.value`` must build byte for byte.

Regenerate them with ``.venv/bin/python -m tests.unit.chunk_vectors`` after a deliberate
change of the format, then run the JUnit tests (``cd jvm && mvn -o -q test``).
"""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pyarrow as pa
from hazelcast.config import Config
from hazelcast.serialization.service import SerializationServiceV1

from snapshot_protocol.chunks import ChunkDescriptor, ChunkKey
from spark_runtime.chunk_io import encode_batches

VECTOR_DIR = Path(__file__).resolve().parents[2] / "jvm/src/test/resources/io/snapshotjob/chunks"
"""Where the JUnit tests find the vectors (their class path's ``io/snapshotjob/chunks``)."""

CHUNK_FILE = VECTOR_DIR / "python-chunk.arrow"
LINE_FILE = VECTOR_DIR / "python-chunk.tsv"
VALUE_FILE = VECTOR_DIR / "python-chunk.value"

CHUNK_KEY = ChunkKey(7, "keyed-sum", 3, 0)
"""The chunk's key: snapshot 7, operator ``keyed-sum``, partition 3, first chunk."""

_UTC = dt.UTC


def chunk_batch() -> pa.RecordBatch:
    """The chunk's one record batch: three rows, the second mostly nulls."""
    schema = pa.schema(
        [
            ("k_bool", pa.bool_()),
            ("k_byte", pa.int8()),
            ("k_short", pa.int16()),
            ("k_int", pa.int32()),
            ("k_long", pa.int64()),
            ("k_float", pa.float32()),
            ("k_double", pa.float64()),
            ("k_date", pa.date32()),
            ("k_ts", pa.timestamp("us", tz="UTC")),
            ("k_ts_ntz", pa.timestamp("us")),
            ("k_str", pa.string()),
            ("k_bin", pa.binary()),
            ("k_large_str", pa.large_string()),
        ]
    )
    rows = {
        "k_bool": [True, None, False],
        "k_byte": [-128, None, 127],
        "k_short": [-32768, None, 32767],
        "k_int": [-(2**31), None, 2**31 - 1],
        "k_long": [-(2**63), 0, 2**63 - 1],
        "k_float": [1.5, None, -0.25],
        "k_double": [3.141592653589793, None, -1e300],
        "k_date": [dt.date(1970, 1, 1), None, dt.date(2024, 2, 29)],
        "k_ts": [dt.datetime(2024, 2, 29, 12, 30, 45, 123456, tzinfo=_UTC), None, None],
        "k_ts_ntz": [dt.datetime(1999, 12, 31, 23, 59, 59, 999999), None, None],
        "k_str": ["zürich ✓", None, ""],
        "k_bin": [b"\x00\xff\x10", None, b""],
        "k_large_str": ["a" * 40, None, "snapshot"],
    }
    return pa.RecordBatch.from_pydict(rows, schema=schema)


def chunk_bytes() -> bytes:
    """The chunk as a Python worker encodes it."""
    batch = chunk_batch()
    return encode_batches(batch.schema, [batch])


def descriptor(data: bytes) -> ChunkDescriptor:
    """The chunk's descriptor (its size, rows and xxh3-64 checksum)."""
    return ChunkDescriptor.of(CHUNK_KEY, data, chunk_batch().num_rows)


def client_value(data: bytes) -> bytes:
    """``data`` serialised as the Hazelcast Python client puts a chunk (a ``bytearray``)."""
    service = SerializationServiceV1(Config())  # type: ignore[no-untyped-call]
    return bytes(service.to_data(bytearray(data)).buffer)  # type: ignore[no-untyped-call]


def main() -> None:
    """Writes the three vector files."""
    from spark_runtime.jvm_chunks import chunk_line

    data = chunk_bytes()
    VECTOR_DIR.mkdir(parents=True, exist_ok=True)
    CHUNK_FILE.write_bytes(data)
    LINE_FILE.write_text(chunk_line(descriptor(data)) + "\n")
    VALUE_FILE.write_bytes(client_value(data))
    print(f"wrote {CHUNK_FILE.name}, {LINE_FILE.name}, {VALUE_FILE.name} in {VECTOR_DIR}")


if __name__ == "__main__":
    main()
