"""A job survives the loss of every snapshot in the store, from its durable copy, exactly once.

The driver runs as a process in Kubernetes mode (real API server, Hazelcast and s3proxy) with
the environment the operator gives a driver Pod, copying its automatic snapshot to the bucket
(``SJ_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS``). The store's loss is the job's snapshot maps
emptied while the driver is dead; the execution record, in the job's status, and the sinks
outlive it, as they do when Hazelcast's StatefulSet is re-created (tested on kind). Every
number read is also appended to an events sink, so a lost or repeated event shows.

No operator runs here: the test writes the status the way the operator does (as
``test_driver_kubernetes.py`` does, with the helpers of ``kube_driver_helpers.py``); the
operator's handling of the exit code is covered by the decision's tests.
"""

from __future__ import annotations

import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshot_store.s3 import S3SnapshotStore
from snapshotjob_contract.environment import (
    ENV_DURABLE_RESTORE,
    ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS,
)
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.record import durable_copy_map_name, snapshot_map_name
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from testbed.hazelcast import HazelcastCluster
from testbed.processes import wait_until
from testbed.s3 import S3Server
from tests.integration.kube_driver_helpers import (
    END,
    EXPORTED_AT,
    NAMESPACE,
    Drivers,
    allow,
    api,
    claim_execution,
    committed_events,
    create_driver_job,
    custom_objects,
    drivers,
    durable_storage_env,
    execution_record,
    expected_sums,
    latest_per_key,
    published_rows,
)
from tests.integration.operator_fixtures import store

pytestmark = [pytest.mark.integration, pytest.mark.kube]

__all__ = ["api", "drivers", "store"]


def _env(s3: S3Server, bucket: str, interval: str, **extra: str) -> dict[str, str]:
    return durable_storage_env(
        s3, bucket, **{ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS: interval, **extra}
    )


def _uid(api: client.ApiClient, name: str) -> str:
    job = custom_objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    return str(job["metadata"]["uid"])


def _with_events(api: client.ApiClient, name: str, work: Path) -> None:
    """Adds the append-only events sink to the job's pipeline."""
    job = custom_objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    args = {**job["spec"]["pipeline"]["args"], "events_out": str(work / "events")}
    custom_objects(api).patch_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name, {"spec": {"pipeline": {"args": args}}}
    )


def _lose_the_store(store: HazelcastSnapshotStore, uid: str) -> None:
    for index in (0, 1):
        store.discard(snapshot_map_name(uid, index, 1), 10**9)
        assert store.latest_snapshot_id(snapshot_map_name(uid, index, 1)) is None


def _start_held(
    api: client.ApiClient,
    cluster: HazelcastCluster,
    drivers: Drivers,
    work: Path,
    env: dict[str, str],
) -> tuple[str, Any]:
    """A job that read the first 300 numbers and published them, its input held there."""
    name = create_driver_job(api, cluster, work, "exec-1")
    _with_events(api, name, work)
    allow(work, EXPORTED_AT)
    driver = drivers.start(name, "exec-1", extra_env=env)

    def published() -> bool:
        drivers.alive(driver)
        return latest_per_key(published_rows(work)) == expected_sums(EXPORTED_AT)

    wait_until(published, 120, "the first 300 numbers published", 0.5)
    return name, driver


def test_a_copy_of_the_restore_point_replaces_the_lost_store_exactly_once(
    api: client.ApiClient,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    s3: S3Server,
    s3_bucket: str,
    drivers: Drivers,
    tmp_path: Path,
) -> None:
    bucket = S3SnapshotStore(s3.client(), s3_bucket)
    env = _env(s3, s3_bucket, "0.001")  # every snapshot copied
    work = tmp_path / "job"
    name, first = _start_held(api, healthy_hazelcast, drivers, work, env)
    copies = durable_copy_map_name(_uid(api, name))

    # Freeze the driver where the newest copy is of the record's snapshot, then kill it.
    for _ in range(40):
        first.send_signal(signal.SIGSTOP)
        record_id = int(execution_record(api, name).get("snapshotId", -1))
        if record_id >= 0 and bucket.latest_snapshot_id(copies) == record_id:
            break
        first.send_signal(signal.SIGCONT)
        time.sleep(0.25)
    else:
        pytest.fail(f"the copy never caught up with the record:\n{drivers.tail(first)}")
    first.kill()
    first.wait()
    _lose_the_store(store, _uid(api, name))

    claim_execution(api, name, "exec-2", 2)
    allow(work, END)
    second = drivers.start(name, "exec-2", extra_env=env)
    assert drivers.wait(second) == DriverExit.COMPLETED, drivers.tail(second)

    log = drivers.log(second)
    assert "Copying restore point from durable storage" in log, drivers.tail(second)
    assert "older=False" in log
    events = committed_events(work)
    assert sorted(events) == list(range(END)), Counter(events).most_common(3)
    assert latest_per_key(published_rows(work)) == expected_sums(END)


def test_an_older_copy_waits_for_consent_then_repeats_exactly_what_it_announced(
    api: client.ApiClient,
    healthy_hazelcast: HazelcastCluster,
    store: HazelcastSnapshotStore,
    s3: S3Server,
    s3_bucket: str,
    drivers: Drivers,
    tmp_path: Path,
) -> None:
    bucket = S3SnapshotStore(s3.client(), s3_bucket)
    env = _env(s3, s3_bucket, "3600")  # only the first snapshot is copied
    work = tmp_path / "job"
    name, first = _start_held(api, healthy_hazelcast, drivers, work, env)
    copies = durable_copy_map_name(_uid(api, name))
    copy_id = bucket.latest_snapshot_id(copies)
    assert copy_id is not None
    wait_until(
        lambda: int(execution_record(api, name).get("snapshotId", -1)) > copy_id,
        30,
        "a snapshot newer than the copy",
    )
    first.kill()
    first.wait()
    record_id = int(execution_record(api, name)["snapshotId"])
    published_before = committed_events(work)
    _lose_the_store(store, _uid(api, name))

    # Without consent: the job stops, naming both ids; nothing is restored or written.
    claim_execution(api, name, "exec-2", 2)
    allow(work, END)
    second = drivers.start(name, "exec-2", extra_env=env)
    assert drivers.wait(second) == DriverExit.RESTORE_NEEDS_CONSENT, drivers.tail(second)
    message = drivers.tail(second)
    assert f"The store lost the restore point, snapshot {record_id}" in message
    assert f"is of the older snapshot {copy_id}" in message
    assert f"acceptSnapshotId: {copy_id}, insteadOfSnapshotId: {record_id}" in message
    assert committed_events(work) == published_before

    # With consent to exactly this pair (consent to any other pair is none: the protocol's
    # unit tests), the copy is restored and the job runs to the end.
    claim_execution(api, name, "exec-3", 3)
    accepted = _env(s3, s3_bucket, "3600", **{ENV_DURABLE_RESTORE: f"{copy_id}:{record_id}"})
    third = drivers.start(name, "exec-3", extra_env=accepted)
    assert drivers.wait(third) == DriverExit.COMPLETED, drivers.tail(third)
    assert f"copySnapshotId={copy_id} older=True" in drivers.log(third)

    events = committed_events(work)
    counts = Counter(events)
    assert set(counts) == set(range(END)), "an event was lost"
    repeated = sorted(value for value, count in counts.items() if count > 1)
    # What the condition announced: the input after the copy, up to the lost restore point,
    # processed and written again; nothing else.
    assert repeated, "restoring the older copy repeated nothing"
    assert max(counts.values()) == 2
    assert max(repeated) < EXPORTED_AT
    assert repeated == list(range(repeated[0], EXPORTED_AT)), repeated[:5]
    assert latest_per_key(published_rows(work)) == expected_sums(END)
