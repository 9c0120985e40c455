"""Snapshot data as the protocol sees it: chunk keys, the validation record, strict validation.

Every key in a snapshot map, chunk or validation record, starts with its snapshot id. That id
is the fence on snapshot data (``docs/concepts/protocol.md``, mechanism M8): it was allocated by a
safe write of the execution record before any data was written under it (mechanism M5), so no two
executions ever write under the same id, and an execution replaced by a newer one (a zombie)
can only write and discard keys of ids older than anything the newer execution writes. A
restore reads the validation record of exactly the id the execution record names and only the
chunks that record lists; it never reads "the map's" record, which a zombie could overwrite.

The validation record (Jet's ``SnapshotValidationRecord``, called "SnapshotVerificationRecord"
in Jet's design) lists every chunk of its snapshot with the chunk's size and xxh3 checksum, and
describes the pipeline that wrote it, so validation before a restore (restore step 4) can be
strict without scanning the map: the record must exist, carry the expected id and a format this
code reads, and every listed chunk must be present; every chunk read later is checked against
its checksum (:func:`verify_chunk`). The checks live here, not in each store adapter, so that
they are the same for the Hazelcast store, the in-memory fakes and the operator's copies of
exports.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import xxhash

from snapshot_protocol.errors import SnapshotCorrupted, SnapshotIncompatible

if TYPE_CHECKING:
    from snapshot_protocol.ports import ChunkReader, SnapshotStore

SNAPSHOT_FORMAT_VERSION = 3
"""The newest chunk key and validation record layout this code writes and reads.

1: one validation record per map under ``validation-record``, no checksums. 2: the validation
record under ``<snapshotId>/validation-record``, with a checksum of every chunk and the
pipeline's state layout. 3: as 2, and a record may list chains: chunks inherited from earlier
snapshots and deltas (docs/concepts/protocol.md, "Incremental snapshots").
"""

STANDALONE_FORMAT_VERSION = 2
"""The format of a record that lists no chain: only its own chunks, none of them a delta.

Such a record is written in format 2, which releases from before chains read too, so a job
that takes no incremental snapshot can still be restored by them."""

READABLE_FORMAT_VERSIONS = (STANDALONE_FORMAT_VERSION, SNAPSHOT_FORMAT_VERSION)
"""The formats this code restores."""

DELTA_MARK = "delta"
"""The fifth element of a delta chunk's entry in a validation record."""

MAC_ALGORITHM = "hmac-sha256"
"""The validation record's keyed MAC (:mod:`snapshot_protocol.signing`)."""

CHECKSUM_ALGORITHM = "xxh3-64"
"""The chunk checksum: xxh3's 64-bit hash, hex; fast enough to be free next to the network."""

LEGACY_VALIDATION_RECORD_KEY = "validation-record"
"""Where format 1 kept a map's only validation record; read only to report the old format."""

_VALIDATION_RECORD_SUFFIX = "/validation-record"
_LEADING_ID = re.compile(r"^(\d+)/")

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


def checksum(data: bytes | bytearray | memoryview) -> str:
    """Returns the checksum of one chunk's value (:data:`CHECKSUM_ALGORITHM`)."""
    return xxhash.xxh3_64_hexdigest(data)


def validation_record_key(snapshot_id: int) -> str:
    """Returns the key of snapshot ``snapshot_id``'s validation record in its map."""
    return f"{snapshot_id}{_VALIDATION_RECORD_SUFFIX}"


def snapshot_id_of_key(key: str) -> int | None:
    """Returns the snapshot id a map key belongs to, or None for a key of no snapshot."""
    match = _LEADING_ID.match(key)
    return None if match is None else int(match.group(1))


def validation_record_id(key: str) -> int | None:
    """Returns the snapshot id if ``key`` is a validation record's key, else None."""
    if not key.endswith(_VALIDATION_RECORD_SUFFIX):
        return None
    return snapshot_id_of_key(key)


@dataclass(frozen=True)
class ChunkDescriptor:
    """What a participant reports about one chunk it wrote in phase 1.

    Attributes:
        key: Where the chunk was put.
        num_bytes: Size of the chunk's value.
        num_keys: State entries in the chunk (for the snapshot statistics).
        checksum: The value's :func:`checksum`, verified by every read of the chunk.
        delta: Whether the chunk is part of a delta (the keys of its partition updated since
            the snapshot before) rather than of a full version of it.
    """

    key: ChunkKey
    num_bytes: int
    num_keys: int
    checksum: str
    delta: bool = False

    @classmethod
    def of(
        cls, key: ChunkKey, data: bytes | bytearray, num_keys: int, delta: bool = False
    ) -> ChunkDescriptor:
        """Describes the chunk ``data`` written under ``key``."""
        return cls(key, len(data), num_keys, checksum(data), delta)

    def to_list(self) -> list[Any]:
        """Returns the compact JSON form used in the validation record.

        A delta's entry has a fifth element, :data:`DELTA_MARK`; a full version's has four,
        as in format 2.
        """
        entry: list[Any] = [str(self.key), self.num_bytes, self.num_keys, self.checksum]
        return [*entry, DELTA_MARK] if self.delta else entry

    @classmethod
    def from_list(cls, data: Sequence[Any]) -> ChunkDescriptor:
        """Reads the form written by :meth:`to_list`."""
        if len(data) == 5:
            key, num_bytes, num_keys, digest, mark = data
            if mark != DELTA_MARK:
                raise ValueError(f"chunk entry's fifth element is {mark!r}, not {DELTA_MARK!r}")
        else:
            key, num_bytes, num_keys, digest = data
        return cls(
            ChunkKey.parse(str(key)), int(num_bytes), int(num_keys), str(digest), len(data) == 5
        )


@dataclass(frozen=True)
class PipelineShape:
    """What a snapshot must have been written by for this pipeline to restore it.

    Attributes:
        participants: Each participant's name and a description of what it stores (for keyed
            state its keys and state schema), as the pipeline declares them.
        state_partitions: The keyed state partitions; a change is re-partitioned on restore.
    """

    participants: Mapping[str, str] = field(default_factory=dict)
    state_partitions: int = 0

    def __post_init__(self) -> None:
        object.__setattr__(self, "participants", MappingProxyType(dict(self.participants)))

    @property
    def fingerprint(self) -> str:
        """A short hash of the participants: equal fingerprints, compatible state."""
        text = json.dumps(sorted(self.participants.items()), separators=(",", ":"))
        return xxhash.xxh3_64_hexdigest(text.encode())

    def differences(self, other: PipelineShape) -> list[str]:
        """Says how ``other`` (the snapshot's) differs from this (the pipeline's), if it does."""
        mine, theirs = self.participants, other.participants
        found = [
            f"operator '{name}' is in the snapshot but not in the pipeline"
            for name in sorted(set(theirs) - set(mine))
        ]
        found += [
            f"operator '{name}' is in the pipeline but not in the snapshot"
            for name in sorted(set(mine) - set(theirs))
        ]
        found += [
            f"operator '{name}' stores {theirs[name]} in the snapshot, {mine[name]} in the pipeline"
            for name in sorted(set(mine) & set(theirs))
            if mine[name] != theirs[name]
        ]
        return found


@dataclass(frozen=True)
class RecordMac:
    """The keyed MAC of a validation record (:mod:`snapshot_protocol.signing`).

    Attributes:
        key_id: Which of the job's keys computed it (rotation keeps older ones verifying).
        value: The MAC, hex.
    """

    key_id: str
    value: str

    def to_dict(self) -> dict[str, str]:
        """Returns the JSON form kept in the record under ``mac``."""
        return {"algorithm": MAC_ALGORITHM, "keyId": self.key_id, "value": self.value}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RecordMac:
        """Reads the form written by :meth:`to_dict`.

        Raises:
            ValueError: If the MAC is of another algorithm or misses a field.
        """
        if data.get("algorithm") != MAC_ALGORITHM:
            raise ValueError(f"record MAC is {data.get('algorithm')!r}, not {MAC_ALGORITHM!r}")
        return cls(str(data["keyId"]), str(data["value"]))


@dataclass(frozen=True)
class ValidationRecord:
    """The entry that makes a snapshot checkable (docs/concepts/protocol.md, taking step 5).

    Attributes:
        snapshot_id: The snapshot this record validates.
        chunks: Every chunk of the snapshot, with its size and checksum.
        num_bytes: Total bytes of the chunks.
        num_keys: Total state entries in the chunks.
        creation_time: When the snapshot started, epoch milliseconds.
        job_uid: The job that wrote the snapshot.
        shape: The pipeline that wrote it.
        mac: The keyed MAC over everything else in the record, None for an unsigned record
            (:mod:`snapshot_protocol.signing`). Releases that know no MAC ignore it.

    A record may list chunks of earlier snapshots (their keys carry their ids) and deltas:
    its chains (:func:`chain_problem`). Its totals count only the chunks it wrote itself,
    which is what the snapshot cost; a restore reads :attr:`chunks`, all of them.
    """

    snapshot_id: int
    chunks: tuple[ChunkDescriptor, ...]
    num_bytes: int
    num_keys: int
    creation_time: int
    job_uid: str
    shape: PipelineShape = field(default_factory=PipelineShape)
    mac: RecordMac | None = None

    @property
    def has_chains(self) -> bool:
        """Whether the record lists an inherited chunk or a delta (format 3)."""
        return any(c.delta or c.key.snapshot_id != self.snapshot_id for c in self.chunks)

    @property
    def format_version(self) -> int:
        """The format the record is written in: 3 with chains, else 2, which older releases
        read too (:data:`STANDALONE_FORMAT_VERSION`)."""
        return SNAPSHOT_FORMAT_VERSION if self.has_chains else STANDALONE_FORMAT_VERSION

    @property
    def chunk_keys(self) -> tuple[ChunkKey, ...]:
        """The key of every chunk."""
        return tuple(chunk.key for chunk in self.chunks)

    @property
    def num_chunks(self) -> int:
        """How many chunks the snapshot has."""
        return len(self.chunks)

    def to_dict(self) -> dict[str, Any]:
        """Returns a JSON-ready form for the snapshot store."""
        data = self.unsigned_dict()
        if self.mac is not None:
            data["mac"] = self.mac.to_dict()
        return data

    def signed_payload(self) -> bytes:
        """Returns the bytes the record's MAC is computed over: its JSON without the MAC, keys
        sorted and without spaces, so a record read back and re-serialized gives the same."""
        return json.dumps(self.unsigned_dict(), sort_keys=True, separators=(",", ":")).encode()

    def unsigned_dict(self) -> dict[str, Any]:
        """Returns :meth:`to_dict` without the MAC."""
        return {
            "formatVersion": self.format_version,
            "snapshotId": self.snapshot_id,
            "numChunks": self.num_chunks,
            "numBytes": self.num_bytes,
            "numKeys": self.num_keys,
            "creationTime": self.creation_time,
            "jobUid": self.job_uid,
            "pipelineFingerprint": self.shape.fingerprint,
            "participants": dict(self.shape.participants),
            "statePartitions": self.shape.state_partitions,
            "checksumAlgorithm": CHECKSUM_ALGORITHM,
            "chunks": [chunk.to_list() for chunk in self.chunks],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ValidationRecord:
        """Reads the form written by ``to_dict``.

        Raises:
            UnreadableFormat: If the record is of another format version or checksum.
            ValueError: If the record is malformed or its chunk count does not match.
        """
        version = int(data.get("formatVersion", 1))
        if version not in READABLE_FORMAT_VERSIONS:
            readable = " and ".join(str(v) for v in READABLE_FORMAT_VERSIONS)
            raise UnreadableFormat(
                int(data.get("snapshotId", -1)),
                f"it was written in snapshot format {version} and this runtime reads formats "
                f"{readable}",
            )
        if data.get("checksumAlgorithm") != CHECKSUM_ALGORITHM:
            raise UnreadableFormat(
                int(data["snapshotId"]),
                f"its chunk checksums are {data.get('checksumAlgorithm')!r} and this runtime "
                f"verifies {CHECKSUM_ALGORITHM!r}",
            )
        record = cls(
            snapshot_id=int(data["snapshotId"]),
            chunks=tuple(ChunkDescriptor.from_list(chunk) for chunk in data["chunks"]),
            num_bytes=int(data["numBytes"]),
            num_keys=int(data["numKeys"]),
            creation_time=int(data["creationTime"]),
            job_uid=str(data["jobUid"]),
            shape=PipelineShape(
                {str(k): str(v) for k, v in dict(data["participants"]).items()},
                int(data["statePartitions"]),
            ),
            mac=RecordMac.from_dict(data["mac"]) if "mac" in data else None,
        )
        if record.num_chunks != int(data["numChunks"]):
            raise ValueError(
                f"validation record lists {record.num_chunks} chunks but says {data['numChunks']}"
            )
        if record.format_version != version:
            raise ValueError(
                f"validation record says format {version} but lists "
                f"{'chains' if record.has_chains else 'no chain'} (format "
                f"{record.format_version})"
            )
        return record


def parse_validation_record(payload: bytes | bytearray | str) -> ValidationRecord:
    """Reads a validation record as a store holds it: the JSON of :meth:`ValidationRecord.to_dict`.

    Raises:
        UnreadableFormat: If the record is of another format version or checksum.
        ValueError: If the payload is not JSON, not an object, or misses a field.
    """
    try:
        data = json.loads(payload)
    except ValueError as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    try:
        return ValidationRecord.from_dict(data)
    except (KeyError, TypeError) as exc:
        raise ValueError(f"field {exc} is missing or of the wrong type") from exc


class UnreadableFormat(ValueError):  # noqa: N818 - names the condition
    """A validation record this code cannot read: another format version or checksum.

    Attributes:
        snapshot_id: The id the record names, -1 if unknown.
        problem: What differs.
    """

    def __init__(self, snapshot_id: int, problem: str) -> None:
        self.snapshot_id = snapshot_id
        self.problem = problem
        super().__init__(problem)


@dataclass(frozen=True)
class SnapshotRef:
    """The snapshot one participant restores from (restore step 5).

    Attributes:
        map_name: The map holding the snapshot.
        snapshot_id: The snapshot's id; transactions it names are committed "just in case".
        chunks: The chunks this participant wrote into it, with their checksums.
        state_partitions: The keyed state partitions the snapshot was taken with.
        job_uid: The job that took the snapshot (its validation record's): another job's when
            this one starts from an export. That job finished the snapshot's second phase
            before the export was listed, so its output is not this job's to publish again.
            Empty when not known.
    """

    map_name: str
    snapshot_id: int
    chunks: tuple[ChunkDescriptor, ...]
    state_partitions: int = 0
    job_uid: str = ""

    @property
    def chunk_keys(self) -> tuple[ChunkKey, ...]:
        """The key of every chunk of this participant."""
        return tuple(chunk.key for chunk in self.chunks)

    def chunk(self, key: ChunkKey) -> ChunkDescriptor:
        """Returns the descriptor of one of this participant's chunks.

        Raises:
            KeyError: If the snapshot lists no such chunk for this participant.
        """
        for chunk in self.chunks:
            if chunk.key == key:
                return chunk
        raise KeyError(f"snapshot {self.snapshot_id} lists no chunk '{key}'")

    def read(self, reader: ChunkReader, key: ChunkKey) -> bytes:
        """Reads one listed chunk and verifies it against its checksum.

        Raises:
            KeyError: If the snapshot lists no such chunk for this participant.
            SnapshotCorrupted: If the value is not what was written.
            SnapshotStoreError: If the chunk could not be read.
        """
        listed = self.chunk(key)
        data = reader.read_chunk(self.map_name, key)
        verify_chunk(self.map_name, self.snapshot_id, listed, data)
        return data


class ChunkWriter:
    """Writes one participant's chunks of one snapshot (taking step 4).

    Driver-side participants call :meth:`write`. Executor-side participants cannot carry this
    object into Spark tasks; they use :attr:`map_name`, :attr:`snapshot_id` and
    :attr:`operator` to build keys and put chunks from the executors, and return the
    descriptors of what they wrote.

    A participant may build an incremental snapshot on :attr:`previous`: report some of its
    chunks again (inherit them) and write deltas for the partitions that changed
    (docs/concepts/protocol.md, "Incremental snapshots").

    Attributes:
        map_name: The map the snapshot writes to.
        snapshot_id: The snapshot's id, the first part of every key written.
        operator: The participant's name, the second part.
        previous: The participant's chunks in the restore point, if this snapshot may
            inherit them: it is an automatic or terminal snapshot of a job with incremental
            snapshots, written to the map that holds the restore point. None if it must
            stand alone.
    """

    def __init__(
        self,
        store: SnapshotStore,
        map_name: str,
        snapshot_id: int,
        operator: str,
        previous: SnapshotRef | None = None,
    ):
        self._store = store
        self.map_name = map_name
        self.snapshot_id = snapshot_id
        self.operator = operator
        self.previous = previous

    def key(self, partition: int, seq: int = 0) -> ChunkKey:
        """Returns the key of this participant's chunk ``seq`` of ``partition``."""
        return ChunkKey(self.snapshot_id, self.operator, partition, seq)

    def write(
        self, partition: int, seq: int, data: bytes, num_keys: int, delta: bool = False
    ) -> ChunkDescriptor:
        """Puts one chunk with a single-key put; ``delta`` if it is part of a delta.

        Raises:
            IndeterminateChunkWrite: If the put may not have reached all backups.
            SnapshotStoreError: If the put failed.
        """
        key = self.key(partition, seq)
        self._store.put_chunk(self.map_name, key, data)
        return ChunkDescriptor.of(key, data, num_keys, delta)

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
            ChunkDescriptor.of(key, data, num_keys)
            for (key, data), (_, _, _, num_keys) in zip(keyed, chunks, strict=True)
        ]


def validate_snapshot(store: SnapshotStore, map_name: str, snapshot_id: int) -> ValidationRecord:
    """Strictly validates a snapshot before restoring from it (docs/concepts/protocol.md, restore
    step 4).

    Reads the validation record of ``snapshot_id`` itself, never another snapshot's that a
    zombie execution may have written into the same map.

    Args:
        store: Where the snapshot is.
        map_name: The map holding it.
        snapshot_id: The id the execution record points to.

    Returns:
        The snapshot's validation record.

    Raises:
        SnapshotCorrupted: If the validation record is missing, belongs to another snapshot, is
            inconsistent, or any chunk it lists is missing.
        SnapshotIncompatible: If the record is of a format this code does not read.
        SnapshotStoreError: If the store could not be read; that says nothing about corruption.
    """
    try:
        record = store.get_validation_record(map_name, snapshot_id)
    except UnreadableFormat as unreadable:
        raise SnapshotIncompatible(
            map_name,
            snapshot_id,
            unreadable.problem,
            "Restore it with the release that wrote it, or start the job without it",
        ) from unreadable
    except ValueError as malformed:
        raise SnapshotCorrupted(
            map_name, snapshot_id, f"its validation record is unreadable ({malformed})"
        ) from malformed
    if record is None:
        raise SnapshotCorrupted(
            map_name, snapshot_id, "its validation record is missing", members_lost=True
        )
    if record.snapshot_id != snapshot_id:
        raise SnapshotCorrupted(
            map_name,
            snapshot_id,
            f"the validation record under its key belongs to snapshot {record.snapshot_id}",
        )
    problem = chain_problem(record)
    if problem is not None:
        raise SnapshotCorrupted(map_name, snapshot_id, f"its validation record {problem}")
    missing = sorted(store.missing_chunks(map_name, record.chunk_keys))
    if missing:
        examples = ", ".join(f"'{key}'" for key in missing[:_MISSING_EXAMPLES])
        raise SnapshotCorrupted(
            map_name,
            snapshot_id,
            f"{len(missing)} of its {record.num_chunks} chunks are missing ({examples}"
            f"{', ...' if len(missing) > _MISSING_EXAMPLES else ''})",
            members_lost=True,
        )
    return record


def discarded_keys(
    keys: Iterable[str], through_snapshot_id: int, keep: Iterable[ValidationRecord] = ()
) -> list[str]:
    """The keys of a map a discard removes, in order: those of snapshots up to the bound,
    except the validation record of every snapshot in ``keep`` and every chunk it lists.

    ``keep`` is what makes a discard safe in a map whose snapshots share chunks: the restore
    point's chains reach back to chunks of older ids (docs/concepts/protocol.md, "Where the chunks
    live and what may be discarded"). Keys without a snapshot id stay.
    """
    kept = {validation_record_key(record.snapshot_id) for record in keep}
    kept.update(str(key) for record in keep for key in record.chunk_keys)
    return sorted(
        key
        for key in keys
        if (snapshot_id := snapshot_id_of_key(key)) is not None
        and snapshot_id <= through_snapshot_id
        and key not in kept
    )


def keys_of_snapshots(keys: Iterable[str], snapshot_ids: Iterable[int]) -> list[str]:
    """The keys of a map that belong to the given snapshots (records and chunks), in order.

    For :meth:`~snapshot_protocol.ports.SnapshotStore.discard_snapshots` in an export map, where
    no snapshot lists another's chunks. Keys without a snapshot id stay.
    """
    doomed = set(snapshot_ids)
    return sorted(key for key in keys if snapshot_id_of_key(key) in doomed)


def chain_problem(record: ValidationRecord) -> str | None:
    """Says what is wrong with the chains a record lists, or None if nothing is.

    Every chunk of one operator's partition belongs to a chain: the chunks of one full
    version, written by the record's snapshot or an earlier one, then those of the deltas of
    later snapshots up to the record's own, each version all full or all delta. A record
    without chains (format 2) lists only its own, full chunks, which is a chain of one.
    Anything else would make a restore apply a delta to the wrong base.
    """
    versions: dict[tuple[str, int], dict[int, set[bool]]] = {}
    for chunk in record.chunks:
        key = chunk.key
        if key.snapshot_id > record.snapshot_id:
            return f"lists chunk '{key}' of a later snapshot"
        of_partition = versions.setdefault((key.operator, key.partition), {})
        of_partition.setdefault(key.snapshot_id, set()).add(chunk.delta)
    for (operator, partition), by_id in sorted(versions.items()):
        ids = sorted(by_id)
        where = f"operator '{operator}' partition {partition}"
        mixed = [i for i in ids if len(by_id[i]) > 1]
        if mixed:
            return f"lists full and delta chunks of snapshot {mixed[0]} for {where}"
        if by_id[ids[0]] == {True}:
            return f"lists a chain that starts with a delta (snapshot {ids[0]}) for {where}"
        fulls = [i for i in ids[1:] if by_id[i] == {False}]
        if fulls:
            return (
                f"lists full versions of snapshots {ids[0]} and {fulls[0]} in one chain for {where}"
            )
    return None


def verify_chunk(
    map_name: str, snapshot_id: int, chunk: ChunkDescriptor, data: bytes | bytearray | memoryview
) -> None:
    """Checks one chunk read for a restore or a copy against its validation record entry.

    Raises:
        SnapshotCorrupted: Naming the snapshot and the chunk, if the value's size or checksum
            is not what was written.
    """
    if len(data) != chunk.num_bytes or checksum(data) != chunk.checksum:
        raise SnapshotCorrupted(
            map_name,
            snapshot_id,
            f"chunk '{chunk.key}' does not match its checksum ({len(data)} bytes read, "
            f"{chunk.num_bytes} written; {CHECKSUM_ALGORITHM} {checksum(data)}, expected "
            f"{chunk.checksum})",
        )


def check_compatible(map_name: str, record: ValidationRecord, pipeline: PipelineShape) -> None:
    """Checks, before any state is loaded (restore step 4), that the pipeline can restore it.

    The format version was checked when the record was read. A different state partition count
    is not a mismatch: keyed state is re-partitioned on restore.

    Raises:
        SnapshotIncompatible: If the snapshot's operators or their state differ from the
            pipeline's, naming both sides.
    """
    differences = pipeline.differences(record.shape)
    if differences:
        raise SnapshotIncompatible(
            map_name,
            record.snapshot_id,
            "it was written by another pipeline: " + "; ".join(differences),
            "Restore it with the pipeline that wrote it (revert spec.pipeline), or apply the "
            "new pipeline with upgradeMode: stateless, which starts without the job's state",
        )


def chunks_of(record: ValidationRecord, operator: str) -> tuple[ChunkDescriptor, ...]:
    """Returns the chunks one participant wrote into the validated snapshot."""
    return tuple(chunk for chunk in record.chunks if chunk.key.operator == operator)


def check_descriptors(
    descriptors: Sequence[ChunkDescriptor],
    snapshot_id: int,
    operator: str,
    inheritable: Sequence[ChunkDescriptor] = (),
) -> None:
    """Checks that a participant reported only chunks of its own, in this snapshot.

    A chunk under another id or operator would make the validation record list data that a
    restore hands to the wrong participant, so it fails the snapshot instead. A chunk of an
    earlier snapshot is the participant's own only if it inherits it: it is one of
    ``inheritable`` (the participant's chunks in the restore point the snapshot builds on,
    :attr:`ChunkWriter.previous`), described exactly as there.

    Raises:
        ValueError: If a descriptor is foreign or repeated.
    """
    seen: set[ChunkKey] = set()
    inherited = {chunk.key: chunk for chunk in inheritable}
    for descriptor in descriptors:
        key = descriptor.key
        if key.operator != operator or not (
            key.snapshot_id == snapshot_id or inherited.get(key) == descriptor
        ):
            raise ValueError(f"participant '{operator}' reported foreign chunk '{key}'")
        if key in seen:
            raise ValueError(f"participant '{operator}' reported chunk '{key}' twice")
        seen.add(key)
