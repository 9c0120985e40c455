"""A class data sharing archive for the driver's JVM, so that a restarted driver runs sooner.

Every restart of a job (a lost driver, a crash, a resume, an upgrade) starts a Spark JVM, and
until it has restored the job produces no output. Most of a Spark session's start is the JVM
loading, parsing and verifying about 10,000 classes; HotSpot's AppCDS maps the classes a
previous run loaded from one archive instead. Measured on the project's 2-core machine with
``bench/driver_start.py``, a session start with a query on it went from about 13 s to about
8 s.

An archive is only valid for the JVM and the jars that wrote it, and a JVM handed a stale
one ignores it but also loses the JDK's own shared classes (slower than no archive at all).
So each archive has a fingerprint of the ``java`` binary and of PySpark's jars next to it
(:func:`fingerprint`), and :func:`java_options` names an archive only while the fingerprint
still holds. Nothing needs it: a missing or stale archive only costs the saving.

Built once per machine by ``hack/install.sh`` and once per image by the image build, with
``python -m spark_runtime.cds``: a session is started with ``-XX:ArchiveClassesAtExit``, runs
queries like a driver's (aggregations, joins, windows, pandas and Arrow), and writes the
archive when its JVM exits.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pyspark

_log = logging.getLogger(__name__)

ARCHIVE_DIR_ENV = "SJ_CDS_DIR"
"""Where archives are kept; by default ``$SJ_CACHE/cds`` (``~/.cache/snapshotjob/cds``). The
project image sets it to a directory inside the image."""

DISABLE_ENV = "SJ_CDS"
"""Set to ``off`` to start drivers without the archive (to compare, or to rule it out)."""

JAVA_OPTIONS_CONF = "spark.driver.extraJavaOptions"


def archive_dir() -> Path:
    """The directory archives are kept in (:data:`ARCHIVE_DIR_ENV`)."""
    explicit = os.environ.get(ARCHIVE_DIR_ENV)
    if explicit:
        return Path(explicit)
    cache = os.environ.get("SJ_CACHE", str(Path.home() / ".cache" / "snapshotjob"))
    return Path(cache) / "cds"


def java_binary() -> Path | None:
    """The ``java`` Spark starts: ``$JAVA_HOME/bin/java``, else the one on the PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _spark_home() -> Path:
    return Path(pyspark.__file__).parent


def archive_path() -> Path | None:
    """Where the archive for this ``java`` and this PySpark installation is kept; None
    without Java. One file per installation: a rebuilt archive replaces it."""
    java = java_binary()
    if java is None:
        return None
    name = hashlib.sha256(f"{java}\0{_spark_home()}".encode()).hexdigest()[:16]
    return archive_dir() / f"spark-{name}.jsa"


def fingerprint(java: Path, spark_home: Path) -> str:
    """What an archive is valid for: the JVM binary and PySpark's jars, as they are now.

    The JVM checks both itself (it refuses an archive of another build, or of a jar whose
    size or modification time changed, e.g. after a reinstall); the fingerprint, kept next
    to the archive, keeps such an archive from being named at all. Times are whole seconds,
    as the JVM compares them and as image layers keep them.
    """
    digest = hashlib.sha256(pyspark.__version__.encode())
    for path in [java, *sorted((spark_home / "jars").glob("*.jar"))]:
        stat = path.stat()
        digest.update(f"{path}\0{stat.st_size}\0{int(stat.st_mtime)}\n".encode())
    return digest.hexdigest()


def _fingerprint_path(archive: Path) -> Path:
    return archive.with_suffix(".fingerprint")


def _current_fingerprint() -> str | None:
    java = java_binary()
    return None if java is None else fingerprint(java, _spark_home())


def java_options() -> str:
    """``-XX:SharedArchiveFile=...`` if a valid archive for this JVM and PySpark exists and
    is not disabled (:data:`DISABLE_ENV`), else ""."""
    if os.environ.get(DISABLE_ENV, "").lower() == "off":
        return ""
    path = archive_path()
    if path is None or not path.is_file():
        return ""
    try:
        recorded = _fingerprint_path(path).read_text().strip()
    except OSError:
        return ""
    if recorded != _current_fingerprint():
        return ""
    return f"-XX:SharedArchiveFile={path}"


def with_archive(conf: dict[str, str], options: str) -> dict[str, str]:
    """``conf`` with ``options`` put before any driver Java options it already has.

    Args:
        conf: Spark settings, possibly with the user's ``spark.driver.extraJavaOptions``.
        options: What :func:`java_options` returned.

    Returns:
        A new dict; ``conf`` itself is not changed. The user's options come last, so a flag
        of theirs (``-Xshare:off``, another archive) wins.
    """
    if not options:
        return dict(conf)
    user = conf.get(JAVA_OPTIONS_CONF, "").strip()
    return {**conf, JAVA_OPTIONS_CONF: f"{options} {user}".strip()}


def _warm_up(archive: Path) -> None:
    """Starts a session that writes ``archive`` at exit, and runs driver-like queries on it."""
    from pyspark.sql import functions as F  # noqa: N812 - PySpark's own idiom
    from pyspark.sql.window import Window

    from spark_runtime.session import spark_session

    spark = spark_session(
        "snapshotjob-cds",
        shuffle_partitions=4,
        arrow=True,
        class_data_sharing=False,
        conf={JAVA_OPTIONS_CONF: f"-XX:ArchiveClassesAtExit={archive}"},
    )
    rows = spark.range(20_000).select(
        (F.col("id") % 10).alias("key"),
        F.col("id").alias("value"),
        F.current_timestamp().alias("ts"),
    )
    keys = spark.createDataFrame([(k, f"k{k}") for k in range(10)], "key long, name string")
    sums = rows.groupBy("key").agg(F.sum("value"), F.count("*"), F.min("value"), F.max("value"))
    sums.join(keys, "key").orderBy("key").collect()
    rows.groupBy(F.window("ts", "10 seconds"), "key").count().collect()
    rows.withColumn("rank", F.row_number().over(Window.partitionBy("key").orderBy("value"))).limit(
        10
    ).collect()
    rows.repartition(4, "key").sortWithinPartitions("value").toJSON().take(5)
    try:
        sums.toPandas()
        rows.groupBy("key").applyInPandas(lambda frame: frame.head(1), rows.schema).collect()
    except ImportError:
        _log.info("Archive without the pandas classes: pandas or pyarrow is not installed")
    # The JVM writes the archive as it exits, which it does once its stdin closes; wait for
    # that here, or the build would look for the archive before it is written.
    launcher = getattr(spark.sparkContext._gateway, "proc", None)
    spark.stop()
    if launcher is not None:
        launcher.stdin.close()
        launcher.wait(timeout=300)


def build(force: bool = False) -> Path | None:
    """Writes this JVM's archive unless it exists; returns its path (None without Java).

    The warm-up runs in a child process, because the JVM writes the archive when it exits;
    it writes to a temporary name first, so a concurrent or interrupted build never leaves
    a half-written archive under the real name.
    """
    path = archive_path()
    if path is None:
        _log.warning("No archive built: no java found (JAVA_HOME, PATH)")
        return None
    if java_options() and not force:
        _log.info("Archive present path=%s", path)
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=path.parent) as work:
        partial = Path(work) / path.name
        subprocess.run(
            [sys.executable, "-m", "spark_runtime.cds", "--warm-up", str(partial)],
            check=True,
            timeout=600,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        if not partial.is_file():
            raise RuntimeError(f"The JVM wrote no archive at {partial}")
        partial.chmod(0o644)
        # The fingerprint goes last: until it is there, the new archive is not named.
        _fingerprint_path(path).unlink(missing_ok=True)
        os.replace(partial, path)
        _fingerprint_path(partial).write_text(f"{_current_fingerprint()}\n")
        _fingerprint_path(partial).chmod(0o644)
        os.replace(_fingerprint_path(partial), _fingerprint_path(path))
    _log.info("Archive built path=%s bytes=%d", path, path.stat().st_size)
    return path


def main(argv: list[str] | None = None) -> int:
    """``python -m spark_runtime.cds [--force]``: build the archive for this JVM and PySpark."""
    parser = argparse.ArgumentParser(prog="python -m spark_runtime.cds", description=__doc__)
    parser.add_argument("--force", action="store_true", help="build even if it exists")
    parser.add_argument("--warm-up", metavar="ARCHIVE", help=argparse.SUPPRESS)
    ns = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
    if ns.warm_up:
        _warm_up(Path(ns.warm_up))
        return 0
    path = build(force=ns.force)
    print(path or "no archive: no java found")
    return 0


if __name__ == "__main__":
    sys.exit(main())
