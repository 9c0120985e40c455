"""A Delta Lake table as an exactly-once sink: one idempotent Delta commit per snapshot.

Why Delta Lake and not Apache Iceberg: Delta publishes a release built for this runtime's
Spark (delta-spark 4.4.0 for Spark 4.2, fetched by ``make install`` and shipped in the
spark-runtime image), and Iceberg has no runtime jar for Spark 4.2 yet.

How it is exactly once: the sink is a :class:`~spark_runtime.sinks.ForeachBatchSink`, so the
output of each snapshot is staged in the snapshot and written in its second phase, and a
restore writes the restore point's output again "just in case" (the same rows, the same
snapshot id). Every write is a Delta commit with the *idempotent write* options: ``txnAppId``,
the job's uid and the sink's name, and ``txnVersion``, the snapshot's id. Delta records the
highest version committed per application id in the table's log, in the same atomic commit as
the rows, and skips a write whose version is not above it. So a second write of a snapshot's
output (the restore's), or a late one of an older snapshot (a replaced driver's), adds
nothing. A job started from another job's export writes that export's output under the other
job's application id (:meth:`ForeachBatchSink.call` hands over its uid), so it is skipped
where that job wrote it; the new job's own snapshots, numbered from 0 again, go under its own.
The table stays a plain Delta table: any Spark with Delta reads it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql.types import StructType

from spark_runtime.sinks.base import EPOCH_COLUMN
from spark_runtime.sinks.foreach_batch import ForeachBatchSink

DELTA_EXTENSION = "io.delta.sql.DeltaSparkSessionExtension"
"""The session extension without which Delta Lake refuses to write."""


def app_id(job_uid: str, sink: str) -> str:
    """The ``txnAppId`` of a job's sink: one per job and sink, as Delta's idempotent writes
    need (versions only grow within one application id)."""
    return f"snapshotjob-{job_uid}-{sink}"


class DeltaSink(ForeachBatchSink):
    """Appends each snapshot's output to a Delta Lake table, exactly once (see the module).

    Args:
        path: The table's location: a local or shared path, or ``s3a://bucket/prefix`` (the
            driver and executors need its credentials: ``--conf spark.hadoop.fs.s3a.*``, or
            the default AWS credential chain).
        partition_by: Columns to partition the table by (only when the table is created).
        options: More Delta writer options (``mergeSchema``, ``userMetadata``, ...);
            ``txnAppId`` and ``txnVersion`` are the sink's own.
        key: For an update stream (``groupBy(...).agg(...)``): each batch appends each key's
            latest row only (:class:`~spark_runtime.sinks.ForeachBatchSink`).
        partitions: Sink partitions the output is staged and read back in.

    Raises:
        ValueError: If ``options`` sets ``txnAppId`` or ``txnVersion``.
    """

    def __init__(
        self,
        path: str,
        *,
        partition_by: Sequence[str] = (),
        options: Mapping[str, str] | None = None,
        key: Sequence[str] = (),
        partitions: int = 4,
    ) -> None:
        super().__init__(self._write_batch, key=key, partitions=partitions)
        reserved = {"txnappid", "txnversion"} & {name.lower() for name in options or {}}
        if reserved:
            raise ValueError(
                f"DeltaSink sets {', '.join(sorted(reserved))} itself (the job's uid and the "
                "snapshot's id make its writes idempotent): leave them out of options"
            )
        self.path = path
        self.partition_by = tuple(partition_by)
        self.options = dict(options or {})
        self._sink_name = "delta"

    def open(self, schema: StructType, job_uid: str, name: str) -> None:
        """Checks that the session has Delta Lake, and the partition columns.

        Raises:
            ValueError: If Delta Lake is not in the driver's session, or a ``partition_by``
                column is not in the output.
        """
        super().open(schema, job_uid, name)
        self._sink_name = name
        spark = SparkSession.getActiveSession()
        extensions = spark.conf.get("spark.sql.extensions", "") if spark is not None else ""
        if DELTA_EXTENSION not in (extensions or ""):
            raise ValueError(
                f"DeltaSink {name}: Delta Lake is not in the driver's Spark session. The "
                "spark-runtime image and 'make install' provide its jars; elsewhere add "
                "--conf spark.jars.packages=io.delta:delta-spark_2.13:4.4.0 "
                f"--conf spark.sql.extensions={DELTA_EXTENSION} "
                "--conf spark.sql.catalog.spark_catalog="
                "org.apache.spark.sql.delta.catalog.DeltaCatalog"
            )
        columns = set(self.schema.fieldNames())
        missing = [column for column in self.partition_by if column not in columns]
        if missing:
            raise ValueError(
                f"DeltaSink {name}: partition_by columns {missing} are not in the output, "
                f"whose columns are {sorted(columns)}"
            )

    def write(self, frame: DataFrame) -> None:
        """AT_LEAST_ONCE and NONE: appends the epoch's output now, a plain Delta commit.

        Without the idempotent write options: the epochs since a snapshot are written again
        after a restore anyway, and a version recorded here would hold back the snapshot ids
        of a later EXACTLY_ONCE run of the job.
        """
        self._append(frame.drop(EPOCH_COLUMN) if EPOCH_COLUMN in frame.columns else frame, {})

    def _write_batch(self, batch: DataFrame, batch_id: int, job_uid: str) -> None:
        """One Delta commit of the batch, skipped by Delta if the job's sink committed
        ``batch_id`` or a later one already."""
        self._append(
            batch, {"txnAppId": app_id(job_uid, self._sink_name), "txnVersion": str(batch_id)}
        )

    def _append(self, frame: DataFrame, idempotent: Mapping[str, str]) -> None:
        writer = frame.write.format("delta").mode("append").options(**self.options)
        writer = writer.options(**idempotent)
        if self.partition_by:
            writer = writer.partitionBy(*self.partition_by)
        writer.save(self.path)
