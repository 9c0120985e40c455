"""The Delta Lake sink, exactly once under driver kills and failpoints, locally and on S3.

A pipeline file appends one row per input event (``id``) to a Delta table through
:class:`~spark_runtime.sinks.DeltaSink`. Its driver runs as a real process
(``python -m spark_runtime run``, snapshots in the embedded store) and is crashed at the
protocol's steps that matter for output (``SJ_FAILPOINTS``: after phase 2, so the restore's
write must add nothing; on S3 after the record names the snapshot but before phase 2, so the
restore must write the batch) and killed with ``SIGKILL``; the same command then runs again.
The table is read afterwards by a plain PySpark session with only Delta Lake's jars, as any
reader would: every id once, none missing. The S3 case runs on the test bed's S3 server,
through ``s3a://``.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from snapshotjob_contract.exits import DriverExit
from spark_runtime.session import DELTA_CONF, S3A_CONF, delta_jars, s3a_jars
from testbed.s3 import REGION, S3Server

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(900)]

END = 1_500
PIPELINE = textwrap.dedent(
    """
    from pyspark.sql import functions as F

    from spark_runtime.sinks import DeltaSink
    from spark_runtime.sources import SequenceSource


    def define_pipeline(p):
        numbers = p.readStream(
            SequenceSource(rows_per_epoch=150, end=int(p.args["end"])), name="numbers"
        )
        events = numbers.select(F.col("value").alias("id"), (F.col("value") % 7).alias("kind"))
        events.writeStream(DeltaSink(p.args["table"], partition_by=["kind"]), name="events")
    """
)


@pytest.fixture(autouse=True)
def _delta_installed() -> None:
    assert delta_jars() and s3a_jars(), "Delta Lake's and s3a's jars are missing: make install"


class DeltaJob:
    """The pipeline file's driver in ``work``, run again and again as a user would."""

    def __init__(
        self, work: Path, table: str, conf: dict[str, str], interval_ms: int = 300
    ) -> None:
        self.work = work
        (work / "delta_events.py").write_text(PIPELINE)
        self.command = [
            sys.executable,
            "-m",
            "spark_runtime",
            "run",
            "delta_events.py",
            "--snapshot-interval-ms",
            str(interval_ms),
            "--state-partitions",
            "2",
            "--arg",
            f"end={END}",
            "--arg",
            f"table={table}",
        ]
        for key, value in conf.items():
            self.command += ["--conf", f"{key}={value}"]
        self.runs = 0

    def start(self, failpoints: str = "") -> tuple[subprocess.Popen[bytes], Path]:
        self.runs += 1
        log = self.work / f"run-{self.runs}.log"
        environment = {**os.environ, "SJ_FAILPOINTS": failpoints}
        with open(log, "wb") as output:
            process = subprocess.Popen(
                self.command,
                cwd=self.work,
                env=environment,
                stdout=output,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        return process, log

    def run(self, failpoints: str = "", timeout_s: float = 300) -> tuple[int, str]:
        """Runs one execution to its end; returns its exit code and log."""
        process, log = self.start(failpoints)
        try:
            code = process.wait(timeout=timeout_s)
        finally:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
        return code, log.read_text(errors="replace")

    def kill_after_snapshots(self, snapshots: int) -> str:
        """Runs one execution and kills it with SIGKILL once it took ``snapshots`` more."""
        process, log = self.start()
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:
            text = log.read_text(errors="replace")
            if text.count("Snapshot done snapshotId=") >= snapshots:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait()
                return text
            assert process.poll() is None, f"driver ended rc={process.returncode}: {text[-3000:]}"
            time.sleep(0.2)
        os.killpg(process.pid, signal.SIGKILL)
        raise AssertionError("no snapshots within 240 s")


def _faults_then_completion(job: DeltaJob) -> list[str]:
    """A crash after phase 2, a SIGKILL, then a run to the end; the logs."""
    logs = []
    # After step 7 (phase 2 not run: the restore must write the batch) is the S3 test's.
    for failpoint in ("take.after_step_9",):
        code, log = job.run(f"{failpoint}=crash")
        assert code == DriverExit.FAILPOINT_CRASH, f"{failpoint}: rc={code} {log[-3000:]}"
        assert f"Failpoint crash failpoint={failpoint}" in log
        logs.append(log)
    logs.append(job.kill_after_snapshots(2))
    code, log = job.run()
    assert code == DriverExit.COMPLETED, log[-3000:]
    logs.append(log)
    return logs


READ = textwrap.dedent(
    """
    import json, sys
    from pyspark.sql import SparkSession

    jars, conf, table = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3]
    builder = SparkSession.builder.master("local[1]").config("spark.jars", jars)
    for key, value in conf.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    rows = spark.read.format("delta").load(table)
    ids = [row.id for row in rows.select("id").collect()]
    history = spark.sql(f"DESCRIBE HISTORY delta.`{table}`").count()
    print(json.dumps({"ids": ids, "commits": history}))
    spark.stop()
    """
)


def _read_with_plain_spark(table: str, conf: dict[str, str]) -> tuple[list[int], int]:
    """The table's ids and commits, read by PySpark with Delta Lake and nothing of ours."""
    jars = ",".join(delta_jars() + s3a_jars())
    read = subprocess.run(
        [sys.executable, "-c", READ, jars, json.dumps({**DELTA_CONF, **conf}), table],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd="/",
    )
    assert read.returncode == 0, read.stderr[-3000:]
    found = json.loads(read.stdout.strip().splitlines()[-1])
    return found["ids"], found["commits"]


def _assert_every_id_once(ids: list[int]) -> None:
    repeated = len(ids) - len(set(ids))
    missing = sorted(set(range(END)) - set(ids))
    strays = sorted(set(ids) - set(range(END)))
    assert (repeated, len(missing), len(strays)) == (0, 0, 0), (
        f"repeated={repeated} missing={missing[:10]} ({len(missing)}) strays={strays[:10]}"
    )


def test_a_local_delta_table_gets_every_event_once_through_crashes_and_kills(
    tmp_path: Path,
) -> None:
    table = str(tmp_path / "table")
    logs = _faults_then_completion(DeltaJob(tmp_path, table, {}))
    # The run after the crash wrote the restored snapshot's batch, which phase 2 had written,
    # a second time in its restore (before the coordinator logs the restore done): Delta
    # skipped it, as the ids below, each once, show.
    restore = logs[1].split("Restored snapshotId=")[0]
    assert "Called foreachBatch name=events batchId=" in restore
    ids, commits = _read_with_plain_spark(table, {})
    _assert_every_id_once(ids)
    # One commit per snapshot that had output: fewer than epochs (10), more than one.
    assert 1 < commits <= END // 150


def test_a_delta_table_on_s3_gets_every_event_once_through_crashes(
    tmp_path: Path, s3: S3Server, s3_bucket: str
) -> None:
    conf = {
        "spark.hadoop.fs.s3a.endpoint": s3.endpoint,
        "spark.hadoop.fs.s3a.endpoint.region": REGION,
        "spark.hadoop.fs.s3a.path.style.access": "true",
        "spark.hadoop.fs.s3a.connection.ssl.enabled": "false",
        "spark.hadoop.fs.s3a.access.key": s3.access_key,
        "spark.hadoop.fs.s3a.secret.key": s3.secret_key,
    }
    table = f"s3a://{s3_bucket}/events"
    # Fewer, larger commits: each costs s3a a few round trips per file of the log.
    job = DeltaJob(tmp_path, table, conf, interval_ms=1500)
    code, log = job.run("take.after_step_7=crash")
    assert code == DriverExit.FAILPOINT_CRASH, log[-3000:]
    code, log = job.run()
    assert code == DriverExit.COMPLETED, log[-3000:]
    ids, _commits = _read_with_plain_spark(table, {**S3A_CONF, **conf})
    _assert_every_id_once(ids)
    objects = s3.client().list_objects_v2(Bucket=s3_bucket, Prefix="events/_delta_log/")
    assert any(o["Key"].endswith(".json") for o in objects.get("Contents", []))
