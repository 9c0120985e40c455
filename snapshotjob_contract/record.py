"""The execution record: Jet's ``JobExecutionRecord``, kept in the SnapshotJob's status.

The record is the single source of truth about which snapshot the job restores from. Every
operation the protocol performs on it is a pure method here that returns a new record, so the
coordinator can hold the "in-memory" version and decide separately when and how (safe or
standard write) to store it; that split is what invariant I1 of ``docs/concepts/protocol.md`` ("the
record in memory is never older than the stored one, it can be newer") is about.

One deliberate difference from Jet: ``exported_snapshot_name`` names the export map holding the
snapshot ``snapshot_id`` points to (set only when that is a terminal exported snapshot, see
"Exported snapshots" in ``docs/concepts/protocol.md``), not the export currently being taken. The
name of an export in progress is never needed after a restart: restore ignores an exported snapshot
that is still marked in progress (docs/concepts/protocol.md, taking step 7b).

Map names are made here and only here because they carry configuration: Hazelcast sets a map's
backup count from the member config's wildcard pattern its name matches, and no client but
Java's can add a map config at run time (the Python client has no DynamicConfigAddMapConfig
codec). So a job's automatic maps are ``__sj.b<backupCount>.snapshot.<uid>.<index>``, which the
members' pattern ``__sj.b<backupCount>.*`` (:func:`member_map_backup_counts`) gives the job's
``spec.hazelcast.backupCount`` synchronous backups; the record remembers the count of the map
holding the restore point, so a job whose count changed still finds its snapshot. Exports are
looked up by namespace and name alone, by jobs that cannot know the writer's count, so they
get the most backups any job may ask for, ``MAX_BACKUP_COUNT``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from snapshotjob_contract.modes import SnapshotKind

NO_SNAPSHOT = -1
"""The id the record uses before the first snapshot, as in Jet."""

MAX_BACKUP_COUNT = 6
"""The most synchronous backups a map may have: Hazelcast's limit, and the field's bound."""

EXPORT_BACKUP_COUNT = MAX_BACKUP_COUNT
"""Synchronous backups of every export map, whichever job wrote it (see the module docstring);
on a store of up to seven members that is a copy on every member."""


@dataclass(frozen=True)
class JobIdentity:
    """What names a job's snapshot maps and tags its validation records.

    What a snapshot must have been written by to be restored is not the job but the pipeline's
    shape, checked at restore (``snapshot_protocol.chunks.PipelineShape``).

    Attributes:
        uid: The SnapshotJob's metadata.uid; a recreated job gets new maps.
        namespace: The SnapshotJob's namespace; exports are named per namespace.
        backup_count: ``spec.hazelcast.backupCount``: synchronous backups of the automatic
            snapshot maps this execution writes; their names carry it.
        incremental: Whether its automatic snapshots go to the chain map
            (:data:`CHAIN_MAP_INDEX`), where a snapshot may list chunks of the one before it;
            else they alternate between a pair of maps and every snapshot stands alone.
    """

    uid: str
    namespace: str
    backup_count: int
    incremental: bool = False

    def __post_init__(self) -> None:
        _check_backup_count(self.backup_count)


def _check_backup_count(backup_count: int) -> None:
    if not 1 <= backup_count <= MAX_BACKUP_COUNT:
        raise ValueError(f"backup count must be 1 to {MAX_BACKUP_COUNT}, not {backup_count}")


CHAIN_MAP_INDEX = 2
"""The index of a job's chain map: the one map an incremental job's snapshots all write to.

Incremental snapshots share chunks (a delta lists the chunks it inherits), so they cannot
alternate between two maps; discards keep what a live snapshot lists instead
(docs/concepts/protocol.md, "Where the chunks live and what may be discarded")."""


def snapshot_map_name(job_uid: str, index: int, backup_count: int | None) -> str:
    """Returns the name of one of the job's automatic snapshot maps.

    Args:
        job_uid: The job's uid.
        index: Which map: 0 or 1 of the alternating pair, or :data:`CHAIN_MAP_INDEX`.
        backup_count: The map's synchronous backups, which the members' config applies by its
            name (``__sj.b<count>.*``); None for the map of a snapshot taken before names
            carried the count, ``__sj.snapshot.<uid>.<index>``, whose backups are the members'
            default for ``__sj.*``.
    """
    if index not in (0, 1, CHAIN_MAP_INDEX):
        raise ValueError(f"snapshot data map index must be 0, 1 or {CHAIN_MAP_INDEX}, not {index}")
    if index == CHAIN_MAP_INDEX:
        if backup_count is None:
            raise ValueError("a chain map's name always carries its backup count")
        _check_backup_count(backup_count)
        return f"__sj.b{backup_count}.chain.{job_uid}"
    if backup_count is None:
        return f"__sj.snapshot.{job_uid}.{index}"
    _check_backup_count(backup_count)
    return f"__sj.b{backup_count}.snapshot.{job_uid}.{index}"


def all_snapshot_map_names(job_uid: str) -> tuple[str, ...]:
    """Returns every name the job's automatic snapshot maps may have had, to destroy them all.

    A job whose backup count changed left maps under its earlier counts' names.
    """
    counts: list[int | None] = [None, *range(1, MAX_BACKUP_COUNT + 1)]
    pairs = tuple(snapshot_map_name(job_uid, i, count) for count in counts for i in (0, 1))
    chains = tuple(
        snapshot_map_name(job_uid, CHAIN_MAP_INDEX, count)
        for count in range(1, MAX_BACKUP_COUNT + 1)
    )
    return pairs + chains


def export_map_name(namespace: str, export_name: str) -> str:
    """Returns the name of the map holding the exported snapshot ``export_name``.

    The name carries no backup count: exports are found by namespace and name, and all have
    ``EXPORT_BACKUP_COUNT`` backups.
    """
    return f"__sj.export.{namespace}.{export_name}"


def durable_copy_map_name(job_uid: str) -> str:
    """Returns the name, in durable storage, under which the job's periodic copies of its
    automatic snapshot are kept (only the newest is kept)."""
    return f"__sj.copy.{job_uid}"


def member_map_backup_counts() -> dict[str, int]:
    """Returns the map name patterns the store's members must configure, with their backups.

    Every member config (the chart's, the test bed's, an external cluster's) needs these
    patterns, each with that ``backup-count`` and no async backups; a map that matches none
    falls back to ``__sj.*`` or the default config and silently gets other backups. Hazelcast
    applies the longest matching pattern, so these win over a ``__sj.*`` catch-all.
    """
    patterns = {f"__sj.b{count}.*": count for count in range(1, MAX_BACKUP_COUNT + 1)}
    patterns["__sj.export.*"] = EXPORT_BACKUP_COUNT
    return patterns


SPLIT_BRAIN_PROTECTION = "sj-majority"
"""The name of the members' split-brain protection rule that every ``__sj.*`` map refers to:
with fewer members than its minimum cluster size (a majority of the store), a member refuses
reads and writes of the snapshot maps."""


def member_map_merge_policy(pattern: str) -> str:
    """Returns the merge policy the members give the maps of ``pattern`` after a split heals.

    Snapshot maps keep what the merged-into (larger) side has and take from the smaller side
    only keys it lacks (``PutIfAbsentMergePolicy``): a key is written once, under its snapshot
    id, so a key on both sides holds the same data; one only the smaller side has is either
    data the larger side lost with a partition (its replicas were all on the other side),
    brought back and verified by checksum before any restore reads it, or an entry the larger
    side discarded during the split, under an id the execution record no longer names: never
    read, and removed by that map's next discard. Export maps take nothing from the smaller
    side (``DiscardMergePolicy``): a job starting from an export restores the newest validation
    record in the map, so an export removed and written anew during the split must not get its
    old records back. They lose nothing by it, since every member holds a copy of them
    (``EXPORT_BACKUP_COUNT``).
    """
    if pattern == "__sj.export.*":
        return "DiscardMergePolicy"
    return "PutIfAbsentMergePolicy"


@dataclass(frozen=True)
class SnapshotStats:
    """Figures about the last snapshot attempt, successful or not (times in epoch milliseconds)."""

    snapshot_id: int
    start_time: int
    end_time: int
    num_bytes: int
    num_keys: int
    num_chunks: int

    def to_dict(self) -> dict[str, int]:
        """Returns the CRD status form (camelCase keys)."""
        return {
            "snapshotId": self.snapshot_id,
            "startTime": self.start_time,
            "endTime": self.end_time,
            "numBytes": self.num_bytes,
            "numKeys": self.num_keys,
            "numChunks": self.num_chunks,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SnapshotStats:
        """Reads the CRD status form."""
        return cls(
            snapshot_id=int(data["snapshotId"]),
            start_time=int(data["startTime"]),
            end_time=int(data["endTime"]),
            num_bytes=int(data["numBytes"]),
            num_keys=int(data["numKeys"]),
            num_chunks=int(data["numChunks"]),
        )


def quorum_of(member_count: int) -> int:
    """Returns the quorum of a store with ``member_count`` members: more than half of them.

    The one definition the operator (raising ``quorumSize`` at each start) and the driver
    (raising it as members join, and stopping below it) share, as Jet's
    ``JobExecutionRecord.setLargerQuorumSize`` is fed with ``clusterSize / 2 + 1``.
    """
    return member_count // 2 + 1


@dataclass(frozen=True)
class ExecutionRecord:
    """Jet's JobExecutionRecord (docs/concepts/protocol.md, "The execution record").

    Attributes:
        snapshot_id: The last successful non-export-only snapshot: the restore point.
        data_map_index: Which automatic snapshot map holds the last successful automatic
            (or unnamed terminal) snapshot: 0 or 1 of the alternating pair,
            :data:`CHAIN_MAP_INDEX` for the chain map; -1 before the first one.
        data_map_backup_count: The backup count that map was written with, which its name
            carries; None before the first such snapshot, and for a record last written
            before names carried the count (its map is then ``__sj.snapshot.<uid>.<index>``).
        ongoing_snapshot_id: The last snapshot id that was started and so may have written
            data; always incremented, never reused (taking step 1).
        ongoing_snapshot_start_time: When that snapshot started, epoch milliseconds.
        exported_snapshot_name: The export holding the restore point, if the restore point is
            a terminal exported snapshot; None if it is in the automatic maps.
        last_snapshot_failure: Why the last snapshot attempt failed; None if it succeeded.
        snapshot_stats: Figures about the last snapshot attempt.
        quorum_size: Split-brain protection: the fewest store members an execution may start
            with; raised only upward.
        suspended: Whether the job is suspended.
        suspension_cause: Why it is suspended.
        timestamp: When the record was last stamped for writing, epoch milliseconds.
    """

    snapshot_id: int = NO_SNAPSHOT
    data_map_index: int = -1
    data_map_backup_count: int | None = None
    ongoing_snapshot_id: int = NO_SNAPSHOT
    ongoing_snapshot_start_time: int | None = None
    exported_snapshot_name: str | None = None
    last_snapshot_failure: str | None = None
    snapshot_stats: SnapshotStats | None = None
    quorum_size: int = 0
    suspended: bool = False
    suspension_cause: str | None = None
    timestamp: int = 0

    def __post_init__(self) -> None:
        if self.data_map_index not in (-1, 0, 1, CHAIN_MAP_INDEX):
            raise ValueError(
                f"dataMapIndex must be -1, 0, 1 or {CHAIN_MAP_INDEX}, not {self.data_map_index}"
            )
        if self.data_map_backup_count is not None:
            _check_backup_count(self.data_map_backup_count)
        if not NO_SNAPSHOT <= self.snapshot_id <= self.ongoing_snapshot_id:
            raise ValueError(
                f"snapshotId {self.snapshot_id} must be between {NO_SNAPSHOT} and "
                f"ongoingSnapshotId {self.ongoing_snapshot_id}"
            )

    def ongoing_data_map_index(self, incremental: bool) -> int:
        """The automatic snapshot map the next automatic snapshot writes to.

        Without incremental snapshots it is always the other map of the pair than the one
        holding the last successful automatic snapshot, so taking a snapshot never clears the
        restore point (taking step 3). With them it is the chain map, whose discards keep the
        restore point's chunks by listing them (docs/concepts/protocol.md, "Where the chunks live
        and what may be discarded").

        Args:
            incremental: Whether the job takes incremental snapshots
                (:attr:`JobIdentity.incremental`).
        """
        if incremental:
            return CHAIN_MAP_INDEX
        return 0 if self.data_map_index in (-1, 1, CHAIN_MAP_INDEX) else 1

    def start_new_snapshot(self, now: int) -> ExecutionRecord:
        """Taking step 1: allocates a new snapshot id for a snapshot of any kind.

        Args:
            now: The current time, epoch milliseconds.
        """
        return dataclasses.replace(
            self, ongoing_snapshot_id=self.ongoing_snapshot_id + 1, ongoing_snapshot_start_time=now
        )

    def snapshot_done(
        self,
        kind: SnapshotKind,
        *,
        export_name: str | None,
        num_bytes: int,
        num_keys: int,
        num_chunks: int,
        failure: str | None,
        now: int,
        backup_count: int,
        incremental: bool = False,
    ) -> ExecutionRecord:
        """Taking step 6: records the decision on the ongoing snapshot (Jet's ongoingSnapshotDone).

        A successful snapshot that is not export-only becomes the restore point; an automatic
        or unnamed terminal one also switches the ongoing data map index, a terminal exported
        one points the record at its export map instead. Export-only and failed snapshots
        only update the statistics and the failure text.

        Args:
            kind: The kind of the ongoing snapshot.
            export_name: The export name for exported kinds, else None.
            num_bytes: Bytes the snapshot wrote.
            num_keys: State entries the snapshot wrote.
            num_chunks: Chunks the snapshot wrote.
            failure: Why the snapshot failed, or None if it was successful.
            now: The current time, epoch milliseconds.
            backup_count: The job's backup count, which named the ongoing map
                (:meth:`ongoing_snapshot_map_name`).
            incremental: Whether the job takes incremental snapshots, which chose the
                ongoing map (:meth:`ongoing_data_map_index`).
        """
        if kind.is_exported != (export_name is not None):
            raise ValueError(f"a {kind.value} snapshot needs an export name exactly if exported")
        stats = SnapshotStats(
            snapshot_id=self.ongoing_snapshot_id,
            start_time=self.ongoing_snapshot_start_time
            if self.ongoing_snapshot_start_time is not None
            else now,
            end_time=now,
            num_bytes=num_bytes,
            num_keys=num_keys,
            num_chunks=num_chunks,
        )
        done = dataclasses.replace(self, snapshot_stats=stats, last_snapshot_failure=failure)
        if failure is not None or kind.is_export_only:
            return done
        if kind is SnapshotKind.TERMINAL_EXPORTED:
            return dataclasses.replace(
                done, snapshot_id=self.ongoing_snapshot_id, exported_snapshot_name=export_name
            )
        return dataclasses.replace(
            done,
            snapshot_id=self.ongoing_snapshot_id,
            data_map_index=self.ongoing_data_map_index(incremental),
            data_map_backup_count=backup_count,
            exported_snapshot_name=None,
        )

    def ongoing_snapshot_map_name(self, job: JobIdentity, export_name: str | None) -> str:
        """Returns the map the ongoing snapshot writes to: its export map or the ongoing map."""
        if export_name is not None:
            return export_map_name(job.namespace, export_name)
        return snapshot_map_name(
            job.uid, self.ongoing_data_map_index(job.incremental), job.backup_count
        )

    def successful_snapshot_map_name(self, job: JobIdentity) -> str | None:
        """Returns the map holding the restore point, or None if there is no successful snapshot."""
        if self.snapshot_id == NO_SNAPSHOT:
            return None
        if self.exported_snapshot_name is not None:
            return export_map_name(job.namespace, self.exported_snapshot_name)
        return snapshot_map_name(job.uid, self.data_map_index, self.data_map_backup_count)

    def with_quorum_size(self, quorum_size: int) -> ExecutionRecord:
        """Returns the record with the quorum raised to ``quorum_size``; it is never lowered."""
        return dataclasses.replace(self, quorum_size=max(self.quorum_size, quorum_size))

    def suspended_because(self, cause: str) -> ExecutionRecord:
        """Returns the record of a suspended job."""
        return dataclasses.replace(self, suspended=True, suspension_cause=cause)

    def resumed(self) -> ExecutionRecord:
        """Returns the record of a job that runs again."""
        return dataclasses.replace(self, suspended=False, suspension_cause=None)

    def stamped(self, now: int) -> ExecutionRecord:
        """Returns the record with its timestamp set, as Jet does before every write."""
        return dataclasses.replace(self, timestamp=now)

    def to_dict(self) -> dict[str, Any]:
        """Returns ``status.executionRecord`` of the CRD; absent values are null.

        Nulls are explicit so that a merge patch of the status clears them.
        """
        return {
            "snapshotId": self.snapshot_id,
            "dataMapIndex": self.data_map_index,
            "dataMapBackupCount": self.data_map_backup_count,
            "ongoingSnapshotId": self.ongoing_snapshot_id,
            "ongoingSnapshotStartTime": self.ongoing_snapshot_start_time,
            "exportedSnapshotName": self.exported_snapshot_name,
            "lastSnapshotFailure": self.last_snapshot_failure,
            "snapshotStats": None if self.snapshot_stats is None else self.snapshot_stats.to_dict(),
            "quorumSize": self.quorum_size,
            "suspended": self.suspended,
            "suspensionCause": self.suspension_cause,
            "timestamp": self.timestamp,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | None) -> ExecutionRecord:
        """Reads ``status.executionRecord``; missing keys take the defaults of a new job."""
        if not data:
            return cls()
        stats = data.get("snapshotStats")
        start_time = data.get("ongoingSnapshotStartTime")
        backups = data.get("dataMapBackupCount")
        return cls(
            snapshot_id=int(data.get("snapshotId", NO_SNAPSHOT)),
            data_map_index=int(data.get("dataMapIndex", -1)),
            data_map_backup_count=None if backups is None else int(backups),
            ongoing_snapshot_id=int(data.get("ongoingSnapshotId", NO_SNAPSHOT)),
            ongoing_snapshot_start_time=None if start_time is None else int(start_time),
            exported_snapshot_name=data.get("exportedSnapshotName"),
            last_snapshot_failure=data.get("lastSnapshotFailure"),
            snapshot_stats=None if stats is None else SnapshotStats.from_dict(stats),
            quorum_size=int(data.get("quorumSize", 0)),
            suspended=bool(data.get("suspended", False)),
            suspension_cause=data.get("suspensionCause"),
            timestamp=int(data.get("timestamp", 0)),
        )
