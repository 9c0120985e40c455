"""What an export name resolves to: exactly the export last completed under it.

An export map (``__sj.export.<namespace>.<name>``) is named by the export, not by the job, so
the data of an older export can outlive it: its SnapshotJobExport deleted without disposal, or
its job deleted and created again, whose snapshot ids start over at 1. The new export's ids may
then be *lower* than the old one's, and "the highest snapshot id under the name" would pick the
old export's state: the wrong state, restored without a word.

Two rules close that, in the store and in durable storage alike:

1. **Older data under the name is disposed of.** Taking an export discards, besides the
   lower ids of its own job (taking step 3), every snapshot under the name written by another
   job (its validation record names the job's uid). Snapshots of the same job with higher ids
   stay: they can only be a newer execution's (mechanism M8). A durable copy of an export
   does the same once it validated.
2. **The export's identity is checked at restore.** The operator hands the driver the
   identity its SnapshotJobExport recorded when it completed (the job's uid and the snapshot
   id); the restore takes exactly that snapshot and refuses any other, naming what it found.
   Without an identity (a name with no SnapshotJobExport: local mode, an export copied in by
   hand), the highest id is taken, which rule 1 makes the last export completed.

Pure decisions over the :class:`~snapshot_protocol.ports.SnapshotStore` port; no I/O library.
"""

from __future__ import annotations

import logging

from snapshot_protocol.chunks import ValidationRecord
from snapshot_protocol.ports import SnapshotStore
from snapshot_protocol.states import ExportIdentity

_log = logging.getLogger(__name__)

__all__ = ["ExportIdentity", "discard_other_jobs_exports", "find_export", "others_under"]


def _writer(store: SnapshotStore, map_name: str, snapshot_id: int) -> str | None:
    """The uid of the job that wrote a snapshot, or None if its record cannot be read."""
    try:
        record = store.get_validation_record(map_name, snapshot_id)
    except ValueError:  # UnreadableFormat is one too
        return None
    return None if record is None else record.job_uid


def discard_other_jobs_exports(store: SnapshotStore, map_name: str, job_uid: str) -> list[int]:
    """Rule 1: removes every snapshot in an export map that another job wrote.

    A record this code cannot read counts as another job's: an export name holds one export.

    Returns:
        The ids of the snapshots removed.

    Raises:
        SnapshotStoreError: If the map could not be read or the removal failed.
    """
    foreign = [
        snapshot_id
        for snapshot_id in store.snapshot_ids(map_name)
        if _writer(store, map_name, snapshot_id) != job_uid
    ]
    if foreign:
        store.discard_snapshots(map_name, foreign)
        _log.info(
            "Discarded other jobs' snapshots under the export name map=%s snapshotIds=%s",
            map_name,
            ",".join(str(snapshot_id) for snapshot_id in foreign),
        )
    return foreign


def find_export(
    store: SnapshotStore, map_name: str, identity: ExportIdentity | None
) -> ValidationRecord | None:
    """Rule 2: the validation record the name resolves to in one store, or None if absent.

    With an identity, only that snapshot, written by that job (a record of another job under
    the same id is not it, and is logged); without, the highest id.

    Raises:
        UnreadableFormat: If the chosen record is in a format this code does not read.
        SnapshotStoreError: If the store could not be read.
    """
    if identity is None:
        latest = store.latest_snapshot_id(map_name)
        return None if latest is None else store.get_validation_record(map_name, latest)
    record = store.get_validation_record(map_name, identity.snapshot_id)
    if record is not None and record.job_uid != identity.job_uid:
        _log.warning(
            "Export name holds another job's snapshot under the export's id map=%s "
            "expected=%s foundJobUid=%s",
            map_name,
            identity,
            record.job_uid,
        )
        return None
    return record


def others_under(store: SnapshotStore, map_name: str) -> str:
    """What the map holds, for the message that says the identity's snapshot is not there."""
    found = []
    for snapshot_id in store.snapshot_ids(map_name):
        writer = _writer(store, map_name, snapshot_id)
        found.append(f"snapshot {snapshot_id} of job uid {writer or 'unknown'}")
    return ", ".join(found)
