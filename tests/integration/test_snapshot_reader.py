"""A real job's keyed state read back from its snapshot, and the pipeline compatibility check.

A pipeline (``tests/integration/driver_pipeline.py``: a sequence summed by key) runs to the end
in-process against real Hazelcast; its last snapshot's state is then read back with
:func:`spark_runtime.snapshot_reader.read_state`, from Hazelcast and from a copy in a real S3
server, and with ``python -m spark_runtime snapshot read`` as a process. ``snapshot validate
--pipeline`` defines a pipeline module without opening its sinks and checks it against the
snapshot: the job's own module is compatible, one that keeps another aggregate is not (78).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from pyspark.sql import SparkSession

from snapshot_protocol.transfer import transfer_snapshot
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.pipeline import Pipeline
from spark_runtime.snapshot_reader import NotAStateTable, read_state
from testbed.s3 import S3Server
from tests.fixtures.in_process_driver import Runner
from tests.integration import driver_pipeline

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[2]
KEYS, END = 3, 600

INCOMPATIBLE = """
from pyspark.sql import functions as F

from tests.integration.driver_pipeline import GatedSequence
from spark_runtime.sinks import FileSink


def define_pipeline(p):
    numbers = p.readStream(GatedSequence(p.args["limit_file"], rows_per_epoch=150, end=600),
                           name="numbers")
    keyed = numbers.select((F.col("value") % 3).alias("key"), F.col("value"))
    sums = keyed.groupBy("key").agg(F.max("value").alias("total"), F.count("*").alias("count"),
                                    name="sums")
    sums.writeStream(FileSink(p.args["out"]), name="files")
"""


def _args(work: Path) -> dict[str, Any]:
    return {
        "limit_file": str(work / "limit"),
        "out": str(work / "out"),
        "end": END,
        "keys": KEYS,
        "rows_per_epoch": 150,
    }


def _command(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "spark_runtime", "snapshot", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
        cwd=REPO,
        env={**os.environ, **(env or {})},
    )


def test_a_jobs_state_is_read_back_from_hazelcast_s3_and_the_command(
    spark: SparkSession,
    runner: Runner,
    s3: S3Server,
    s3_bucket: str,
    tmp_path: Path,
) -> None:
    args = _args(tmp_path)
    (tmp_path / "limit").write_text(str(END))

    def build(p: Pipeline) -> None:
        p.args.update(args)
        driver_pipeline.define_pipeline(p)

    runner.clean(build, "reader-job", ProcessingGuarantee.EXACTLY_ONCE)
    assert runner.last is not None and runner.last.coordinator is not None
    outcome = runner.last.coordinator.last_outcome
    assert outcome is not None and outcome.successful
    map_name, snapshot_id = outcome.map_name, outcome.snapshot_id
    expected = {
        key: (sum(range(key, END, KEYS)), len(range(key, END, KEYS))) for key in range(KEYS)
    }

    rows = read_state(spark, runner.store, map_name, "sums").collect()
    assert {row["key"]: (row["total"], row["count"]) for row in rows} == expected

    durable = S3SnapshotStore(s3.client(), s3_bucket)
    transfer_snapshot(runner.store, map_name, durable, map_name, snapshot_id)
    from_s3 = read_state(spark, durable, map_name, "sums", snapshot_id).collect()
    assert sorted(from_s3) == sorted(rows)

    with pytest.raises(NotAStateTable, match="its operators: files, numbers, sums"):
        read_state(spark, runner.store, map_name, "nope")

    members = ",".join(runner.address.members)
    where = [
        "--map",
        map_name,
        "--hazelcast",
        members,
        "--cluster-name",
        runner.address.cluster_name,
    ]
    printed = _command("read", *where, "--operator", "sums", "-o", "json")
    assert printed.returncode == 0, printed.stderr
    document = json.loads(printed.stdout)
    assert (document["snapshotId"], document["numRows"]) == (snapshot_id, KEYS)
    assert {r["key"]: (r["total"], r["count"]) for r in document["rows"]} == expected

    source = _command("read", *where, "--operator", "numbers")
    assert source.returncode == DriverExit.BAD_INPUT, source.stderr
    assert "Operator 'numbers' (GatedSequence) of snapshot" in source.stderr
    assert "holds no table of state rows" in source.stderr

    # The job's own module restores it; one keeping max instead of sum does not. Their sinks
    # are not opened: the file sink would create its directory.
    check_args = json.dumps({**args, "out": str(tmp_path / "check-out")})
    own = ["--pipeline", "tests.integration.driver_pipeline", "--args-json", check_args]
    compatible = _command("validate", *where, *own)
    assert compatible.returncode == 0, compatible.stderr
    assert "Compatible: pipeline tests.integration.driver_pipeline can restore it" in (
        compatible.stdout
    )
    # The operator's upgrade check: the newest validation record of the maps it names (one
    # empty here), no chunk read.
    maps = ["--map", f"__sj.no.such.map,{map_name}", *where[2:]]
    checked = _command("validate", *maps, *own, "--compatibility-only")
    assert checked.returncode == 0, checked.stderr
    assert f"can restore snapshot {snapshot_id} of map {map_name}" in checked.stdout
    (tmp_path / "other_pipeline.py").write_text(INCOMPATIBLE)
    other = ["--pipeline", "other_pipeline", "--args-json", check_args]
    path = os.pathsep.join([str(tmp_path), str(REPO)])
    incompatible = _command("validate", *where, *other, env={"PYTHONPATH": path})
    assert incompatible.returncode == DriverExit.SNAPSHOT_INCOMPATIBLE, incompatible.stderr
    assert f"Snapshot {snapshot_id} in map '{map_name}' cannot be restored" in (incompatible.stderr)
    assert "max(value)" in incompatible.stderr
    assert not (tmp_path / "check-out").exists()
