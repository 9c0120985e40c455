"""Client heartbeats per release line: a pipeline of your own, in an image of your own.

The example of docs/getting-started/your-pipeline.md. Every installed client sends heartbeats that
carry its version string as the client reports it: "2.1", "v2.1.0", "2.02.1", "2.2.0rc1",
"3.0.post1", or something that is no version at all. The pipeline normalises each string to its
release line ("2.1", "2.2", "3.0"; "unknown" for a string that is not a version) with the
``packaging`` library, which parses versions by PEP 440. The runtime image does not ship
``packaging``: examples/custom-image/Dockerfile installs it, and the parsing runs in a Python
UDF on the executors, which use the same image as the driver.

Two results, both exactly-once into PostgreSQL (two-phase commit, upserts by the key):

- ``<table>_heartbeats``: heartbeats per release line (a running count);
- ``<table>_installs``: distinct installs seen per release line (``dropDuplicates`` on
  ``(release_line, install)``, then a running count).

The heartbeats are generated (``SequenceSource``), so the job needs nothing but a database and
its result is known in advance: heartbeat ``n`` comes from install ``n % installs`` and
reports version ``VERSIONS[n % len(VERSIONS)]``. For real input, read a Kafka topic with
``KafkaSource`` instead (examples/kafka_sum.py) and keep the rest.

Arguments (``spec.pipeline.args``): ``dsn`` (required; a libpq connection string, from a Secret
as ``$(PG_DSN)``), ``table`` [heartbeats], ``installs`` [100], ``end`` [6000],
``rows_per_second`` [20].
"""

from __future__ import annotations

from packaging.version import InvalidVersion, Version
from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias
from pyspark.sql.types import StringType

from spark_runtime.sinks import PostgresSink
from spark_runtime.sources import SequenceSource
from spark_runtime.streaming import Pipeline

VERSIONS = ("2.1", "v2.1.0", "2.1.3", "2.02.1", "2.2.0rc1", "3.0", "3.0.post1", "latest")
"""The version strings the generated clients report, as clients write them."""


def release_line(version: str | None) -> str:
    """Returns the release line ``major.minor`` of a version string, or ``unknown``."""
    try:
        release = Version(version or "").release
    except InvalidVersion:
        return "unknown"
    minor = release[1] if len(release) > 1 else 0
    return f"{release[0]}.{minor}"


def define_pipeline(p: Pipeline) -> None:
    """Heartbeats -> release line -> heartbeats and distinct installs per line -> PostgreSQL."""
    args = p.args
    dsn = str(args["dsn"])
    table = str(args.get("table", "heartbeats"))
    installs = int(args.get("installs", 100))
    source = SequenceSource(
        rows_per_second=float(args.get("rows_per_second", 20)), end=int(args.get("end", 6000))
    )
    versions = F.array(*(F.lit(v) for v in VERSIONS))
    heartbeats = p.readStream(source, name="heartbeats").select(
        (F.col("value") % installs).alias("install"),
        F.element_at(versions, (F.col("value") % len(VERSIONS) + 1).cast("int")).alias(
            "client_version"
        ),
    )
    # Arrow-batched: the executors' Python workers get the strings a batch at a time.
    normalise = F.udf(release_line, StringType(), useArrow=True)
    lines = heartbeats.withColumn("release_line", normalise(F.col("client_version")))

    per_line = lines.groupBy("release_line").agg(
        F.count("*").alias("heartbeats"), name="heartbeats_per_line"
    )
    per_line.writeStream(
        PostgresSink(dsn, f"{table}_heartbeats", ["release_line"]), name="heartbeats_sink"
    )

    installs_per_line = (
        lines.dropDuplicates(["release_line", "install"], name="installs_seen")
        .groupBy("release_line")
        .agg(F.count("*").alias("installs"), name="installs_per_line")
    )
    installs_per_line.writeStream(
        PostgresSink(dsn, f"{table}_installs", ["release_line"]), name="installs_sink"
    )
