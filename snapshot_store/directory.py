"""The snapshot store in a local directory: the embedded default for a laptop and for tests.

Why: a pipeline author should run and test a pipeline with no Hazelcast cluster and no
Kubernetes, and still get what a restore relies on: the same protocol, the same chunk keys,
checksums and validation records, so a snapshot taken here is validated exactly as one taken in
the cluster (:func:`~snapshot_protocol.chunks.validate_snapshot`,
:func:`~snapshot_protocol.chunks.verify_chunk`).

Layout, one file per key of the snapshot map, as the S3 store lays out its objects::

    <root>/<map name>/<snapshotId>/<operator>/<partition>/<seq>   a chunk
    <root>/<map name>/<snapshotId>/validation-record              its validation record (JSON)

Why no indeterminate writes here, unlike Hazelcast: a file is written under a temporary name,
flushed to disk and renamed into place, so a key is either absent or whole, and a write that
returned survives a crash of the process (and, with the directory's fsync, of the machine). A
write that failed raised; a stray file of a failed snapshot is never read as one, because the
validation record, written last, lists only what was written. Reads of the executors' Python
workers (``local[*]``) go to the same files, so the chunk paths of the cluster work unchanged.
There is one store per directory, but any number of processes may use it at once: writers never
share a key (the protocol's keys carry the snapshot id), and a rename is atomic.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from snapshot_protocol.chunks import (
    ChunkKey,
    ValidationRecord,
    discarded_keys,
    keys_of_snapshots,
    parse_validation_record,
    validation_record_id,
    validation_record_key,
)
from snapshot_protocol.errors import SnapshotStoreError

_TEMPORARY_PREFIX = ".tmp-"
"""Files being written; never listed as keys, and removed by :meth:`discard` once stale."""


class DirectorySnapshotStore:
    """The :class:`~snapshot_protocol.ports.SnapshotStore` port on a local directory.

    Also a :class:`~snapshot_protocol.ports.StoreMembership` of one member that is always
    reached: a local disk has no partitions to protect against.

    Args:
        root: The store's directory; created if missing.
        durable: Flush every file and its directory to disk before a write returns. Off only
            for tests that crash processes, never machines.
    """

    def __init__(self, root: Path | str, *, durable: bool = True) -> None:
        self.root = Path(root)
        self._durable = durable
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise SnapshotStoreError(
                f"Cannot create the store directory {self.root}: {error}"
            ) from error

    @property
    def running(self) -> bool:
        """Always True: there is no client that could have shut down."""
        return True

    def reachable_members(self) -> int:
        """One: the directory is this machine's."""
        return 1

    def _map_dir(self, map_name: str) -> Path:
        if not map_name or "/" in map_name or map_name in (".", ".."):
            raise ValueError(f"A map name is one path segment without '/': {map_name!r}")
        return self.root / map_name

    def _path(self, map_name: str, key: str) -> Path:
        parts = key.split("/")
        if any(part in ("", ".", "..") or part.startswith(".") for part in parts):
            raise ValueError(f"Not a key of a snapshot map: {key!r}")
        return self._map_dir(map_name).joinpath(*parts)

    # --- writes -------------------------------------------------------------------------------

    def put_chunk(self, map_name: str, key: ChunkKey, data: bytes | bytearray) -> None:
        """Stores one chunk in its own file."""
        self.put_chunks(map_name, [(key, data)])

    def put_chunks(
        self, map_name: str, chunks: Iterable[tuple[ChunkKey, bytes | bytearray]]
    ) -> None:
        """Stores chunks, each in its own file, every one on disk when this returns.

        Raises:
            SnapshotStoreError: If a file could not be written (naming its key).
        """
        directories: set[Path] = set()
        for key, data in chunks:
            directories.add(self._write(map_name, str(key), data).parent)
        self._sync_directories(map_name, directories)

    def put_validation_record(self, map_name: str, record: ValidationRecord) -> None:
        """Stores the snapshot's validation record, after its chunks."""
        payload = json.dumps(record.to_dict(), separators=(",", ":")).encode()
        path = self._write(map_name, validation_record_key(record.snapshot_id), payload)
        self._sync_directories(map_name, {path.parent})

    def discard(
        self, map_name: str, through_snapshot_id: int, keep: Sequence[ValidationRecord] = ()
    ) -> None:
        """Deletes the files of snapshots ``<= through_snapshot_id`` but those of ``keep``
        (:func:`~snapshot_protocol.chunks.discarded_keys`), then their empty directories.

        Raises:
            SnapshotStoreError: If the listing or a deletion failed.
        """
        self._delete(map_name, discarded_keys(self._keys(map_name), through_snapshot_id, keep))

    def discard_snapshots(self, map_name: str, snapshot_ids: Sequence[int]) -> None:
        """Deletes every file of the named snapshots (export maps).

        Raises:
            SnapshotStoreError: If the listing or a deletion failed.
        """
        self._delete(map_name, keys_of_snapshots(self._keys(map_name), snapshot_ids))

    def clear(self, map_name: str) -> None:
        """Removes every entry of a map, as the Hazelcast store's ``clear``."""
        self.destroy(map_name)

    def destroy(self, map_name: str) -> None:
        """Removes a map with its data."""
        try:
            shutil.rmtree(self._map_dir(map_name))
        except FileNotFoundError:
            return
        except OSError as error:
            raise SnapshotStoreError(f"Failed to destroy map {map_name}: {error}") from error

    def map_names(self) -> list[str]:
        """Every map in the store, sorted."""
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir())
        except OSError as error:
            raise SnapshotStoreError(f"Failed to list {self.root}: {error}") from error

    # --- reads --------------------------------------------------------------------------------

    def get_validation_record(self, map_name: str, snapshot_id: int) -> ValidationRecord | None:
        """Snapshot ``snapshot_id``'s validation record, or None if the map has none for it.

        Raises:
            UnreadableFormat: If the record is of another format.
            ValueError: If the record is malformed.
            SnapshotStoreError: If it could not be read.
        """
        payload = self._read(map_name, validation_record_key(snapshot_id), absent_ok=True)
        return None if payload is None else parse_validation_record(payload)

    def latest_snapshot_id(self, map_name: str) -> int | None:
        """The highest snapshot id with a validation record in the map, or None."""
        return max(self.snapshot_ids(map_name), default=None)

    def snapshot_ids(self, map_name: str) -> list[int]:
        """Every snapshot id with a validation record in the map, ascending."""
        found = {validation_record_id(key) for key in self._keys(map_name)}
        return sorted(snapshot_id for snapshot_id in found if snapshot_id is not None)

    def missing_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[ChunkKey]:
        """Those of ``keys`` that have no file."""
        return [key for key in keys if not self._path(map_name, str(key)).is_file()]

    def read_chunk(self, map_name: str, key: ChunkKey) -> bytes:
        """One chunk's value, unverified."""
        payload = self._read(map_name, str(key))
        assert payload is not None
        return payload

    def read_chunks(self, map_name: str, keys: Sequence[ChunkKey]) -> list[bytes]:
        """Chunk values in the order of ``keys``.

        Raises:
            SnapshotStoreError: If a chunk is absent or could not be read.
        """
        return [self.read_chunk(map_name, key) for key in keys]

    # --- plumbing -----------------------------------------------------------------------------

    def _write(self, map_name: str, key: str, data: bytes | bytearray) -> Path:
        path = self._path(map_name, key)
        temporary = path.with_name(f"{_TEMPORARY_PREFIX}{path.name}.{uuid.uuid4().hex}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as file:
                file.write(data)
                if self._durable:
                    file.flush()
                    os.fsync(file.fileno())
            os.replace(temporary, path)
        except OSError as error:
            with contextlib.suppress(OSError):
                temporary.unlink(missing_ok=True)
            raise SnapshotStoreError(f"Failed to put '{key}' in map {map_name}: {error}") from error
        return path

    def _sync_directories(self, map_name: str, directories: Iterable[Path]) -> None:
        """Flushes the renames in ``directories`` (and the map's own directory) to disk."""
        if not self._durable:
            return
        for directory in sorted({*directories, self._map_dir(map_name)}):
            try:
                descriptor = os.open(directory, os.O_RDONLY)
            except OSError as error:
                raise SnapshotStoreError(f"Failed to sync map {map_name}: {error}") from error
            try:
                os.fsync(descriptor)
            except OSError as error:
                # Some file systems cannot sync a directory; the rename is still atomic.
                if error.errno not in (errno.EINVAL, errno.EBADF):
                    raise SnapshotStoreError(f"Failed to sync map {map_name}: {error}") from error
            finally:
                os.close(descriptor)

    def _read(self, map_name: str, key: str, *, absent_ok: bool = False) -> bytes | None:
        try:
            return self._path(map_name, key).read_bytes()
        except FileNotFoundError:
            if absent_ok:
                return None
            raise SnapshotStoreError(f"Chunk '{key}' is missing from map {map_name}") from None
        except OSError as error:
            raise SnapshotStoreError(f"Failed to get '{key}' in map {map_name}: {error}") from error

    def _keys(self, map_name: str) -> Iterator[str]:
        top = self._map_dir(map_name)
        try:
            for directory, subdirectories, files in os.walk(top, onerror=_raise):
                subdirectories[:] = [d for d in subdirectories if not d.startswith(".")]
                relative = Path(directory).relative_to(top)
                for name in files:
                    if not name.startswith("."):
                        yield (relative / name).as_posix()
        except FileNotFoundError:
            return
        except OSError as error:
            raise SnapshotStoreError(f"Failed to list map {map_name}: {error}") from error

    def _delete(self, map_name: str, doomed: Sequence[str]) -> None:
        emptied: set[Path] = set()
        for key in doomed:
            path = self._path(map_name, key)
            try:
                path.unlink(missing_ok=True)
            except OSError as error:
                raise SnapshotStoreError(
                    f"Failed to delete '{key}' in map {map_name}: {error}"
                ) from error
            emptied.update(path.parents)
        top = self._map_dir(map_name)
        # Deepest first, so a snapshot's operator directories go before the snapshot's own.
        for directory in sorted(emptied, key=lambda p: len(p.parts), reverse=True):
            if top in directory.parents:
                with _ignored_if_not_empty():
                    directory.rmdir()


def _raise(error: OSError) -> None:
    raise error


class _ignored_if_not_empty:  # noqa: N801 - used as a context manager, like contextlib's
    """Ignores the errors of removing a directory that another writer has just filled."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, kind: object, error: object, trace: object) -> bool:
        return isinstance(error, OSError) and error.errno in (
            errno.ENOTEMPTY,
            errno.EEXIST,
            errno.ENOENT,
        )
