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

from tests.e2e.release import (
    CATCH_UP,
    CHART,
    DSN_FROM_SECRET,
    SECRET_DSN,
    SEQUENCE_SUM,
    SUM_KEYS,
    Release,
    Step,
    assert_exactly_once,
    attempt,
    patch_spec,
    psql,
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

    with Step("lifecycle-store-rollout"):
        # A new member template: the operator replaces the members one at a time.
        release.cluster.helm(
            "upgrade",
            release.name,
            str(CHART),
            "--namespace",
            release.namespace,
            "--reuse-values",
            "--set",
            "hazelcast.javaOpts=-Dsnapshotjob.e2e.rollout=1",
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
