"""End to end with executor Pods: the store rolled under a running job, suspend, export, resume,
an upgrade through a terminal snapshot, and a new job started from the export.

Why one job for all of it: each of these is a boundary the job's state must cross intact, and
one paced job (``examples/sequence_sum.py``, ``rows_per_second``) whose append-only events
table shows every duplicate as an extra row checks all of them at once, in about the time one
of them would take. PostgreSQL runs in the cluster (``examples/kubernetes/postgres.yaml``).
"""

from __future__ import annotations

import json
import time
from typing import Any

import pytest

from snapshotjob_contract.observability import (
    DRIVER_EPOCH_DURATION,
    DRIVER_LAST_SNAPSHOT_TIME,
    DRIVER_METRICS_PORT,
    DRIVER_SNAPSHOT_CHUNKS,
    DRIVER_SNAPSHOT_FAILURES,
    DRIVER_SNAPSHOT_INTERVAL,
    DRIVER_SNAPSHOT_SIZE,
    DRIVER_SNAPSHOTS,
    OPERATOR_EXECUTIONS_STARTED,
    OPERATOR_JOBS,
    OPERATOR_METRICS_PORT,
    OPERATOR_STORE_CLUSTER_SAFE,
    OPERATOR_STORE_MEMBERS_REACHABLE,
)
from testbed import scratch
from tests.e2e.release import (
    CATCH_UP,
    DSN_FROM_SECRET,
    SECRET_DSN,
    SEQUENCE_SUM,
    SUM_KEYS,
    Release,
    Step,
    assert_exactly_once,
    attempt,
    parse_metrics,
    patch_spec,
    psql,
    sample,
    sequence_sum_args,
    snapshot_id,
    wait_for,
    wait_phase,
    wait_snapshot,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1500)]

EXPORT = "lifecycle-export"
LIVE_EXPORT = "lifecycle-live-export"
FINISHING_RATE = 2000
"""The pace the upgrade sets, and the copy's: faster than a job can read, so it reads to its
end as fast as its epochs allow."""


def _degraded(job: dict[str, Any]) -> tuple[str, str]:
    """The job's Degraded condition: its reason and message (empty if it has none)."""
    for condition in (job.get("status") or {}).get("conditions") or ():
        if condition["type"] == "Degraded":
            return str(condition.get("reason", "")), str(condition.get("message", ""))
    return "", ""


def _members(release: Release) -> list[dict[str, Any]]:
    return release.pods("app.kubernetes.io/component=hazelcast")


def _ready(pod: dict[str, Any]) -> bool:
    conditions = pod["status"].get("conditions") or []
    return any(c["type"] == "Ready" and c["status"] == "True" for c in conditions) and not pod[
        "metadata"
    ].get("deletionTimestamp")


@pytest.mark.usefixtures("postgres")
def test_rollout_suspend_export_resume_upgrade_and_a_job_from_the_export(
    release: Release,
) -> None:
    job, end = "lifecycle", 15_000
    with Step("lifecycle-first-snapshot"):
        release.apply_job(
            job,
            # The DSN comes from a Secret through the pod template, not in the spec's text.
            sequence_sum_args(SECRET_DSN, job, end, rate=50, max_rows_per_epoch=CATCH_UP),
            pipeline=SEQUENCE_SUM,
            podTemplate=DSN_FROM_SECRET,
        )
        running = wait_snapshot(release, job, 1, timeout=300)

    with Step("lifecycle-metrics"):
        _check_metrics(release, job)

    with Step("lifecycle-store-rollout"):
        # A new member template (the chart's G1 options kept): the operator replaces the
        # members one at a time.
        release.upgrade(
            "hazelcast.javaOpts=-XX:+UseG1GC -XX:G1HeapRegionSize=1m -Dsnapshotjob.e2e.rollout=1"
        )
        statefulset = f"{release.fullname}-hazelcast"
        target = release.kubectl(
            "get", "statefulset", statefulset, "-o", "jsonpath={.status.updateRevision}"
        )
        fewest_ready = 3
        deadline = time.monotonic() + 600
        while True:
            members = _members(release)
            fewest_ready = min(fewest_ready, sum(_ready(p) for p in members))
            updated = [
                p
                for p in members
                if p["metadata"]["labels"].get("controller-revision-hash") == target
            ]
            if len(updated) == 3 and all(_ready(p) for p in members):
                break
            assert time.monotonic() < deadline, f"store rollout stuck: {release.diagnostics()}"
            time.sleep(1)
        # One at a time: never two members down together, whatever the job was doing.
        assert fewest_ready >= 2, fewest_ready
        after_rollout = wait_snapshot(release, job, snapshot_id(running) + 2, timeout=300)

    with Step("lifecycle-suspended"):
        patch_spec(release, job, {"suspend": True})
        suspended = wait_phase(release, job, {"SUSPENDED"}, timeout=240)
        assert snapshot_id(suspended) > snapshot_id(after_rollout)
        ((committed,),) = psql(release, "SELECT count(*) FROM lifecycle_events")
        offset = int(committed)
        assert 0 < offset < end, offset

    with Step("lifecycle-exported"):
        patch_spec(release, job, {"exportSnapshot": {"name": EXPORT}})
        exported = wait_for(
            release,
            f"job={job} export {EXPORT}",
            lambda: next(
                (
                    e
                    for e in ((release.job(job) or {}).get("status") or {}).get(
                        "exportedSnapshots", []
                    )
                    if e["name"] == EXPORT
                ),
                None,
            ),
            timeout=240,
        )
        # Exported from the terminal snapshot, which is the restore point.
        assert exported["snapshotId"] == snapshot_id(suspended), exported
        # The export as its own object, created by the operator (chart CRD and RBAC on kind).
        recorded = _wait_export(release, EXPORT, "Completed")
        assert recorded["spec"]["origin"] == "ExportSnapshot", recorded
        assert recorded["status"]["snapshotId"] == exported["snapshotId"], recorded

    with Step("lifecycle-resumed"):
        patch_spec(release, job, {"suspend": False})
        resumed = wait_snapshot(release, job, snapshot_id(suspended), timeout=300)
        assert attempt(resumed) == attempt(suspended) + 1
        pod = resumed["status"]["execution"]["driverPod"]
        assert release.restored_snapshot(pod) == snapshot_id(suspended)

    with Step("lifecycle-export-object"):
        # Asked for by a SnapshotJobExport, as a GitOps tool would: the running driver takes an
        # export-only snapshot and the job keeps running.
        release.apply(
            {
                "apiVersion": "snapshotjob.io/v1alpha1",
                "kind": "SnapshotJobExport",
                "metadata": {"name": LIVE_EXPORT, "namespace": release.namespace},
                "spec": {"jobName": job},
            }
        )
        live = _wait_export(release, LIVE_EXPORT, "Completed")
        assert live["status"]["snapshotId"] >= snapshot_id(suspended), live
        assert live["status"]["terminal"] is False, live
        assert (release.job(job) or {})["status"]["phase"] == "RUNNING"

    with Step("lifecycle-upgrade-refused"):
        # A pipeline whose state differs (other operators): before the running execution is
        # asked to stop, a Pod of the image checks the restore point with the new pipeline
        # (snapshot validate --pipeline, exit 78), the rollout is refused, and the execution
        # goes on snapshotting. Reverting the spec leaves nothing to roll out.
        before = release.job(job) or {}
        patch_spec(
            release,
            job,
            {"pipeline": {"module": "e2e_pipelines.sequence_map_sum", "args": {"map": job}}},
        )
        refused = wait_for(
            release,
            f"job={job} rollout refused",
            lambda: (
                obj if (obj := release.job(job)) and _degraded(obj)[0] == "UpgradeRefused" else None
            ),
            timeout=240,
        )
        message = _degraded(refused)[1]
        assert "exitCode=78" in message and "snapshotId=" in message, message
        assert attempt(refused) == attempt(before), refused["status"]
        wait_snapshot(release, job, snapshot_id(refused))
        patch_spec(release, job, {"pipeline": {"module": SEQUENCE_SUM, "args": {"map": None}}})
        wait_for(
            release,
            f"job={job} no longer Degraded",
            lambda: _degraded(release.job(job) or {})[0] == "AsExpected",
            timeout=60,
        )
        assert not release.pods("app.kubernetes.io/component=upgrade-check")

    with Step("lifecycle-upgraded"):
        # statePartitions 8 -> 4 (upgradeMode: snapshot): a terminal snapshot, then the keyed
        # state re-partitioned on restore. The same change raises the pace, as a user speeding
        # a job up would: the paced offset (rows read, start time) is restored as it was and
        # the sequence catches up to the new pace, CATCH_UP rows an epoch, so the job then
        # ends in a few epochs instead of after the rest of its paced minutes.
        before = release.job(job) or {}
        patch_spec(
            release,
            job,
            {"statePartitions": 4, "pipeline": {"args": {"rows_per_second": FINISHING_RATE}}},
        )
        upgraded = wait_for(
            release,
            f"job={job} upgraded",
            lambda: (
                obj
                if (obj := release.job(job)) is not None
                and attempt(obj) > attempt(before)
                and obj["status"].get("phase") == "RUNNING"
                and obj["status"]["execution"].get("statePartitions") == 4
                else None
            ),
            timeout=300,
        )
        restored = release.restored_snapshot(upgraded["status"]["execution"]["driverPod"])
        assert restored > snapshot_id(before), (restored, snapshot_id(before))
        # Checked first by a Pod of the image, which is gone once the rollout went on.
        reasons = release.kubectl(
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={job}",
            "-o",
            "jsonpath={.items[*].reason}",
        )
        assert "UpgradeCheckStarted" in reasons.split(), reasons
        assert not release.pods("app.kubernetes.io/component=upgrade-check")

    with Step("lifecycle-completed"):
        wait_phase(release, job, {"COMPLETED"}, timeout=600)
    assert_exactly_once(release, job, end)

    copy = "lifecycle-copy"
    with Step("lifecycle-copy-completed"):
        # At the finishing pace: the copy reads the rest of the sequence at once, instead of
        # waiting for the paced minutes the export's offset has not reached yet.
        release.apply_job(
            copy,
            sequence_sum_args(SECRET_DSN, copy, end, rate=FINISHING_RATE),
            pipeline=SEQUENCE_SUM,
            initialSnapshotName=EXPORT,
            podTemplate=DSN_FROM_SECRET,
        )
        done = wait_phase(release, copy, {"COMPLETED"}, timeout=600)
    assert snapshot_id(done) > 0
    # The copy went on from the export: the events after its offset, each once, and the sums
    # of the whole sequence because the running sums came with the state.
    ((rows, distinct, low, high),) = psql(
        release, "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM lifecycle_copy_events"
    )
    assert (int(rows), int(distinct), int(low), int(high)) == (
        end - offset,
        end - offset,
        offset,
        end - 1,
    )
    sums = {
        int(key): (int(total), int(count))
        for key, total, count in psql(release, "SELECT key, total, count FROM lifecycle_copy_sums")
    }
    assert sums == {
        key: (sum(range(key, end, SUM_KEYS)), len(range(key, end, SUM_KEYS)))
        for key in range(SUM_KEYS)
    }


def _wait_export(release: Release, name: str, phase: str) -> dict[str, Any]:
    """Waits until the SnapshotJobExport has the phase; returns it."""

    def found() -> dict[str, Any] | None:
        out = release.kubectl("get", "snapshotjobexport", name, "-o", "json", "--ignore-not-found")
        export: dict[str, Any] | None = json.loads(out) if out.strip() else None
        if export is not None and (export.get("status") or {}).get("phase") == phase:
            return export
        return None

    result: dict[str, Any] = wait_for(release, f"export {name} {phase}", found, timeout=240)
    return result


METRICS_DIR = scratch.lasting_root() / "snapshotjob-e2e-metrics"
"""Where the scrapes of the operator and the driver are kept for a look after the run."""


def _check_metrics(release: Release, job: str) -> None:
    """Scrapes the driver and the operator through the API server and checks the figures
    against the job's status: snapshots counted as the execution record numbers them."""
    driver = release.current_driver(job)["metadata"]["name"]

    def last_attempt(obj: dict[str, Any]) -> int:
        """The id of the last snapshot attempt that ended, successful or not."""
        record = (obj.get("status") or {}).get("executionRecord") or {}
        return int((record.get("snapshotStats") or {}).get("snapshotId", -1))

    for _ in range(20):
        before = release.job(job) or {}
        driver_text = release.scrape(driver, DRIVER_METRICS_PORT)
        after = release.job(job) or {}
        if last_attempt(before) == last_attempt(after):
            break
        time.sleep(0.5)  # A snapshot ended between the reads: the figures may differ.
    else:
        raise AssertionError("a snapshot ended during every scrape")
    samples = parse_metrics(driver_text)
    record = (after.get("status") or {}).get("executionRecord") or {}
    taken = sample(samples, DRIVER_SNAPSHOTS.name) or 0.0
    failures = sum(
        value for (name, _), value in samples.items() if name == DRIVER_SNAPSHOT_FAILURES.name
    )
    # The first execution started empty, and no export has been taken yet: snapshot ids
    # number this execution's automatic snapshots from 0, the successful and the failed.
    assert taken >= 1
    assert taken + failures == last_attempt(after) + 1, (taken, failures, record)
    if last_attempt(after) == snapshot_id(after):
        stats = record["snapshotStats"]
        assert sample(samples, DRIVER_SNAPSHOT_SIZE.name) == stats["numBytes"]
        assert sample(samples, DRIVER_SNAPSHOT_CHUNKS.name) == stats["numChunks"]
    assert (sample(samples, DRIVER_LAST_SNAPSHOT_TIME.name) or 0) > time.time() - 120
    assert sample(samples, DRIVER_SNAPSHOT_INTERVAL.name) == 1
    assert (sample(samples, f"{DRIVER_EPOCH_DURATION.name}_count") or 0) >= 1

    operators = release.pods("app.kubernetes.io/component=operator")
    # Other modules' jobs may still run in this namespace (one left by a failed test, say):
    # the gauge is checked against the API's count, read before and after the scrapes.
    for _ in range(20):
        running = release.jobs_in_phase("RUNNING")
        scrapes = {
            pod["metadata"]["name"]: release.scrape(pod["metadata"]["name"], OPERATOR_METRICS_PORT)
            for pod in operators
        }
        if release.jobs_in_phase("RUNNING") == running:
            break
        time.sleep(0.5)  # A job changed phase between the reads.
    else:
        raise AssertionError("a job changed phase during every scrape")
    assert job in running
    # With several replicas only the one that works (kopf peering) supervises jobs.
    working = max(
        scrapes,
        key=lambda name: (
            sample(parse_metrics(scrapes[name]), OPERATOR_JOBS.name, phase="RUNNING") or 0
        ),
    )
    operator = parse_metrics(scrapes[working])
    assert sample(operator, OPERATOR_JOBS.name, phase="RUNNING") == len(running), running
    assert (sample(operator, OPERATOR_EXECUTIONS_STARTED.name) or 0) >= 1
    cluster = "snapshotjob"
    assert sample(operator, OPERATOR_STORE_CLUSTER_SAFE.name, cluster=cluster) == 1
    assert sample(operator, OPERATOR_STORE_MEMBERS_REACHABLE.name, cluster=cluster) == 3
    METRICS_DIR.mkdir(exist_ok=True)
    (METRICS_DIR / "driver.txt").write_text(driver_text)
    (METRICS_DIR / "operator.txt").write_text(scrapes[working])
