"""The one place that starts a SparkSession: for the driver, the tests and the benchmarks.

Results depend on a few session settings: event-time windows and timestamps assume the
session time zone is UTC, and keyed state is laid out by ``spark.sql.shuffle.partitions``.
A test or benchmark that built its session by hand could drift from the driver's and
measure or check something the driver never runs, so every session comes from
:func:`spark_session`, and what differs between them (the master, the shuffle partitions,
the driver's memory, the UI, Arrow, the JDBC drivers, extra conf) is an argument. Every
session's JVM maps its classes from the class data sharing archive when there is one
(:mod:`spark_runtime.cds`), which makes a driver start about 5 s shorter.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from pyspark.sql import SparkSession

from spark_runtime import cds

SPARK_REDACTION_REGEX = r"(?i)url|jaas|password"
"""``spark.sql.redaction.options.regex``: data source options whose values Spark hides in plans
and its UI. Spark's default (``url``) misses the JAAS line of a Kafka source or sink
(:mod:`spark_runtime.kafka_security`), which carries the password. Defined here: the image's
class data sharing build runs this module without the rest of the package."""

JAR_DIR = Path(
    os.environ.get("SJ_JARS_DIR")
    or Path(os.environ.get("SJ_CACHE", Path.home() / ".cache" / "snapshotjob")) / "jars"
)
"""Where ``hack/install.sh`` puts the JDBC driver, Spark's Kafka connector and the executors'
chunk writer for :func:`spark_session` to load; ``SJ_JARS_DIR`` in the project image."""

ARROW_CONF = "spark.sql.execution.arrow.pyspark.enabled"
"""Arrow between the JVM and Python workers (``toPandas``, ``createDataFrame`` from pandas)."""


def jdbc_driver_jars() -> list[str]:
    """The PostgreSQL JDBC driver jars in :data:`JAR_DIR`, sorted; none if it is missing."""
    if not JAR_DIR.is_dir():
        return []
    return sorted(str(path) for path in JAR_DIR.glob("postgresql-*.jar"))


def kafka_connector_jars() -> list[str]:
    """Spark's Kafka connector and the jars it needs beyond PySpark's (``make install`` puts
    them in ``JAR_DIR/spark-kafka-<version>``), sorted; none if they are missing."""
    return _fetched_jars("spark-kafka")


DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
}
"""What Delta Lake needs of a session beyond its jars: it refuses to write without them."""


def delta_jars() -> list[str]:
    """Delta Lake's jars (``make install`` puts them in ``JAR_DIR/delta-<version>``), for
    :class:`~spark_runtime.sinks.DeltaSink`, sorted; none if they are missing."""
    return _fetched_jars("delta")


S3A_CONF = {
    # hadoop-aws 3.5's defaults load the S3 analytics accelerator, which the install leaves
    # out (with the SDK's 654 MiB bundle): the classic input stream and no request auditing.
    "spark.hadoop.fs.s3a.input.stream.type": "classic",
    "spark.hadoop.fs.s3a.audit.enabled": "false",
}
"""What s3a:// needs of a session beyond the jars of :func:`s3a_jars`."""


def s3a_jars() -> list[str]:
    """hadoop-aws and the AWS SDK's modules for ``s3a://`` paths (``make install`` puts them
    in ``JAR_DIR/s3a-<version>``), sorted; none if they are missing."""
    return _fetched_jars("s3a")


def _fetched_jars(name: str) -> list[str]:
    """The jars of the newest complete ``JAR_DIR/<name>-<version>`` folder, sorted; none if
    there is none (a folder gets its ``.complete`` marker once every jar is in it)."""
    complete = sorted(JAR_DIR.glob(f"{name}-*/.complete"))
    if not complete:
        return []
    return sorted(str(path) for path in complete[-1].parent.glob("*.jar"))


def state_chunk_jars() -> list[str]:
    """The executors' chunk writer and reader (``jvm/``, built by ``make install`` into
    ``JAR_DIR/snapshotjob-chunks``) and the jars it needs beyond PySpark's, sorted; none if
    they are missing (:mod:`spark_runtime.jvm_chunks` then keeps the Python workers)."""
    directory = JAR_DIR / "snapshotjob-chunks"
    if not (directory / ".complete").is_file():
        return []
    return sorted(str(path) for path in directory.glob("*.jar"))


def spark_session(
    app_name: str,
    *,
    shuffle_partitions: int,
    master: str = "local[2]",
    driver_memory: str | None = None,
    ui: bool = False,
    arrow: bool = False,
    jdbc_drivers: bool = False,
    kafka: bool = False,
    delta: bool = False,
    conf: Mapping[str, str] | None = None,
    class_data_sharing: bool = True,
) -> SparkSession:
    """Starts (or returns the running) session: small, quiet, in UTC.

    Args:
        app_name: The application's name.
        shuffle_partitions: ``spark.sql.shuffle.partitions``; the driver passes the job's
            state partitions, so a shuffle by key lands where the state is.
        master: The Spark master.
        driver_memory: ``spark.driver.memory``; None keeps Spark's default.
        ui: Whether the web UI runs (a profile reads its REST API).
        arrow: Whether Arrow carries data between the JVM and Python workers.
        jdbc_drivers: Whether the JDBC driver jars of :func:`jdbc_driver_jars` go on the
            classpath.
        kafka: Whether Spark's Kafka connector (:func:`kafka_connector_jars`) goes on the
            classpath, for :class:`~spark_runtime.sources.KafkaSource`.
        delta: Whether Delta Lake (:func:`delta_jars` and :data:`DELTA_CONF`) and ``s3a://``
            (:func:`s3a_jars`, :data:`S3A_CONF`) are in the session, for
            :class:`~spark_runtime.sinks.DeltaSink` and files in object storage; each only if
            its jars are there.
        conf: Further settings, applied last so they override everything above.
        class_data_sharing: Whether the driver's JVM maps its classes from this machine's
            archive (:mod:`spark_runtime.cds`) if there is a valid one; a JVM with
            ``spark.driver.extraClassPath`` in ``conf`` never does (the archive is only
            valid for PySpark's own classpath).

    Returns:
        The session, with Spark's own logging at ERROR.
    """
    # Executors' Python workers must use this interpreter (the virtualenv's), not the system one.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "true" if ui else "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.shuffle.partitions", str(shuffle_partitions))
        # As Structured Streaming does for its micro-batches. Planned adaptively, a local
        # checkpoint forgets how its rows are partitioned, and every epoch would shuffle the
        # whole keyed state again (spark_runtime.lineage.hash_partitioned); an epoch's small
        # batch has little for adaptive execution to win. ``conf`` may turn it back on.
        .config("spark.sql.adaptive.enabled", "false")
        .config("spark.sql.redaction.options.regex", SPARK_REDACTION_REGEX)
    )
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    if arrow:
        builder = builder.config(ARROW_CONF, "true")
    lakehouse, object_storage = (delta_jars(), s3a_jars()) if delta else ([], [])
    jars = (
        (jdbc_driver_jars() if jdbc_drivers else [])
        + (kafka_connector_jars() if kafka else [])
        + lakehouse
        + object_storage
        + state_chunk_jars()
    )
    if jars:
        builder = builder.config("spark.jars", ",".join(jars))
    settings = {
        **(DELTA_CONF if lakehouse else {}),
        **(S3A_CONF if object_storage else {}),
        **(conf or {}),
    }
    if class_data_sharing and "spark.driver.extraClassPath" not in settings:
        settings = cds.with_archive(settings, cds.java_options())
    for key, value in settings.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session
