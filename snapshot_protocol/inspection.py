"""What a snapshot holds, summarised from its validation record: for people, not for restores.

Why in the core: ``python -m spark_runtime snapshot ...`` shows snapshots kept in Hazelcast and
in object storage alike, and what it shows must come from the same validation record and the
same checks a restore uses (:func:`~snapshot_protocol.chunks.validate_snapshot`,
:func:`~snapshot_protocol.chunks.verify_chunk`), so that "valid" here means what it means to a
restore. Summaries are plain data; rendering them is the command line's business.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from snapshot_protocol.chunks import ValidationRecord, validate_snapshot, verify_chunk
from snapshot_protocol.ports import SnapshotStore


@dataclass(frozen=True)
class OperatorSummary:
    """One participant's part of a snapshot.

    Attributes:
        operator: The participant's name (a source, a state, a sink).
        description: What the pipeline said it is (its kind and layout), from the record.
        partitions: State partitions it wrote chunks for.
        chunks: Its chunks.
        num_bytes: Their total size.
        num_keys: The state entries in them.
    """

    operator: str
    description: str
    partitions: int
    chunks: int
    num_bytes: int
    num_keys: int


@dataclass(frozen=True)
class SnapshotSummary:
    """A snapshot as its validation record describes it.

    Attributes:
        snapshot_id: Its id.
        job_uid: The job that wrote it.
        creation_time: When it started, epoch milliseconds.
        num_chunks: Its chunks.
        num_bytes: Their total size.
        num_keys: The state entries in them.
        state_partitions: The pipeline's state partition count when it was taken.
        fingerprint: The pipeline's shape fingerprint.
        operators: Each participant's part, by name.
    """

    snapshot_id: int
    job_uid: str
    creation_time: int
    num_chunks: int
    num_bytes: int
    num_keys: int
    state_partitions: int
    fingerprint: str
    operators: tuple[OperatorSummary, ...]


def summarize(record: ValidationRecord) -> SnapshotSummary:
    """Sums a validation record's chunks by participant."""
    chunks: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    partitions: dict[str, set[int]] = defaultdict(set)
    for chunk in record.chunks:
        totals = chunks[chunk.key.operator]
        totals[0] += 1
        totals[1] += chunk.num_bytes
        totals[2] += chunk.num_keys
        partitions[chunk.key.operator].add(chunk.key.partition)
    names = sorted(set(record.shape.participants) | set(chunks))
    return SnapshotSummary(
        snapshot_id=record.snapshot_id,
        job_uid=record.job_uid,
        creation_time=record.creation_time,
        num_chunks=record.num_chunks,
        num_bytes=record.num_bytes,
        num_keys=record.num_keys,
        state_partitions=record.shape.state_partitions,
        fingerprint=record.shape.fingerprint,
        operators=tuple(
            OperatorSummary(
                operator=name,
                description=record.shape.participants.get(name, "(not in the pipeline's shape)"),
                partitions=len(partitions[name]),
                chunks=chunks[name][0],
                num_bytes=chunks[name][1],
                num_keys=chunks[name][2],
            )
            for name in names
        ),
    )


def verify_snapshot(store: SnapshotStore, map_name: str, snapshot_id: int) -> SnapshotSummary:
    """Validates a snapshot and reads every chunk, checking each against its checksum.

    This is everything a restore checks, without restoring: the validation record of exactly
    this id, every chunk it lists present, every chunk's size and checksum as read.

    Returns:
        The snapshot's summary, once every check passed.

    Raises:
        SnapshotCorrupted: Naming the snapshot and what is wrong (a missing record, missing
            chunks, a chunk that does not match its checksum).
        SnapshotIncompatible: If the record is of a format this code does not read.
        SnapshotStoreError: If the store could not be read.
    """
    record = validate_snapshot(store, map_name, snapshot_id)
    for chunk in record.chunks:
        verify_chunk(map_name, snapshot_id, chunk, store.read_chunk(map_name, chunk.key))
    return summarize(record)
