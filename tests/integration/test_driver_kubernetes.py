"""The driver as a process in Kubernetes mode, against a real API server and Hazelcast.

``python -m spark_runtime run --kubernetes`` reads its SnapshotJob, keeps the execution record
in the job's status and serves what the operator writes there: export requests, termination
requests and new executions (fencing). No operator runs here; the test writes the status the
way the operator does and checks what the driver writes back and what reaches Hazelcast and
the sink. The pipeline (:mod:`tests.integration.driver_pipeline`) reads a sequence only as far
as the test allows, so exports hold a known state and the output can be checked exactly.
"""

from __future__ import annotations

import uuid
from datetime import datetime
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
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract.environment import (
    ENV_DURABLE_PREFIX,
    ENV_DURABLE_REGION,
    ENV_INITIAL_SNAPSHOT_ID,
    ENV_INITIAL_SNAPSHOT_JOB_UID,
)
from snapshotjob_contract.exits import ENDED_AS_ASKED_PREFIX, DriverExit
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from snapshotjob_contract.spec import ProcessingGuarantee
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import Driver, DriverSettings
from spark_runtime.kube_record_store import KubernetesRecordStore
from testbed.hazelcast import HazelcastCluster
from testbed.processes import wait_until
from testbed.s3 import S3Server
from tests.integration import driver_pipeline
from tests.integration.kube_driver_helpers import (
    END,
    EXPORTED_AT,
    NAMESPACE,
    STATE_PARTITIONS,
    Drivers,
    allow,
    api,
    claim_execution,
    create_driver_job,
    custom_objects,
    drivers,
    durable_storage_env,
    execution_record,
    expected_sums,
    job_status,
    latest_per_key,
    patch_job_status,
    pipeline_args,
    published_rows,
    utc_now,
)
from tests.integration.operator_fixtures import store

pytestmark = [pytest.mark.integration, pytest.mark.kube]

__all__ = ["api", "drivers", "store"]

FENCED_AT = 450  # the second job's input is held here while it is fenced


def _export_entry(api: client.ApiClient, name: str, export: str) -> dict[str, Any] | None:
    entries = job_status(api, name).get("exportedSnapshots") or []
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
    name = create_driver_job(api, healthy_hazelcast, work, "exec-1")
    allow(work, EXPORTED_AT)
    # The kubelet creates the container's termination message file; here the test does.
    termination_log = tmp_path / "termination-log"
    termination_log.touch()
    first = drivers.start(
        name,
        "exec-1",
        extra_env={**durable_env, "SJ_TERMINATION_MESSAGE_PATH": str(termination_log)},
    )

    # The driver snapshots every second and keeps the record in the job's status.
    seen: list[int] = []

    def record_advanced() -> bool:
        drivers.alive(first)
        seen.append(int(execution_record(api, name).get("snapshotId", -1)))
        return (
            latest_per_key(published_rows(work)) == expected_sums(EXPORTED_AT)
            and len(set(seen) - {-1}) >= 2
        )

    wait_until(record_advanced, 120, "the first driver's snapshots of the first 300 rows", 0.5)
    assert seen == sorted(seen), f"the record's snapshotId went back: {seen}"
    # Restored and epochs run: the driver told the operator its pipeline runs (fenced).
    assert job_status(api, name)["pipelineStarted"]["executionId"] == "exec-1"

    # An export-only snapshot requested the way the operator does.
    patch_job_status(
        api,
        name,
        {
            "exportRequest": {
                "name": export,
                "requestId": "exec-1/export/1",
                "requestedAt": utc_now(),
            }
        },
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
    job = custom_objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    assert validation.job_uid == job["metadata"]["uid"]
    patch_job_status(api, name, {"exportRequest": None})  # as the operator's decide() does
    # The export never becomes the restore point.
    assert execution_record(api, name).get("exportedSnapshotName") is None

    # SUSPEND_GRACEFUL: a terminal snapshot, the record suspended, then TERMINATED: reported
    # as 64 and in the termination message, while the process exits 0 (not a failure).
    before_suspend = int(execution_record(api, name)["snapshotId"])
    patch_job_status(
        api,
        name,
        {
            "termination": {
                "mode": "SUSPEND_GRACEFUL",
                "requestId": "exec-1/suspend",
                "requestedAt": utc_now(),
                "reason": "SuspendRequested",
            }
        },
    )
    assert drivers.wait(first) == 0, drivers.tail(first)
    suspended = execution_record(api, name)
    assert suspended["suspended"] is True
    assert int(suspended["snapshotId"]) > before_suspend
    ended_as_asked = (
        f"{ENDED_AS_ASKED_PREFIX}mode=SUSPEND_GRACEFUL snapshotId={suspended['snapshotId']}"
    )
    assert termination_log.read_text() == ended_as_asked
    reported = job_status(api, name)["driverExit"]
    assert reported["executionId"] == "exec-1"
    assert reported["exitCode"] == DriverExit.TERMINATED
    assert reported["message"] == ended_as_asked

    # A second execution restores and runs to the end; the output is exact.
    claim_execution(api, name, "exec-2", 2)
    allow(work, END)
    second = drivers.start(name, "exec-2")
    assert drivers.wait(second) == DriverExit.COMPLETED, drivers.tail(second)
    final = execution_record(api, name)
    assert int(final["snapshotId"]) > int(suspended["snapshotId"])
    assert final["suspended"] is False
    assert [e["name"] for e in job_status(api, name)["exportedSnapshots"]] == [export]
    rows = published_rows(work)
    assert latest_per_key(rows) == expected_sums(END)
    assert len(rows) == len(set(rows)), "a row was published twice"
    assert len({(key, count) for key, count, _ in rows}) == len(rows), "replayed input"

    # The store loses the export; a new job started from it finds the durable copy, and its
    # first output continues the exported sums.
    store.discard(export_map, entry["snapshotId"])
    assert store.latest_snapshot_id(export_map) is None
    work_2 = tmp_path / "job-2"
    name_2 = create_driver_job(api, healthy_hazelcast, work_2, "exec-a")
    allow(work_2, FENCED_AT)
    # With the export's identity, as the operator hands it from the SnapshotJobExport: the
    # restore takes exactly that snapshot of that job (snapshot_protocol/export_names.py).
    identity_env = {
        ENV_INITIAL_SNAPSHOT_JOB_UID: validation.job_uid,
        ENV_INITIAL_SNAPSHOT_ID: str(entry["snapshotId"]),
    }
    third = drivers.start(
        name_2, "exec-a", initial_snapshot=export, extra_env={**durable_env, **identity_env}
    )

    def caught_up() -> bool:
        drivers.alive(third)
        return latest_per_key(published_rows(work_2)) == expected_sums(FENCED_AT)

    wait_until(caught_up, 120, "the job started from the export to reach 450 rows", 0.5)
    exported_counts = expected_sums(EXPORTED_AT)
    rows_2 = published_rows(work_2)
    for key, count, _ in rows_2:
        assert count > exported_counts[key][0], f"row {key=} {count=} ignores the export"
    assert int(execution_record(api, name_2)["snapshotId"]) >= 0
    assert "Copying initial snapshot from durable storage" in drivers.log(third)
    assert f"snapshotId={entry['snapshotId']} jobUid={validation.job_uid}" in drivers.log(third)
    assert validate_snapshot(store, export_map, entry["snapshotId"]) == validation  # back

    # The operator starts another execution: the old driver is a zombie and must stop.
    claim_execution(api, name_2, "exec-b", 2)
    assert drivers.wait(third, 60) == DriverExit.FENCED, drivers.tail(third)
    assert execution_record(api, name_2)["ongoingSnapshotId"] >= 0


def test_a_missing_initial_snapshot_is_not_found(
    api: client.ApiClient, healthy_hazelcast: HazelcastCluster, drivers: Drivers, tmp_path: Path
) -> None:
    work = tmp_path / "job"
    name = create_driver_job(api, healthy_hazelcast, work, "exec-1")
    driver = drivers.start(name, "exec-1", initial_snapshot=f"never-{uuid.uuid4().hex[:6]}")
    assert drivers.wait(driver) == DriverExit.SNAPSHOT_NOT_FOUND, drivers.tail(driver)
    assert "does not exist" in drivers.tail(driver)
    assert published_rows(work) == []


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
    name = create_driver_job(api, healthy_hazelcast, work, "exec-1")
    uid = custom_objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)[
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
    patch_job_status(api, name, {"exportedSnapshots": [older, stale]})
    allow(work, EXPORTED_AT)
    records = KubernetesRecordStore(custom_objects(api), NAMESPACE, name, "exec-1")

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
        pipeline_args(work),
        settings,
        records,
        store,
        poll_termination=poll,
        publish_export=publish,
    )
    assert driver.run() is DriverExit.TERMINATED

    record = execution_record(api, name)
    assert record["exportedSnapshotName"] == export
    entries = {e["name"]: e for e in job_status(api, name)["exportedSnapshots"]}
    assert entries["older"] == older
    entry = entries[export]
    assert entry["terminal"] is True
    assert entry["snapshotId"] == record["snapshotId"] == 0
    validation = validate_snapshot(store, export_map_name(NAMESPACE, export), 0)
    assert entry["numBytes"] == validation.num_bytes > 0
    assert latest_per_key(published_rows(work)) == expected_sums(EXPORTED_AT)
