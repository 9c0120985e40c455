"""Kafka sum: integer events from a Kafka topic, a running sum per key, PostgreSQL and Kafka.

The Kafka twin of :mod:`examples.sequence_sum`: each record's value is an event id ``n`` (as
text), keyed by ``n % keys``; the running sum and count per key are upserted into ``table``
and, with ``events_table``, every event is appended as one row ``(id)`` to a table without a
unique constraint, so a replayed event is a second row and a lost one a missing id. Checked
with :func:`examples.sequence_sum.check_event_ids` and ``expected_sums``. With ``out_topic``
every event also goes to that Kafka topic (key ``n % keys``, value ``n``) through the
exactly-once :class:`~spark_runtime.sinks.KafkaSink`, for ``read_committed`` consumers.

Arguments (``--arg key=value``): ``bootstrap`` and ``topic`` (required), ``dsn`` (required),
``table`` [sums], ``keys`` [10], ``events_table`` [none], ``max_rows_per_epoch`` [5000],
``group_id`` [none]: the consumer group the snapshotted offsets are committed to (monitoring
only), ``bounded`` [false]: complete once every committed record has been read,
``out_topic`` [none], ``driver_read_max_records`` [10000]: epochs of at most this many
records are read by the driver's own consumer, larger ones by the executors (0: always the
executors).
"""

from __future__ import annotations

from pyspark.sql import functions as F  # noqa: N812 - PySpark's universal alias

from spark_runtime.sinks import KafkaSink, PostgresSink
from spark_runtime.sources import KafkaSource
from spark_runtime.sources.kafka import DRIVER_READ_MAX_RECORDS
from spark_runtime.streaming import Pipeline


def define_pipeline(p: Pipeline) -> None:
    """Kafka -> key = value % keys -> running sum and count -> PostgreSQL (and Kafka)."""
    args = p.args
    keys = int(args.get("keys", 10))
    group = args.get("group_id")
    source = KafkaSource(
        str(args["bootstrap"]),
        [str(args["topic"])],
        max_rows_per_epoch=int(args.get("max_rows_per_epoch", 5000)),
        group_id=str(group) if group else None,
        bounded=str(args.get("bounded", "false")).lower() == "true",
        driver_read_max_records=int(args.get("driver_read_max_records", DRIVER_READ_MAX_RECORDS)),
    )
    records = p.readStream(source, name="kafka")
    numbers = records.select(F.col("value").cast("string").cast("long").alias("value"))
    keyed = numbers.withColumn("key", F.col("value") % keys)
    sums = keyed.groupBy("key").agg(
        F.sum("value").alias("total"), F.count("*").alias("count"), name="sums"
    )
    sums.writeStream(
        PostgresSink(str(args["dsn"]), str(args.get("table", "sums")), ["key"]),
        name="postgres",
    )
    events_table = args.get("events_table")
    if events_table:
        events = numbers.select(F.col("value").alias("id"))
        events.writeStream(PostgresSink(str(args["dsn"]), str(events_table)), name="events")
    out_topic = args.get("out_topic")
    if out_topic:
        out = keyed.select(
            F.col("key").cast("string").alias("key"), F.col("value").cast("string").alias("value")
        )
        out.writeStream(KafkaSink(str(args["bootstrap"]), str(out_topic)), name="kafka-out")
