"""Small valid snapshots written into the fakes' snapshot maps, and their validation records.

Shared by the tests of chunk validation (``test_chunks.py``), of copies between stores
(``test_transfer.py``) and of the driver's durable copies (``tests/unit/runtime/test_durable.py``).
"""

from __future__ import annotations

from snapshot_protocol import (
    ChunkDescriptor,
    ChunkKey,
    ChunkWriter,
    PipelineShape,
    ValidationRecord,
)

from .fakes import Cluster

MAP = "__sj.b1.snapshot.uid.0"
"""The snapshot map :func:`write_snapshot` writes into."""
SHAPE = PipelineShape({"source": "Sequence", "state": "RunningAggregate(keys=k; struct<k:int>)"}, 8)
"""The pipeline shape :func:`record_for` records by default."""


def record_for(
    snapshot_id: int, chunks: tuple[ChunkDescriptor, ...], shape: PipelineShape = SHAPE
) -> ValidationRecord:
    """A validation record of job ``uid`` listing ``chunks``.

    Args:
        snapshot_id: The snapshot's id.
        chunks: The chunks it lists.
        shape: The pipeline shape it records.

    Returns:
        The record (10 bytes, 3 keys, created at 1 s).
    """
    return ValidationRecord(snapshot_id, chunks, 10, 3, 1_000, "uid", shape)


def write_snapshot(cluster: Cluster, snapshot_id: int, chunks: int) -> tuple[ChunkKey, ...]:
    """Writes a valid snapshot of ``chunks`` chunks of operator ``state`` into :data:`MAP`.

    Args:
        cluster: The fakes whose snapshot maps get the snapshot.
        snapshot_id: The snapshot's id.
        chunks: How many chunks (partition 0, sequence 0 ..).

    Returns:
        The keys of the chunks written.
    """
    writer = ChunkWriter(cluster.snapshots, MAP, snapshot_id, "state")
    written = tuple(writer.write(0, seq, b"data", 1) for seq in range(chunks))
    cluster.snapshots.put_validation_record(MAP, record_for(snapshot_id, written))
    return tuple(chunk.key for chunk in written)
