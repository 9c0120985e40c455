"""Snapshot data as the protocol sees it: chunk keys, the validation record, strict validation.

Every chunk key carries its snapshot id, because snapshot maps may hold stray entries of other
snapshots (a clear is not replicated safely, taking step 3, and invariant I4 allows it; see
``docs/protocol.md``). The validation record (Jet's ``SnapshotValidationRecord``, called
"SnapshotVerificationRecord" in Jet's design) lists every chunk key of its snapshot, so
validation before a restore (restore step 4) can be strict without scanning the map: the record
must exist, carry the expected id, and every listed chunk must be present. The check lives here,
not in each store adapter, so that it is the same for the Hazelcast store, the in-memory fakes
and the operator's validation of copied exports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from snapshot_protocol.errors import SnapshotCorrupted

if TYPE_CHECKING:
    from snapshot_protocol.ports import SnapshotStore

SNAPSHOT_FORMAT_VERSION = 1
"""Version of the chunk key and validation record layout written by this code."""

_MISSING_EXAMPLES = 3


@dataclass(frozen=True, order=True)
class ChunkKey:
    """The key of one chunk: ``<snapshotId>/<operator>/<partition>/<seq>``.

    Attributes:
        snapshot_id: The snapshot the chunk belongs to.
        operator: The participant that wrote it (no ``/``).
        partition: The state partition, 0 for driver-side participants.
        seq: The chunk's position within the partition, for partitions split into chunks.
    """

    snapshot_id: int
    operator: str
    partition: int
    seq: int

    def __post_init__(self) -> None:
        if not self.operator or "/" in self.operator:
            raise ValueError(f"operator name must be non-empty without '/': {self.operator!r}")
        if self.snapshot_id < 0 or self.partition < 0 or self.seq < 0:
            raise ValueError(f"chunk key numbers must not be negative: {self!r}")

    def __str__(self) -> str:
        return f"{self.snapshot_id}/{self.operator}/{self.partition}/{self.seq}"

    @classmethod
    def parse(cls, text: str) -> ChunkKey:
        """Reads a key written by ``str(key)``."""
        parts = text.split("/")
        if len(parts) != 4:
            raise ValueError(f"not a chunk key: {text!r}")
        snapshot_id, operator, partition, seq = parts
        return cls(int(snapshot_id), operator, int(partition), int(seq))


@dataclass(frozen=True)
class ChunkDescriptor:
    """What a participant reports about one chunk it wrote in phase 1.

    Attributes:
        key: Where the chunk was put.
        num_bytes: Size of the chunk's value.
        num_keys: State entries in the chunk (for the snapshot statistics).
    """

    key: ChunkKey
    num_bytes: int
    num_keys: int


@dataclass(frozen=True)
class ValidationRecord:
    """The entry that makes a snapshot map's content checkable (docs/protocol.md, taking step 5).

    Attributes:
        snapshot_id: The snapshot this record validates.
        chunk_keys: Every chunk of the snapshot.
        num_bytes: Total bytes of the chunks.
        num_keys: Total state entries in the chunks.
        creation_time: When the snapshot started, epoch milliseconds.
        job_uid: The job that wrote the snapshot.
        pipeline_fingerprint: The pipeline code that wrote it.
        format_version: The layout version, ``SNAPSHOT_FORMAT_VERSION`` when written here.
    """

    snapshot_id: int
    chunk_keys: tuple[ChunkKey, ...]
    num_bytes: int
    num_keys: int
    creation_time: int
    job_uid: str
    pipeline_fingerprint: str
    format_version: int = SNAPSHOT_FORMAT_VERSION

    @property
    def num_chunks(self) -> int:
        """How many chunks the snapshot has."""
        return len(self.chunk_keys)

    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-ready form for the snapshot store."""
        return {
            "snapshotId": self.snapshot_id,
            "numChunks": self.num_chunks,
            "numBytes": self.num_bytes,
            "numKeys": self.num_keys,
            "creationTime": self.creation_time,
            "jobUid": self.job_uid,
            "pipelineFingerprint": self.pipeline_fingerprint,
            "formatVersion": self.format_version,
            "chunkKeys": [str(key) for key in self.chunk_keys],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ValidationRecord:
        """Reads the form written by ``to_dict``.

        Raises:
            ValueError: If the stored chunk count does not match the listed keys.
        """
        record = cls(
            snapshot_id=int(data["snapshotId"]),
            chunk_keys=tuple(ChunkKey.parse(key) for key in data["chunkKeys"]),
            num_bytes=int(data["numBytes"]),
            num_keys=int(data["numKeys"]),
            creation_time=int(data["creationTime"]),
            job_uid=str(data["jobUid"]),
            pipeline_fingerprint=str(data["pipelineFingerprint"]),
            format_version=int(data["formatVersion"]),
        )
        if record.num_chunks != int(data["numChunks"]):
            raise ValueError(
                f"validation record lists {record.num_chunks} chunks but says {data['numChunks']}"
            )
        return record


@dataclass(frozen=True)
class SnapshotRef:
    """The snapshot one participant restores from (restore step 5).

    Attributes:
        map_name: The map holding the snapshot.
        snapshot_id: The snapshot's id; transactions it names are committed "just in case".
        chunk_keys: The chunks this participant wrote into it.
    """

    map_name: str
    snapshot_id: int
    chunk_keys: tuple[ChunkKey, ...]


class ChunkWriter:
    """Writes one participant's chunks of one snapshot (taking step 4).

    Driver-side participants call :meth:`write`. Executor-side participants cannot carry this
    object into Spark tasks; they use :attr:`map_name`, :attr:`snapshot_id` and
    :attr:`operator` to build keys and put chunks from the executors, and return the
    descriptors of what they wrote.
    """

    def __init__(self, store: SnapshotStore, map_name: str, snapshot_id: int, operator: str):
        self._store = store
        self.map_name = map_name
        self.snapshot_id = snapshot_id
        self.operator = operator

    def key(self, partition: int, seq: int = 0) -> ChunkKey:
        """Returns the key of this participant's chunk ``seq`` of ``partition``."""
        return ChunkKey(self.snapshot_id, self.operator, partition, seq)

    def write(self, partition: int, seq: int, data: bytes, num_keys: int) -> ChunkDescriptor:
        """Puts one chunk with a single-key put.

        Raises:
            IndeterminateChunkWrite: If the put may not have reached all backups.
            SnapshotStoreError: If the put failed.
        """
        key = self.key(partition, seq)
        self._store.put_chunk(self.map_name, key, data)
        return ChunkDescriptor(key, len(data), num_keys)

    def write_many(self, chunks: Sequence[tuple[int, int, bytes, int]]) -> list[ChunkDescriptor]:
        """Puts chunks given as ``(partition, seq, data, num_keys)``, in parallel where the
        store can; every put is still a single-key put with its own determinate outcome.

        Raises:
            IndeterminateChunkWrite: If any put may not have reached all backups.
            SnapshotStoreError: If any put failed.
        """
        keyed = [(self.key(partition, seq), data) for partition, seq, data, _ in chunks]
        self._store.put_chunks(self.map_name, keyed)
        return [
            ChunkDescriptor(key, len(data), num_keys)
            for (key, data), (_, _, _, num_keys) in zip(keyed, chunks, strict=True)
        ]


def validate_snapshot(store: SnapshotStore, map_name: str, snapshot_id: int) -> ValidationRecord:
    """Strictly validates a snapshot before restoring from it (docs/protocol.md, restore step 4).

    Args:
        store: Where the snapshot is.
        map_name: The map holding it.
        snapshot_id: The id the execution record points to.

    Returns:
        The snapshot's validation record.

    Raises:
        SnapshotCorrupted: If the validation record is missing, belongs to another snapshot, is
            inconsistent, or any chunk it lists is missing.
        SnapshotStoreError: If the store could not be read; that says nothing about corruption.
    """
    record = store.get_validation_record(map_name)
    if record is None:
        raise SnapshotCorrupted(map_name, snapshot_id, "its validation record is missing")
    if record.snapshot_id != snapshot_id:
        raise SnapshotCorrupted(
            map_name,
            snapshot_id,
            f"the map's validation record belongs to snapshot {record.snapshot_id}",
        )
    foreign = [key for key in record.chunk_keys if key.snapshot_id != snapshot_id]
    if foreign:
        raise SnapshotCorrupted(
            map_name,
            snapshot_id,
            f"its validation record lists chunk '{foreign[0]}' of another snapshot",
        )
    missing = sorted(store.missing_chunks(map_name, record.chunk_keys))
    if missing:
        examples = ", ".join(f"'{key}'" for key in missing[:_MISSING_EXAMPLES])
        raise SnapshotCorrupted(
            map_name,
            snapshot_id,
            f"{len(missing)} of its {record.num_chunks} chunks are missing ({examples}"
            f"{', ...' if len(missing) > _MISSING_EXAMPLES else ''})",
        )
    return record


def chunks_of(record: ValidationRecord, operator: str) -> tuple[ChunkKey, ...]:
    """Returns the chunk keys one participant wrote into the validated snapshot."""
    return tuple(key for key in record.chunk_keys if key.operator == operator)


def check_descriptors(
    descriptors: Sequence[ChunkDescriptor], snapshot_id: int, operator: str
) -> None:
    """Checks that a participant reported only chunks of its own, in this snapshot.

    A chunk under another id or operator would make the validation record list data that a
    restore hands to the wrong participant, so it fails the snapshot instead.

    Raises:
        ValueError: If a descriptor is foreign or repeated.
    """
    seen: set[ChunkKey] = set()
    for descriptor in descriptors:
        key = descriptor.key
        if key.snapshot_id != snapshot_id or key.operator != operator:
            raise ValueError(f"participant '{operator}' reported foreign chunk '{key}'")
        if key in seen:
            raise ValueError(f"participant '{operator}' reported chunk '{key}' twice")
        seen.add(key)
