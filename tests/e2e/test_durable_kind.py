"""End to end: every Hazelcast member restarted at once, and a job goes on from its durable copy.

Why: the store keeps snapshots in its members' memory, so restarting all of them (a node-pool
upgrade, a region incident) loses every snapshot. Here the job copies its snapshots to an
S3-compatible server running as a Pod in the cluster (``examples/kubernetes/s3proxy.yaml``,
s3proxy from Maven Central in the project image). The job is suspended, so its terminal
snapshot is the restore point and has its copy. Then every member Pod is deleted at once; the
StatefulSet starts them again, empty. On resume, the new driver finds no validation record in
the store, copies the restore point back from the bucket (verified chunk by chunk) and goes
on. The append-only events table shows that no event was lost or repeated.

Restoring an older copy, which needs the user's consent, is tested against a real API server,
Hazelcast and s3proxy in ``tests/integration/test_durable_restore.py``.
"""

from __future__ import annotations

import pytest
import yaml

from tests.e2e.release import (
    CATCH_UP,
    CONTROL_PLANE_NODE,
    IMAGE,
    REPO_ROOT,
    SEQUENCE_SUM,
    UNENDING,
    Release,
    Step,
    patch_spec,
    sequence_sum_args,
    snapshot_id,
    suspend_with_exact_prefix,
    wait_for,
    wait_phase,
    wait_snapshot,
)

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]

S3_MANIFEST = REPO_ROOT / "examples" / "kubernetes" / "s3proxy.yaml"
MEMBERS = "app.kubernetes.io/component=hazelcast"


def _deploy_s3(release: Release) -> None:
    documents = [doc for doc in yaml.safe_load_all(S3_MANIFEST.read_text()) if doc]
    for doc in documents:
        if doc["kind"] == "StatefulSet":
            spec = doc["spec"]["template"]["spec"]
            spec |= CONTROL_PLANE_NODE
            # The e2e image is the project image plus the tests' pipelines.
            spec["containers"][0]["image"] = IMAGE
    release.apply(yaml.safe_dump_all(documents))
    release.kubectl("rollout", "status", "statefulset/s3proxy", "--timeout=300s", timeout=320)


def _copies(release: Release, uid: str) -> list[int]:
    """The snapshot ids of the job's periodic copies, as files in the server's volume."""
    # s3proxy's filesystem backend keeps an object under its key as a path.
    script = f"ls /var/lib/s3proxy/snapshots/e2e/__sj.copy.{uid} 2>/dev/null || true"
    out = release.kubectl("exec", "s3proxy-0", "--", "sh", "-c", script)
    return sorted(int(name) for name in out.split() if name.isdigit())


def test_a_suspended_job_goes_on_from_its_durable_copy_after_every_member_restarted(
    release: Release, postgres: str
) -> None:
    job = "durable"
    with Step("durable-s3-ready"):
        _deploy_s3(release)
    with Step("durable-first-copy"):
        release.apply_job(
            job,
            sequence_sum_args(postgres, job, UNENDING, rate=100, max_rows_per_epoch=CATCH_UP),
            pipeline=SEQUENCE_SUM,
            durableStorage={
                "bucket": "snapshots",
                "prefix": "e2e",
                "endpoint": "http://s3proxy:8080",
                "credentialsSecret": "snapshots-s3",
                "snapshotCopyIntervalSeconds": 10,
            },
        )
        running = wait_snapshot(release, job, 1, timeout=300)
        uid = running["metadata"]["uid"]
        wait_for(release, f"job={job} a periodic durable copy", lambda: _copies(release, uid), 120)

    with Step("durable-suspended"):
        patch_spec(release, job, {"suspend": True})
        suspended = wait_phase(release, job, {"SUSPENDED"}, timeout=240)
        restore_point = snapshot_id(suspended)
        # The terminal snapshot was copied, and only the newest copy is kept.
        assert _copies(release, uid) == [restore_point]

    with Step("durable-store-restarted"):
        before = {p["metadata"]["uid"] for p in release.pods(MEMBERS)}
        release.kubectl("delete", "pod", "-l", MEMBERS, "--grace-period=0", "--force")
        wait_for(
            release,
            "three new members, Ready",
            lambda: (
                len(pods := release.pods(MEMBERS)) == 3
                and not {p["metadata"]["uid"] for p in pods} & before
                and all(
                    any(
                        c["type"] == "Ready" and c["status"] == "True"
                        for c in p["status"].get("conditions") or []
                    )
                    for p in pods
                )
            ),
            timeout=300,
        )

    with Step("durable-resumed"):
        patch_spec(release, job, {"suspend": False})
        resumed = wait_snapshot(release, job, restore_point, timeout=300)
        pod = resumed["status"]["execution"]["driverPod"]
        assert release.restored_snapshot(pod) == restore_point
        log = release.kubectl("logs", pod, "-c", "driver")
        # The store had lost it: the restore point came back from the bucket.
        assert f"Copying restore point from durable storage map=__sj.b1.snapshot.{uid}." in log, (
            log[-3000:]
        )
        assert f"snapshotId={restore_point} copySnapshotId={restore_point} older=False" in log

    with Step("durable-exact"):
        committed = suspend_with_exact_prefix(release, job)
    assert committed > 0
