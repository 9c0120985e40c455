"""Files as a two-phase-commit sink: Spark writes into a staging directory, commit renames it.

A directory rename is atomic on one filesystem, so it serves as the commit. This module needs
no database or cluster client, so a pipeline writing files imports neither psycopg nor the
Hazelcast client (an import-linter contract in ``pyproject.toml`` keeps it so).
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame
from pyspark.sql.types import StructType

from spark_runtime.sinks.base import EPOCH_COLUMN, TransactionalSink


class FileSink(TransactionalSink):
    """Files in a directory: Spark writes into a staging directory, commit renames it.

    Every published directory is ``<directory>/<sink>-<job uid>-<snapshot id>`` holding
    Spark's ``part-*`` files; the transaction id is the staging directory's name. A directory
    rename is atomic on one filesystem, so readers see a snapshot's files all or not at all.

    Args:
        directory: The output directory (local or shared filesystem; executors write to it).
        fmt: A Spark writer format: json, csv, parquet, text.
        options: Spark writer options.
    """

    def __init__(
        self, directory: str | os.PathLike[str], fmt: str = "json", **options: str
    ) -> None:
        self.directory = Path(directory)
        self.fmt = fmt
        self.options = options
        self._name = "files"
        self._job_uid = ""

    @property
    def staging(self) -> Path:
        """Where prepared (not yet published) output waits."""
        return self.directory / "_staging"

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Creates the directories."""
        self._name = name
        self._job_uid = job_uid
        self.staging.mkdir(parents=True, exist_ok=True)

    def _save(self, frame: DataFrame, path: Path) -> None:
        if EPOCH_COLUMN in frame.columns:
            frame = frame.drop(EPOCH_COLUMN)
        frame.write.mode("overwrite").format(self.fmt).options(**self.options).save(str(path))

    def write(self, frame: DataFrame) -> None:
        """Publishes at once under a fresh name (a replay writes the rows again)."""
        staged = self.staging / f"{self._name}-epoch-{uuid.uuid4().hex}"
        self._save(frame, staged)
        os.replace(staged, self.directory / staged.name)

    def _transaction_prefix(self) -> str:
        # The job's uid keeps two jobs writing one directory apart: a job started from another
        # one's export numbers its snapshots from there again, under the same sink name.
        return f"{self._name}-{self._job_uid}-" if self._job_uid else f"{self._name}-"

    def prepare(self, frame: DataFrame, snapshot_id: int) -> list[str]:
        """Writes into ``_staging/<sink>-<job uid>-<snapshot>``."""
        transaction_id = f"{self._transaction_prefix()}{snapshot_id}"
        self._save(frame, self.staging / transaction_id)
        return [transaction_id]

    def commit(self, transaction_ids: Sequence[str]) -> None:
        """Renames each staging directory into the output directory."""
        for transaction_id in transaction_ids:
            staged = self.staging / transaction_id
            if staged.is_dir():
                os.replace(staged, self.directory / transaction_id)

    def rollback(self, transaction_ids: Sequence[str]) -> None:
        """Deletes the staging directories."""
        for transaction_id in transaction_ids:
            shutil.rmtree(self.staging / transaction_id, ignore_errors=True)

    def abort(self, snapshot_id: int) -> None:
        """Deletes the snapshot's staging directory."""
        self.rollback([f"{self._transaction_prefix()}{snapshot_id}"])

    def _staged(self, below: int) -> list[str]:
        """This job's and sink's staging directories of snapshots with ids below ``below``."""
        if not self.staging.is_dir():
            return []
        prefix = self._transaction_prefix()
        return sorted(
            p.name
            for p in self.staging.iterdir()
            if p.name.startswith(prefix)
            and p.name[len(prefix) :].isdigit()
            and int(p.name[len(prefix) :]) < below
        )

    def roll_back_older(self, snapshot_id: int) -> list[str]:
        """Deletes staging directories of snapshots with ids below ``snapshot_id``."""
        older = self._staged(snapshot_id)
        self.rollback(older)
        return older

    def recover(
        self, committed: Sequence[str], through_snapshot_id: int
    ) -> tuple[list[str], list[str]]:
        """Publishes the restored snapshot's staging directories, deletes the other ones of
        snapshots up to ``through_snapshot_id``."""
        done = [t for t in committed if (self.staging / t).is_dir()]
        self.commit(done)
        others = [t for t in self._staged(through_snapshot_id + 1) if t not in done]
        self.rollback(others)
        return done, others
