"""Proof that the test bed's servers are real and that its faults do what they claim.

Every later integration test trusts these fixtures: that a SIGSTOPped member really makes
backups time out, that an entry really survives its owner's crash, that PostgreSQL really
keeps a prepared transaction. If one of these fails, fix the test bed before anything else.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psycopg
import pytest
from hazelcast.errors import IndeterminateOperationStateError
from pyspark.sql import SparkSession
from pyspark.sql import functions as sf

from testbed.hazelcast import HazelcastCluster
from testbed.postgres import PostgresServer

pytestmark = pytest.mark.integration


def test_members_form_one_safe_cluster(hazelcast_cluster: HazelcastCluster) -> None:
    hazelcast_cluster.wait_cluster_safe(expected_size=3)
    for index in range(3):
        health = hazelcast_cluster.health(index)
        assert health is not None, f"member {index} does not answer /hazelcast/health"
        assert health["nodeState"] == "ACTIVE"
        assert health["clusterSize"] == 3
        assert health["clusterSafe"] is True
    assert hazelcast_cluster.members() == sorted(m.address for m in hazelcast_cluster.nodes)


def test_entry_survives_sigkill_of_its_owner(healthy_hazelcast: HazelcastCluster) -> None:
    cluster = healthy_hazelcast
    client = cluster.client()
    snapshots = client.get_map(f"__sj.snapshot.testbed-{uuid.uuid4().hex[:6]}.0").blocking()
    key = "chunk-0"
    snapshots.put(key, b"state bytes")
    owner = cluster.owner_index(client, key)

    cluster.kill(owner)
    cluster.wait_cluster_safe(expected_size=2)

    assert not cluster.nodes[owner].process.running()
    assert cluster.owner_index(client, key) != owner
    assert snapshots.get(key) == b"state bytes"


def test_paused_backup_makes_strict_put_indeterminate(
    healthy_hazelcast: HazelcastCluster,
) -> None:
    """The AP behaviour the design doc describes, and the flag that makes it visible.

    With member 2 hung, a put to a key owned by a live member whose backup replica lives on
    member 2 cannot collect its backup ack. The strict client raises after the backup
    time-out; the default client reports success all the same.
    """
    cluster = healthy_hazelcast
    paused = 2
    strict = cluster.client(fail_on_indeterminate=True)
    lax = cluster.client(fail_on_indeterminate=False)
    map_name = f"__sj.snapshot.testbed-{uuid.uuid4().hex[:6]}.0"
    strict_map = strict.get_map(map_name).blocking()
    lax_map = lax.get_map(map_name).blocking()
    # Owners come from the partition table before the pause: a hung member may be the one
    # that would send the table.
    keys = [
        k for k in (f"chunk-{i}" for i in range(40)) if cluster.owner_index(strict, k) != paused
    ]

    cluster.pause(paused)
    try:
        outcomes: dict[str, str] = {}
        # With 3 members and one backup, about half of the live members' partitions have
        # their backup on the paused member; eight keys find one with near certainty while
        # keeping the pause well under the members' heartbeat time-out.
        for key in keys[:8]:
            try:
                strict_map.put(key, b"chunk")
                outcomes[key] = "acked"
            except IndeterminateOperationStateError:
                outcomes[key] = "indeterminate"
                break
        indeterminate = [k for k, v in outcomes.items() if v == "indeterminate"]
        assert indeterminate, f"no put became indeterminate with member {paused} paused: {outcomes}"

        # The same put without the flag: the backup is just as unacknowledged, yet it
        # "succeeds" once the backup time-out has passed.
        assert lax_map.put(indeterminate[0], b"chunk v2") == b"chunk"
    finally:
        cluster.resume(paused)
    cluster.wait_cluster_safe(expected_size=3)
    assert strict_map.get(indeterminate[0]) == b"chunk v2"


def test_prepared_transaction_survives_disconnect_and_commits(postgres: PostgresServer) -> None:
    dsn = postgres.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE sums (k int PRIMARY KEY, v bigint)")

    gid = f"sj-testbed-{uuid.uuid4().hex[:8]}"
    conn = psycopg.connect(dsn)
    conn.execute("INSERT INTO sums VALUES (1, 10)")
    conn.execute(f"PREPARE TRANSACTION '{gid}'")
    conn.close()  # the session ends; the prepared transaction must not

    with psycopg.connect(dsn, autocommit=True) as conn:
        prepared = conn.execute("SELECT gid FROM pg_prepared_xacts").fetchall()
        assert (gid,) in prepared
        assert conn.execute("SELECT count(*) FROM sums").fetchone() == (0,)
        conn.execute(f"COMMIT PREPARED '{gid}'")
        assert conn.execute("SELECT v FROM sums WHERE k = 1").fetchone() == (10,)
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)


def test_rollback_prepared_discards(postgres: PostgresServer) -> None:
    dsn = postgres.create_database()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE sums (k int PRIMARY KEY, v bigint)")

    gid = f"sj-testbed-{uuid.uuid4().hex[:8]}"
    with psycopg.connect(dsn) as conn:
        conn.execute("INSERT INTO sums VALUES (2, 20)")
        conn.execute(f"PREPARE TRANSACTION '{gid}'")

    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(f"ROLLBACK PREPARED '{gid}'")
        assert conn.execute("SELECT count(*) FROM sums").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM pg_prepared_xacts").fetchone() == (0,)


def test_spark_local_job_counts(spark: SparkSession) -> None:
    df = spark.range(0, 100_000, numPartitions=4).withColumn("bucket", sf.col("id") % 7)
    counts = {row["bucket"]: row["count"] for row in df.groupBy("bucket").count().collect()}
    assert sum(counts.values()) == 100_000
    assert counts[0] == len(range(0, 100_000, 7))
    assert spark.sparkContext.master == "local[2]"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it holds no port or memory, so it counts as gone.
    stat = Path(f"/proc/{pid}/stat").read_text()
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.slow
@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "sigkill"])
def test_interrupted_run_leaves_no_servers(how: signal.Signals, tmp_path: Path) -> None:
    """A test run stopped by Ctrl-C, or killed outright, leaves no member or server behind
    (three Hazelcast members, PostgreSQL, the Kafka broker, the S3 server).

    A child pytest session starts the real fixtures and reports their process ids; it is then
    interrupted the way a terminal does (SIGINT to its process group) or killed.
    """
    target = Path(__file__).with_name("testbed_interrupt_target.py")
    pids_file = tmp_path / "pids.json"
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", str(target), "-q", "-p", "no:cacheprovider", "-s"],
        env={**os.environ, "SJ_INTERRUPT_PIDS": str(pids_file)},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while not pids_file.exists():
            assert child.poll() is None, child.stdout.read().decode() if child.stdout else ""
            assert time.monotonic() < deadline, "the child session never started its servers"
            time.sleep(0.5)
        time.sleep(0.5)  # the file is written whole before its name appears, but be patient
        pids: list[int] = json.loads(pids_file.read_text())
        assert len(pids) == 6 and all(_alive(p) for p in pids)

        os.killpg(child.pid, how)
        child.wait(timeout=120)
        deadline = time.monotonic() + 30
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert [p for p in pids if _alive(p)] == [], "servers outlived the interrupted run"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
