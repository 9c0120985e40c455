"""Durable copies of exports in object storage, made by the driver.

Why the driver makes them: it already holds the store client, it knows the moment an export
has validated, and it reports the export to the operator; copying before that report means
``status.exportedSnapshots`` lists an export together with its durable copy, or without one
and a log line that says why. The operator never reads snapshot data.

Why a copy failure does not fail the export: the export in Hazelcast is complete and valid
whatever happened to its copy, so it is listed without ``durableLocation`` and the job runs
on. A copy is tried a bounded number of times; a corrupted source is not retried.

The storage is configured through the environment the operator sets
(:mod:`snapshotjob_contract.environment`): the operator alone decides whether the job's
``spec.durableStorage`` or the installation's default applies.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from snapshot_protocol import (
    SnapshotStore,
    SnapshotStoreError,
    SnapshotUnusable,
    ValidationRecord,
)
from snapshot_protocol.export_names import discard_other_jobs_exports
from snapshot_protocol.transfer import transfer_snapshot
from snapshotjob_contract.environment import (
    ENV_DURABLE_ACCESS_KEY_ID,
    ENV_DURABLE_BUCKET,
    ENV_DURABLE_ENDPOINT,
    ENV_DURABLE_PREFIX,
    ENV_DURABLE_REGION,
    ENV_DURABLE_SECRET_ACCESS_KEY,
    ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS,
)

# The driver's own messages have always come from this logger, whichever module logs them.
_log = logging.getLogger("spark_runtime")

COPY_ATTEMPTS = 3
"""Tries of one copy; each already retries its requests (the client's standard mode)."""


@dataclass(frozen=True)
class DurableStorage:
    """Where durable copies go.

    Attributes:
        bucket: The bucket.
        prefix: The key prefix under it ("" for its root).
        endpoint: The S3 API's URL; None for AWS S3 itself.
        region: The region requests are signed for.
        snapshot_copy_interval_s: Copy the automatic snapshot at most this often; None for
            no periodic copies.
    """

    bucket: str
    prefix: str = ""
    endpoint: str | None = None
    region: str = "us-east-1"
    snapshot_copy_interval_s: float | None = None

    @classmethod
    def from_environment(cls, environ: Mapping[str, str]) -> DurableStorage | None:
        """The storage the operator configured, or None when the job has none."""
        bucket = environ.get(ENV_DURABLE_BUCKET)
        if not bucket:
            return None
        interval = environ.get(ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS)
        return cls(
            bucket=bucket,
            prefix=environ.get(ENV_DURABLE_PREFIX, "").strip("/"),
            endpoint=environ.get(ENV_DURABLE_ENDPOINT) or None,
            region=environ.get(ENV_DURABLE_REGION) or "us-east-1",
            snapshot_copy_interval_s=float(interval) if interval else None,
        )

    def location(self, map_name: str, snapshot_id: int) -> str:
        """The copy's address as ``status.exportedSnapshots[].durableLocation`` shows it."""
        parts = [self.bucket, self.prefix, map_name, str(snapshot_id)]
        return "s3://" + "/".join(part for part in parts if part)


class DurableCopies:
    """Copies validated exports from the store to object storage, and back for a restore.

    Args:
        storage: Where copies go.
        store: The store in object storage (:class:`~snapshot_store.s3.S3SnapshotStore`).
        sleep: Waits between tries (replaced in tests).
    """

    def __init__(
        self,
        storage: DurableStorage,
        store: SnapshotStore,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.storage = storage
        self.store = store
        self._sleep = sleep
        self._last_snapshot_copy: float | None = None

    def reset_schedule(self) -> None:
        """Makes the next automatic snapshot's copy due at once, as at an execution's start."""
        self._last_snapshot_copy = None

    def copy_snapshot_if_due(
        self,
        source: SnapshotStore,
        map_name: str,
        snapshot_id: int,
        copy_map: str,
        now: Callable[[], float] = time.monotonic,
    ) -> bool:
        """Copies a committed automatic snapshot to ``copy_map`` if a periodic copy is due.

        The first snapshot of an execution is always copied, then one at most every
        ``snapshot_copy_interval_s``. A failed copy is tried once only: the next snapshot is
        the next try, and the older copy stays the newest one meanwhile.

        Returns:
            Whether a copy was made.
        """
        interval = self.storage.snapshot_copy_interval_s
        if interval is None:
            return False
        started = now()
        if self._last_snapshot_copy is not None and started - self._last_snapshot_copy < interval:
            return False
        if not self.copy_snapshot(source, map_name, snapshot_id, copy_map, attempts=1):
            return False
        self._last_snapshot_copy = started
        return True

    def copy_snapshot(
        self,
        source: SnapshotStore,
        map_name: str,
        snapshot_id: int,
        copy_map: str,
        attempts: int = COPY_ATTEMPTS,
    ) -> bool:
        """Copies a committed snapshot to ``copy_map`` now, if periodic copies are on.

        For the terminal snapshot of a suspension: a suspended job then survives the loss of
        the store with nothing to repeat.

        Returns:
            Whether a copy was made.
        """
        if self.storage.snapshot_copy_interval_s is None:
            return False
        copied = self._copy("snapshot", source, map_name, snapshot_id, copy_map, attempts)
        return copied is not None

    def copy_export(
        self, source: SnapshotStore, name: str, map_name: str, snapshot_id: int
    ) -> str | None:
        """Copies export ``name`` (snapshot ``snapshot_id`` of ``map_name``), verified.

        Once the copy validated, older copies of the same export, and copies other jobs made
        under the name, are deleted: an export name holds one snapshot, in object storage as
        in Hazelcast.

        Returns:
            The copy's location, or None if it could not be made (logged with the reason).
        """
        return self._copy(name, source, map_name, snapshot_id, map_name, COPY_ATTEMPTS, export=True)

    def _copy(
        self,
        name: str,
        source: SnapshotStore,
        map_name: str,
        snapshot_id: int,
        target_map: str,
        attempts: int,
        *,
        export: bool = False,
    ) -> str | None:
        location = self.storage.location(target_map, snapshot_id)
        started = time.monotonic()
        for attempt in range(1, attempts + 1):
            try:
                record = transfer_snapshot(source, map_name, self.store, target_map, snapshot_id)
            except SnapshotUnusable as unusable:
                _log.error(
                    "Durable copy refused name=%s snapshotId=%d reason=%s problem=%s",
                    name,
                    snapshot_id,
                    type(unusable).__name__,
                    unusable,
                )
                return None
            except SnapshotStoreError as error:
                if attempt == attempts:
                    _log.error(
                        "Durable copy failed name=%s snapshotId=%d location=%s attempts=%d "
                        "error=%s",
                        name,
                        snapshot_id,
                        location,
                        attempt,
                        error,
                    )
                    return None
                _log.warning(
                    "Durable copy attempt failed name=%s snapshotId=%d attempt=%d error=%s",
                    name,
                    snapshot_id,
                    attempt,
                    error,
                )
                self._sleep(2.0 * attempt)
                continue
            _log.info(
                "Durable copy done name=%s snapshotId=%d location=%s numBytes=%d chunks=%d "
                "seconds=%.2f",
                name,
                snapshot_id,
                location,
                record.num_bytes,
                len(record.chunks),
                time.monotonic() - started,
            )
            self._discard_older(target_map, record, export=export)
            return location
        return None  # pragma: no cover - the loop returns on its last attempt

    def _discard_older(self, map_name: str, copied: ValidationRecord, *, export: bool) -> None:
        try:
            if copied.snapshot_id > 0:
                # The copy's chains may list chunks of older copies: those stay.
                self.store.discard(map_name, copied.snapshot_id - 1, [copied])
            if export:
                # Nor another job's under an export's name, whatever its ids (a reused name,
                # snapshot_protocol.export_names rule 1); the restore checks the identity.
                discard_other_jobs_exports(self.store, map_name, copied.job_uid)
        except SnapshotStoreError as error:
            # Older copies are never read while a newer one has its record: only space is lost.
            _log.warning("Could not delete older durable copies map=%s error=%s", map_name, error)


@contextmanager
def open_durable_copies(
    storage: DurableStorage | None, environ: Mapping[str, str]
) -> Iterator[DurableCopies | None]:
    """Connects to the durable storage, if the job has one, for the execution's length."""
    if storage is None:
        yield None
        return
    from snapshot_store.s3 import S3SnapshotStore, connect_s3

    client = connect_s3(
        storage.endpoint,
        storage.region,
        access_key=environ.get(ENV_DURABLE_ACCESS_KEY_ID) or None,
        secret_key=environ.get(ENV_DURABLE_SECRET_ACCESS_KEY) or None,
    )
    _log.info(
        "Durable storage bucket=%s prefix=%s endpoint=%s",
        storage.bucket,
        storage.prefix or "-",
        storage.endpoint or "aws",
    )
    try:
        yield DurableCopies(storage, S3SnapshotStore(client, storage.bucket, storage.prefix))
    finally:
        client.close()
