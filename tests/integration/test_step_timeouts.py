"""A wedged epoch or sink call ends the execution (exit 70), and the next one is exact.

Found reading the code (issue 47): epochs and sink calls had no timeout, so a driver blocked
in a sink's commit, or in an epoch waiting on something that never answers, ran on for ever
while taking no snapshot. The driver's watchdog (``spark_runtime/watchdog.py``) ends it once
the step outlives ``--epoch-timeout-seconds`` / ``--sink-timeout-seconds``
(``spec.stallDetection`` on Kubernetes), naming the step; the operator restarts it from the
last snapshot (its side: ``tests/unit/operator/test_decide_stalls.py`` and the stopped driver
of ``tests/e2e/test_executors_kind.py``). Here the driver is a real process in local mode on
the embedded store, wedged by its own pipeline: a ``foreachBatch`` function that sleeps in the
2nd phase, then a UDF that sleeps inside an epoch. The same command then runs the job to the
end, and every event is in the append-only output once.
"""

from __future__ import annotations

import collections
import csv
import subprocess
import sys
import time
from pathlib import Path

import pytest

from snapshotjob_contract.exits import DriverExit

pytestmark = [pytest.mark.timeout(600)]

END = 3000
PIPELINE = """
import os, time

from pyspark.sql import functions as F
from pyspark.sql.types import LongType

from spark_runtime.sinks import FileSink
from spark_runtime.sources import SequenceSource


def define_pipeline(p):
    out, wedge = p.args["out"], p.args["wedge"]

    def slow(value):
        if os.path.exists(os.path.join(wedge, "epoch")):
            time.sleep(600)
        return value

    source = SequenceSource(rows_per_epoch=100, end=int(p.args["end"]))
    numbers = p.readStream(source, name="numbers")
    events = numbers.select(F.udf(slow, LongType())("value").alias("id"))
    events.writeStream(FileSink(f"{out}/events", fmt="csv"), name="events")

    def publish(batch, batch_id):
        if os.path.exists(os.path.join(wedge, "sink")):
            time.sleep(600)

    numbers.foreachBatch(publish, name="wedged")
"""


def _run(work: Path, *options: str, timeout_s: float = 240) -> tuple[int, str, float]:
    """Runs the job once with the same command; returns its exit code, log and seconds."""
    command = [
        sys.executable, "-m", "spark_runtime", "run", "wedge_pipeline.py",
        "--arg", f"out={work / 'out'}", "--arg", f"wedge={work}", "--arg", f"end={END}",
        "--snapshot-interval-ms", "500", *options,
    ]  # fmt: skip
    started = time.monotonic()
    done = subprocess.run(
        command, cwd=work, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def _event_ids(work: Path) -> collections.Counter[int]:
    ids: collections.Counter[int] = collections.Counter()
    for part in (work / "out" / "events").glob("events-*/part-*"):
        with part.open(newline="") as rows:
            ids.update(int(row[0]) for row in csv.reader(rows))
    return ids


def test_a_wedged_sink_call_and_a_wedged_epoch_end_the_execution_then_the_output_is_exact(
    tmp_path: Path,
) -> None:
    (tmp_path / "wedge_pipeline.py").write_text(PIPELINE)

    (tmp_path / "sink").touch()
    code, log, seconds = _run(tmp_path, "--sink-timeout-seconds", "4")
    assert code == DriverExit.STALLED, log[-3000:]
    assert "Sink wedged commit snapshotId=" in log, log[-3000:]
    assert "outlived its timeout timeoutSeconds=4" in log
    # Ended by the watchdog, not by the sleep's end: a Spark start and a few epochs, then 4 s.
    assert seconds < 120, seconds

    (tmp_path / "sink").unlink()
    (tmp_path / "epoch").touch()
    code, log, _ = _run(tmp_path, "--epoch-timeout-seconds", "4")
    assert code == DriverExit.STALLED, log[-3000:]
    assert "outlived its timeout timeoutSeconds=4" in log and "Epoch " in log, log[-3000:]

    (tmp_path / "epoch").unlink()
    code, log, _ = _run(tmp_path)
    assert code == DriverExit.COMPLETED, log[-3000:]
    ids = _event_ids(tmp_path)
    assert sorted(ids) == list(range(END)), "an event lost"
    assert max(ids.values()) == 1, [i for i, n in ids.items() if n > 1][:10]
