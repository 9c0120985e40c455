"""A source's part in the snapshot protocol: its offset is its whole state.

The driver writes the offset reached by the last epoch in phase 1 as one small JSON chunk,
and a restore puts it back, so the next epoch reads on from exactly there. Kept apart from
the sources so that writing a source needs nothing of the protocol.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence

from snapshot_protocol.chunks import ChunkDescriptor, ChunkWriter, SnapshotRef
from snapshot_protocol.ports import ChunkReader
from spark_runtime.sources.base import Offset, Source

_log = logging.getLogger(__name__)


class SourceParticipant:
    """A source in the snapshot protocol: its offset is its state.

    Args:
        name: The source's operator name.
        source: The source.
    """

    def __init__(self, name: str, source: Source) -> None:
        self._name = name
        self.source = source
        self.offset: Offset = source.initial_offset()
        self._saved: dict[int, Offset] = {}

    @property
    def name(self) -> str:
        """The operator name in chunk keys."""
        return self._name

    def save_and_prepare(
        self, snapshot_id: int, writer: ChunkWriter, export_only: bool
    ) -> Sequence[ChunkDescriptor]:
        """Saves the offset reached by the last epoch."""
        if not export_only:
            self._saved = {snapshot_id: self.offset}
        return [writer.write(0, 0, json.dumps({"offset": self.offset}).encode(), 1)]

    def commit_finish(self, snapshot_id: int, success: bool) -> None:
        """Tells the source the offset of a completed snapshot (:meth:`Source.committed`)."""
        saved = self._saved.pop(snapshot_id, None)
        if success and saved is not None:
            self.source.committed(saved)

    def restore(
        self, snapshot: SnapshotRef | None, reader: ChunkReader, through_snapshot_id: int
    ) -> None:
        """Resumes from the saved offset, or from the start."""
        if snapshot is None or not snapshot.chunk_keys:
            self.offset = self.source.initial_offset()
            return
        data = json.loads(snapshot.read(reader, snapshot.chunk_keys[0]))
        self.offset = data["offset"]
        _log.info("Restored source name=%s offset=%s", self._name, json.dumps(self.offset))
