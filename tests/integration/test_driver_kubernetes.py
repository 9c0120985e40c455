"""The driver as a process in Kubernetes mode, against a real API server and Hazelcast.

``python -m spark_runtime run --kubernetes`` reads its SnapshotJob, keeps the execution record
in the job's status and serves what the operator writes there: export requests, termination
requests and new executions (fencing). No operator runs here; the test writes the status the
way the operator does and checks what the driver writes back and what reaches Hazelcast and
the sink. The pipeline (:mod:`tests.integration.driver_pipeline`) reads a sequence only as far
as the test allows, so exports hold a known state and the output can be checked exactly.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from pyspark.sql import SparkSession

from snapshot_protocol import (
    JobIdentity,
    TerminationMode,
    TerminationRequest,
    export_map_name,
    validate_snapshot,
)
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract.environment import (
    ENV_DURABLE_ACCESS_KEY_ID,
    ENV_DURABLE_BUCKET,
    ENV_DURABLE_ENDPOINT,
    ENV_DURABLE_PREFIX,
    ENV_DURABLE_REGION,
    ENV_DURABLE_SECRET_ACCESS_KEY,
)
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from snapshotjob_contract.spec import ProcessingGuarantee
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.kube_record_store import KubernetesRecordStore
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.processes import start_in_own_session, wait_until
from testbed.s3 import S3Server
from testbed.snapshotjob_crd import create_job, install_crd
from tests.integration import driver_pipeline

pytestmark = [pytest.mark.integration, pytest.mark.kube]

NAMESPACE = "default"
REPO = Path(__file__).resolve().parents[2]
KEYS = 3
END = 600
EXPORTED_AT = 300  # the job's input is held here while it exports
FENCED_AT = 450  # the second job's input is held here while it is fenced
STATE_PARTITIONS = 2  # spec.statePartitions; fewer tasks per epoch than the default 8


@pytest.fixture(scope="module")
def api(kube_api: KubeAPI) -> Iterator[client.ApiClient]:
    api_client = kube_api.api_client()
    install_crd(api_client)
    yield api_client
    api_client.close()


@pytest.fixture
def store(healthy_hazelcast: HazelcastCluster) -> Iterator[HazelcastSnapshotStore]:
    hz = connect([n.address for n in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    yield HazelcastSnapshotStore(hz)
    hz.shutdown()


class Drivers:
    """Starts driver processes with the test bed's kubeconfig and kills leftovers."""

    def __init__(self, kube_api: KubeAPI, logs: Path) -> None:
        self.kube_api = kube_api
        self.logs = logs
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self,
        name: str,
        execution_id: str,
        initial_snapshot: str = "",
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        log_path = self.logs / f"{name}-{execution_id}.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kube_api.kubeconfig),
            "PYSPARK_PYTHON": sys.executable,
            "SJ_INITIAL_SNAPSHOT_NAME": initial_snapshot,
            "SJ_FAILPOINTS": "",
            **(extra_env or {}),
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        argv = [sys.executable, "-m", "spark_runtime", "run", "--kubernetes", "--namespace"]
        argv += [NAMESPACE, "--name", name, "--execution-id", execution_id]
        with log_path.open("wb") as out:
            process = start_in_own_session(
                f"driver-{name}", argv, out, env=env, cwd=REPO, tie_to_parent=False
            )
        self.started.append((process, log_path))
        return process

    def wait(self, process: subprocess.Popen[bytes], timeout: float = 120) -> int:
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Driver did not exit within {timeout}s:\n{self.tail(process)}")

    def alive(self, process: subprocess.Popen[bytes]) -> None:
        if process.poll() is not None:
            pytest.fail(f"Driver exited early code={process.returncode}:\n{self.tail(process)}")

    def tail(self, process: subprocess.Popen[bytes]) -> str:
        return "\n".join(self.log(process).splitlines()[-40:])

    def log(self, process: subprocess.Popen[bytes]) -> str:
        path = next(p for proc, p in self.started if proc is process)
        return path.read_text(errors="replace")

    def kill_all(self) -> None:
        for process, _ in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def drivers(kube_api: KubeAPI, tmp_path: Path) -> Iterator[Drivers]:
    started = Drivers(kube_api, tmp_path)
    yield started
    started.kill_all()


def durable_storage_env(s3: S3Server, bucket: str, **extra: str) -> dict[str, str]:
    """The durable storage variables the operator gives a driver Pod, for the test's server."""
    return {
        ENV_DURABLE_BUCKET: bucket,
        ENV_DURABLE_ENDPOINT: s3.endpoint,
        ENV_DURABLE_ACCESS_KEY_ID: s3.access_key,
        ENV_DURABLE_SECRET_ACCESS_KEY: s3.secret_key,
        **extra,
    }


def _objects(api: client.ApiClient) -> Any:
    return client.CustomObjectsApi(api)


def _status(api: client.ApiClient, name: str) -> dict[str, Any]:
    job = _objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    status: dict[str, Any] = job.get("status") or {}
    return status


def _patch_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> None:
    _objects(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        name,
        {"status": status},
        _content_type="application/merge-patch+json",
    )


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _claim(api: client.ApiClient, name: str, execution_id: str, attempt: int) -> None:
    """What the operator writes before it starts a new execution's driver."""
    _patch_status(
        api,
        name,
        {
            "execution": {
                "id": execution_id,
                "driverPod": f"{name}-driver-{attempt}",
                "startedAt": _now(),
                "attempt": attempt,
                "specHash": "test",
            },
            "termination": None,
        },
    )


def _args(work: Path) -> dict[str, Any]:
    return {
        "limit_file": str(work / "limit"),
        "out": str(work / "out"),
        "end": END,
        "keys": KEYS,
        "rows_per_epoch": 150,
    }


def _job(api: client.ApiClient, cluster: HazelcastCluster, work: Path, execution_id: str) -> str:
    work.mkdir(parents=True)
    spec = {
        "image": "snapshotjob/runtime:dev",
        "pipeline": {
            "module": "tests.integration.driver_pipeline",
            "args": _args(work),
        },
        "processingGuarantee": "EXACTLY_ONCE",
        "snapshotIntervalSeconds": 1,
        "statePartitions": STATE_PARTITIONS,
        "spark": {"master": "local[2]"},
        "hazelcast": {
            "address": ",".join(n.address for n in cluster.nodes),
            "clusterName": cluster.cluster_name,
        },
    }
    name: str = create_job(api, spec=spec, execution_id=execution_id)["metadata"]["name"]
    return name


def _allow(work: Path, limit: int) -> None:
    (work / ".limit").write_text(str(limit))
    os.replace(work / ".limit", work / "limit")


def _rows(work: Path) -> list[tuple[int, int, int]]:
    """Every published row as (key, count, total); staging output is not published."""
    out = work / "out"
    rows = []
    for part in sorted(out.glob("files-*/part-*.json")):
        for line in part.read_text().splitlines():
            row = json.loads(line)
            rows.append((int(row["key"]), int(row["count"]), int(row["total"])))
    return rows


def _sums(upto: int) -> dict[int, tuple[int, int]]:
    """key -> (count, total) over the values 0 .. upto - 1."""
    return {key: (len(range(key, upto, KEYS)), sum(range(key, upto, KEYS))) for key in range(KEYS)}


def _latest(rows: list[tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    latest: dict[int, tuple[int, int]] = {}
    for key, count, total in rows:
        if key not in latest or count > latest[key][0]:
            latest[key] = (count, total)
    return latest


def _record(api: client.ApiClient, name: str) -> dict[str, Any]:
    record: dict[str, Any] = _status(api, name).get("executionRecord") or {}
    return record


def _export_entry(api: client.ApiClient, name: str, export: str) -> dict[str, Any] | None:
    entries = _status(api, name).get("exportedSnapshots") or []
    return next((e for e in entries if e["name"] == export), None)


def test_export_suspend_resume_fencing_and_initial_snapshot(
    api: client.ApiClient,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    s3: S3Server,
    s3_bucket: str,
    drivers: Drivers,
    tmp_path: Path,
) -> None:
    """With durable storage, as the operator configures a driver Pod for it: the export is
    copied to a real S3 server, and the job started from it after the store lost it (its
    map's entries removed; every member restarted is tested on kind) finds the copy."""
    durable_env = durable_storage_env(
        s3, s3_bucket, **{ENV_DURABLE_PREFIX: "team-a/jobs", ENV_DURABLE_REGION: "us-east-1"}
    )
    export = f"golden-{uuid.uuid4().hex[:6]}"
    export_map = export_map_name(NAMESPACE, export)
    work = tmp_path / "job-1"
    name = _job(api, healthy_hazelcast, work, "exec-1")
    _allow(work, EXPORTED_AT)
    first = drivers.start(name, "exec-1", extra_env=durable_env)

    # The driver snapshots every second and keeps the record in the job's status.
    seen: list[int] = []

    def record_advanced() -> bool:
        drivers.alive(first)
        seen.append(int(_record(api, name).get("snapshotId", -1)))
        return _latest(_rows(work)) == _sums(EXPORTED_AT) and len(set(seen) - {-1}) >= 2

    wait_until(record_advanced, 120, "the first driver's snapshots of the first 300 rows", 0.5)
    assert seen == sorted(seen), f"the record's snapshotId went back: {seen}"
    # Restored and epochs run: the driver told the operator its pipeline runs (fenced).
    assert _status(api, name)["pipelineStarted"]["executionId"] == "exec-1"

    # An export-only snapshot requested the way the operator does.
    _patch_status(
        api,
        name,
        {"exportRequest": {"name": export, "requestId": "exec-1/export/1", "requestedAt": _now()}},
    )
    wait_until(lambda: _export_entry(api, name, export) is not None, 30, "the export entry")
    entry = _export_entry(api, name, export)
    assert entry is not None and entry["terminal"] is False
    assert datetime.fromisoformat(entry["createdAt"]).tzinfo is not None
    validation = validate_snapshot(store, export_map, entry["snapshotId"])
    assert validation.num_bytes == entry["numBytes"] > 0
    # Copied to the bucket once it validated; the copy is the export, as validation sees it.
    assert entry["durableLocation"] == (
        f"s3://{s3_bucket}/team-a/jobs/{export_map}/{entry['snapshotId']}"
    )
    bucket = S3SnapshotStore(s3.client(), s3_bucket, "team-a/jobs")
    assert validate_snapshot(bucket, export_map, entry["snapshotId"]) == validation
    # State is partitioned by spec.statePartitions; the driver-side chunk comes after them.
    state_chunks = {key.partition for key in validation.chunk_keys if key.operator == "sums"}
    assert max(state_chunks) == STATE_PARTITIONS, state_chunks
    job = _objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    assert validation.job_uid == job["metadata"]["uid"]
    _patch_status(api, name, {"exportRequest": None})  # as the operator's decide() does
    # The export never becomes the restore point.
    assert _record(api, name).get("exportedSnapshotName") is None

    # SUSPEND_GRACEFUL: a terminal snapshot, then exit TERMINATED with the record suspended.
    before_suspend = int(_record(api, name)["snapshotId"])
    _patch_status(
        api,
        name,
        {
            "termination": {
                "mode": "SUSPEND_GRACEFUL",
                "requestId": "exec-1/suspend",
                "requestedAt": _now(),
                "reason": "SuspendRequested",
            }
        },
    )
    assert drivers.wait(first) == DriverExit.TERMINATED, drivers.tail(first)
    suspended = _record(api, name)
    assert suspended["suspended"] is True
    assert int(suspended["snapshotId"]) > before_suspend

    # A second execution restores and runs to the end; the output is exact.
    _claim(api, name, "exec-2", 2)
    _allow(work, END)
    second = drivers.start(name, "exec-2")
    assert drivers.wait(second) == DriverExit.COMPLETED, drivers.tail(second)
    final = _record(api, name)
    assert int(final["snapshotId"]) > int(suspended["snapshotId"])
    assert final["suspended"] is False
    assert [e["name"] for e in _status(api, name)["exportedSnapshots"]] == [export]
    rows = _rows(work)
    assert _latest(rows) == _sums(END)
    assert len(rows) == len(set(rows)), "a row was published twice"
    assert len({(key, count) for key, count, _ in rows}) == len(rows), "replayed input"

    # The store loses the export; a new job started from it finds the durable copy, and its
    # first output continues the exported sums.
    store.discard(export_map, entry["snapshotId"])
    assert store.latest_snapshot_id(export_map) is None
    work_2 = tmp_path / "job-2"
    name_2 = _job(api, healthy_hazelcast, work_2, "exec-a")
    _allow(work_2, FENCED_AT)
    third = drivers.start(name_2, "exec-a", initial_snapshot=export, extra_env=durable_env)

    def caught_up() -> bool:
        drivers.alive(third)
        return _latest(_rows(work_2)) == _sums(FENCED_AT)

    wait_until(caught_up, 120, "the job started from the export to reach 450 rows", 0.5)
    exported_counts = _sums(EXPORTED_AT)
    rows_2 = _rows(work_2)
    for key, count, _ in rows_2:
        assert count > exported_counts[key][0], f"row {key=} {count=} ignores the export"
    assert int(_record(api, name_2)["snapshotId"]) >= 0
    assert "Copying initial snapshot from durable storage" in drivers.log(third)
    assert validate_snapshot(store, export_map, entry["snapshotId"]) == validation  # back

    # The operator starts another execution: the old driver is a zombie and must stop.
    _claim(api, name_2, "exec-b", 2)
    assert drivers.wait(third, 60) == DriverExit.FENCED, drivers.tail(third)
    assert _record(api, name_2)["ongoingSnapshotId"] >= 0


def test_a_missing_initial_snapshot_is_not_found(
    api: client.ApiClient, healthy_hazelcast: HazelcastCluster, drivers: Drivers, tmp_path: Path
) -> None:
    work = tmp_path / "job"
    name = _job(api, healthy_hazelcast, work, "exec-1")
    driver = drivers.start(name, "exec-1", initial_snapshot=f"never-{uuid.uuid4().hex[:6]}")
    assert drivers.wait(driver) == DriverExit.SNAPSHOT_NOT_FOUND, drivers.tail(driver)
    assert "does not exist" in drivers.tail(driver)
    assert _rows(work) == []


def test_cancel_with_export_lists_the_terminal_export(
    api: client.ApiClient,
    spark: SparkSession,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    tmp_path: Path,
) -> None:
    """CANCEL_GRACEFUL with exportName: the export is listed, terminal, before the driver ends.

    The driver runs in this process (the shared session saves a Spark start-up); the record
    and the export list are in a real SnapshotJob's status.
    """
    work = tmp_path / "job"
    name = _job(api, healthy_hazelcast, work, "exec-1")
    uid = _objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)[
        "metadata"
    ]["uid"]
    export = f"final-{uuid.uuid4().hex[:6]}"
    older = {
        "name": "older",
        "snapshotId": 9,
        "numBytes": 1,
        "createdAt": "2026-01-01T00:00:00Z",
        "terminal": False,
    }
    stale = {**older, "name": export}
    _patch_status(api, name, {"exportedSnapshots": [older, stale]})
    _allow(work, EXPORTED_AT)
    records = KubernetesRecordStore(_objects(api), NAMESPACE, name, "exec-1")

    def publish(exported: ExportedSnapshot) -> None:
        records.append_exported_snapshot(
            name=exported.name,
            snapshot_id=exported.snapshot_id,
            num_bytes=exported.num_bytes,
            created_at=exported.created_at,
            terminal=exported.terminal,
        )

    driver: Driver

    def poll() -> TerminationRequest | None:
        if driver.epochs < EXPORTED_AT // 150:
            return None
        return TerminationRequest(TerminationMode.CANCEL_GRACEFUL, export)

    settings = DriverSettings(
        job=JobIdentity(uid, NAMESPACE, 1),
        guarantee=ProcessingGuarantee.EXACTLY_ONCE,
        snapshot_interval_ms=10**9,  # only the terminal snapshot
        state_partitions=4,
        store=StoreAddress(
            tuple(n.address for n in healthy_hazelcast.nodes), healthy_hazelcast.cluster_name
        ),
        idle_sleep_s=0.05,
    )
    driver = Driver(
        spark,
        driver_pipeline.define_pipeline,
        _args(work),
        settings,
        records,
        store,
        poll_termination=poll,
        publish_export=publish,
    )
    assert driver.run() is DriverExit.TERMINATED

    record = _record(api, name)
    assert record["exportedSnapshotName"] == export
    entries = {e["name"]: e for e in _status(api, name)["exportedSnapshots"]}
    assert entries["older"] == older
    entry = entries[export]
    assert entry["terminal"] is True
    assert entry["snapshotId"] == record["snapshotId"] == 0
    validation = validate_snapshot(store, export_map_name(NAMESPACE, export), 0)
    assert entry["numBytes"] == validation.num_bytes > 0
    assert _latest(_rows(work)) == _sums(EXPORTED_AT)
