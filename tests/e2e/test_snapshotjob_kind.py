"""End to end on a real cluster: Helm installs the chart into kind, SnapshotJobs run to the end.

Why this test exists: every other tier stops at a boundary (the decision function, a fake
driver, a control plane without kubelet). Here the project image (built locally by
``hack/images/build.sh`` and pulled from the test bed's registry with a pull Secret, the chart
installed from there too) runs the operator, three Hazelcast members and the
Spark drivers the operator creates and the executor Pods the drivers create, spread over the
cluster's worker nodes, so the chart, the image, RBAC, DNS discovery, the driver's status
writes and the snapshot protocol meet for real.

The pipeline (``tests/e2e/pipelines/sequence_map_sum.py``) sums a bounded sequence per key
into a map of the installation's Hazelcast cluster; its exact result is known in closed form
and is read back with ``kubectl exec`` into a member (the members run the same image, which
has the Python client). The tests share the session's Helm release (``conftest.py``) and
run in file order: complete (with the drivers' RBAC made by the chart), ``helm test`` and
JSON logs, a wrong pull Secret, a missing snapshot key Secret, delete, uninstall, after the
failure tests of ``test_executors_kind.py`` and the suspend/export/resume/upgrade test of
``test_lifecycle_kind.py``. Each step's duration is printed at the end of the session
(``E2E timing ...`` lines).
"""

from __future__ import annotations

import json
import re
from typing import Any

import pytest

from snapshotjob_contract.spark import DRIVER_SNAPSHOT_MAX_BYTES_CONF
from testbed.registry import Registry
from tests.e2e.pipelines.sequence_map_sum import expected_sums
from tests.e2e.release import Release, Step, snapshot_id, wait_for, wait_phase

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

KEYS = 5
TEXT_LOG_LINE = re.compile(
    r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d{3} (DEBUG|INFO|WARNING|ERROR) ", re.M
)
"""A line in the text format (``snapshotjob_contract.logs.TEXT_FORMAT``): none may be left
once the format is JSON."""
CHUNK_WRITERS = re.compile(r"Snapshot chunks written .*writers=(\S+)")


def test_job_runs_to_completion_with_exact_output(release: Release) -> None:
    """``master: k8s``: two executor Pods on two nodes, owned by the driver, run the epochs.

    Its five keys would be snapshotted by the driver (a state under
    ``driverSnapshotMaxBytes``); the setting 0 makes the executors write them, which is the
    path this test checks across nodes. The driver's path is checked against the
    executors' in ``tests/integration/test_runtime_restore.py``.

    The release runs with ``jobs.rbac.precreate`` for this job alone: the chart's driver
    account and Role serve it, the operator creates no RBAC and holds no right to; every
    other cluster test runs the default, each job's own account made by the operator.
    """
    job, end = "sum-once", 3000
    seen: list[str] = []
    with Step("job1-rbac-precreated"):
        release.upgrade("jobs.rbac.precreate=true", wait=True)
    try:
        _run_to_completion(release, job, end, seen)
    finally:
        with Step("job1-rbac-by-the-operator-again"):
            release.upgrade("jobs.rbac.precreate=false", wait=True)


def _run_to_completion(release: Release, job: str, end: int, seen: list[str]) -> None:
    """The body of :func:`test_job_runs_to_completion_with_exact_output`."""
    with Step("job1-running"):
        release.apply_job(
            job,
            {"map": job, "keys": KEYS, "end": end, "rows_per_epoch": 250},
            conf={DRIVER_SNAPSHOT_MAX_BYTES_CONF: "0"},
        )
        executors = wait_for(
            release,
            f"job={job} two running executor Pods",
            lambda: (
                pods
                if len(pods := [p for p in release.executor_pods(job) if _running(p)]) == 2
                else None
            ),
            timeout=240,
        )
        wait_phase(release, job, {"RUNNING", "COMPLETED"}, timeout=180, seen=seen)
    with Step("job1-completed"):
        done = wait_phase(release, job, {"COMPLETED"}, timeout=300, seen=seen)

    assert "RUNNING" in seen and seen.index("RUNNING") < seen.index("COMPLETED"), seen
    assert snapshot_id(done) > 0, done["status"]
    (pod,) = release.driver_pods(job)
    (state,) = pod["status"]["containerStatuses"]
    assert state["state"]["terminated"]["exitCode"] == 0
    assert release.read_map(job) == expected_sums(end, KEYS)

    nodes = {p["spec"]["nodeName"] for p in executors}
    assert len(nodes) == 2, f"executors share a node: {nodes}"
    for executor in executors:
        owners = executor["metadata"].get("ownerReferences") or []
        assert [o["name"] for o in owners] == [pod["metadata"]["name"]], owners
        labels = executor["metadata"]["labels"]
        assert labels["snapshotjob.io/job-uid"] == done["metadata"]["uid"], labels
        assert labels["snapshotjob.io/job"] == job, labels
        context = executor["spec"].get("securityContext") or {}
        containers = executor["spec"]["containers"]
        assert context.get("runAsNonRoot") or all(
            (c.get("securityContext") or {}).get("runAsNonRoot") for c in containers
        ), executor["spec"]
    # The executors wrote the keyed state's chunks, not the driver, in their JVMs (jvm/, which
    # the image ships and the executors load from the driver), not in Python workers.
    log = release.kubectl("logs", pod["metadata"]["name"], "-c", "driver")
    writers = _chunk_writers(log)
    executor_ips = {p["status"]["podIP"] for p in executors}
    executor_names = {p["metadata"]["name"] for p in executors}
    assert writers and set(writers) <= executor_ips | executor_names, (writers, executors)
    paths = set(re.findall(r"Snapshot chunks written .* path=(\w+)", log))
    assert paths == {"jvm"}, paths
    # Spark removes its executors when the application ends.
    wait_for(release, f"job={job} executors gone", lambda: not release.executor_pods(job), 120)
    # The chart's account ran the driver; the operator made none and may make none.
    assert pod["spec"]["serviceAccountName"] == f"{release.fullname}-driver", pod["spec"]
    assert not release.kubectl("get", "serviceaccount", f"{job}-driver", "--ignore-not-found")
    role = json.loads(release.kubectl("get", "role", release.fullname, "-o", "json"))
    assert not [r for r in role["rules"] if "rbac.authorization.k8s.io" in r["apiGroups"]], role


def _start_long_job(release: Release, job: str) -> None:
    """Starts a job that runs far longer than any test waits, and waits until it runs.

    Each test starts its own: the ``_delete_the_tests_jobs`` fixture deletes a test's jobs
    once it ends, so a job shared with the next test could be gone (or going) by then.
    """
    release.apply_job(job, {"map": job, "keys": KEYS, "end": 100_000, "rows_per_epoch": 10})
    wait_phase(release, job, {"RUNNING"}, timeout=180)


JSON_LOG_JOB = "sum-json-logs"


def test_helm_test_passes_then_json_logs_reach_the_operator_and_its_drivers(
    release: Release,
) -> None:
    """``helm test`` checks the installation from inside the cluster (the operator's health and
    metrics endpoints, every member ACTIVE and cluster-safe); then ``helm upgrade`` switches
    the operator to ``logFormat: json`` and a driver it starts writes JSON too."""
    with Step("helm-test"):
        out = release.cluster.helm(
            "test", release.name, "--namespace", release.namespace, "--timeout", "3m"
        )
        assert re.search(r"TEST SUITE:\s+\S+-test-health", out), out
        assert re.search(r"Phase:\s+Succeeded", out), out
    with Step("json-logs-upgrade"):
        release.upgrade("operator.logFormat=json", wait=True)
        release.kubectl("rollout", "status", f"deploy/{release.fullname}", "--timeout=180s")
    with Step("json-logs-driver"):
        _start_long_job(release, JSON_LOG_JOB)
        driver = release.current_driver(JSON_LOG_JOB)["metadata"]["name"]

        def serving_metrics() -> dict[str, Any] | None:
            try:
                lines = _json_lines(release.kubectl("logs", driver))
            except RuntimeError:  # Its container has not started yet.
                return None
            return next((line for line in lines if line.get("event") == "Serving metrics"), None)

        serving = wait_for(
            release, f"pod={driver} logged that it serves metrics", serving_metrics, timeout=180
        )
    assert serving["logger"] == "spark_runtime.metrics" and serving["port"] == "9401", serving
    assert not TEXT_LOG_LINE.search(release.kubectl("logs", driver)), driver

    (operator,) = [
        pod
        for pod in release.pods("app.kubernetes.io/component=operator")
        if not pod["metadata"].get("deletionTimestamp")
    ]
    text = release.kubectl("logs", operator["metadata"]["name"])
    assert not TEXT_LOG_LINE.search(text), text[-2000:]
    lines = _json_lines(text)
    (start,) = [line for line in lines if line.get("event") == "Starting operator"]
    assert start["level"] == "INFO" and start["namespaces"] == release.namespace, start
    # Each key=value of a message is a field of its own, so a log pipeline can select a job.
    assert any(
        line.get("event") == "Patched status" and line.get("name") == JSON_LOG_JOB for line in lines
    ), lines[-20:]


def _json_lines(log: str) -> list[dict[str, Any]]:
    """The lines of ``log`` that are JSON objects (Spark's JVM still writes its own text)."""
    parsed = []
    for line in log.splitlines():
        if line.startswith("{"):
            parsed.append(json.loads(line))
    return parsed


def _degraded_naming(release: Release, job: str, text: str) -> dict[str, Any] | None:
    """The job's Degraded DriverNotStarting condition once its message contains ``text``."""
    obj = release.job(job) or {}
    for found in (obj.get("status") or {}).get("conditions") or ():
        if (
            found.get("type") == "Degraded"
            and found.get("reason") == "DriverNotStarting"
            and text in found.get("message", "")
        ):
            return dict(found)
    return None


def test_a_wrong_pull_secret_is_reported_with_the_image_and_the_registry_s_401(
    release: Release, image_registry: Registry
) -> None:
    """The namespace's pull Secret (the one the chart's ``jobs.imagePullSecrets`` names) with a
    wrong password: a job's driver Pod cannot pull its image (``imagePullPolicy: Always``, so
    the node's copy does not hide it), and the job says so at once, naming the image, the
    Pod's pull Secrets and the registry's answer, instead of waiting in STARTING without a
    word. The right Secret is put back before anything else pulls."""
    job = "sum-wrong-secret"
    with Step("wrong-pull-secret"):
        release.apply(image_registry.pull_secret(release.namespace, password="not-the-password"))
        try:
            release.apply_job(job, {"map": job, "keys": KEYS, "end": 10}, imagePullPolicy="Always")
            degraded = wait_for(
                release,
                f"job={job} Degraded by a 401 from the registry",
                lambda: _degraded_naming(release, job, "401 Unauthorized"),
                timeout=120,
            )
        finally:
            release.apply(image_registry.pull_secret(release.namespace))
    print(f"E2E wrong pull Secret: condition message={degraded['message']!r}")
    assert degraded["message"].startswith(
        f"Driver Pod cannot pull its image image={release.image} "
        f"pullSecrets={image_registry.secret} "
    ), degraded["message"]
    events = json.loads(
        release.kubectl(
            "get",
            "events",
            "--field-selector",
            f"involvedObject.name={job},reason=DriverNotStarting",
            "-o",
            "json",
        )
    )["items"]
    assert any(e["type"] == "Warning" and "401 Unauthorized" in e["message"] for e in events), (
        events
    )
    obj = release.job(job)
    assert obj is not None and obj["status"]["phase"] == "STARTING"
    release.kubectl("delete", "snapshotjob", job, "--wait=false")


def test_a_missing_snapshot_key_secret_is_reported_naming_it(release: Release) -> None:
    """``spec.snapshotSigning`` naming a Secret that does not exist: the driver cannot start
    (the operator hands the key over by reference only), and the job says which Secret."""
    job = "sum-no-key"
    with Step("missing-key-secret"):
        release.apply_job(
            job,
            {"map": job, "keys": KEYS, "end": 10},
            snapshotSigning={"secretName": "no-such-keys", "keyId": "k1"},
        )
        degraded = wait_for(
            release,
            f"job={job} Degraded naming the missing Secret",
            lambda: _degraded_naming(release, job, "no-such-keys"),
            timeout=120,
        )
    print(f"E2E missing key Secret: condition message={degraded['message']!r}")
    # The kubelet's reason, quoted in the condition: secret "no-such-keys" not found.
    assert "CreateContainerConfigError" in degraded["message"], degraded["message"]
    assert "not found" in degraded["message"], degraded["message"]
    obj = release.job(job)
    assert obj is not None and obj["status"]["phase"] == "STARTING"
    release.kubectl("delete", "snapshotjob", job, "--wait=false")


def test_deleting_a_job_removes_its_driver_and_finalizer(release: Release) -> None:
    job = "sum-delete"
    with Step("job3-running"):
        _start_long_job(release, job)
        wait_for(
            release,
            f"job={job} driver Pod running",
            lambda: any(p["status"].get("phase") == "Running" for p in release.driver_pods(job)),
            timeout=120,
        )
    obj = release.job(job)
    assert obj is not None and obj["metadata"].get("finalizers"), obj
    # deletionPolicy Export (the default): the running driver takes a terminal export first.
    kept = f"{job}-deleted-{obj['metadata']['uid'].replace('-', '')[:8]}"

    with Step("job3-deleted"):
        release.kubectl("delete", "snapshotjob", job, "--wait=false")
        wait_for(release, f"job={job} gone", lambda: release.job(job) is None, timeout=120)
        wait_for(release, f"job={job} driver gone", lambda: not release.driver_pods(job), 120)
    out = release.kubectl("get", "snapshotjobexport", kept, "-o", "json", "--ignore-not-found")
    assert out.strip(), f"the deleted job's export {kept} is not kept"
    export = json.loads(out)
    assert "ownerReferences" not in export["metadata"], export["metadata"]
    status = export.get("status") or {}
    assert (status.get("phase"), status.get("terminal")) == ("Completed", True), status
    assert status.get("jobUid") == obj["metadata"]["uid"], status


def test_helm_uninstall_removes_the_installation(release: Release) -> None:
    for job in release.jobs:
        release.kubectl("delete", "snapshotjob", job, "--ignore-not-found", "--timeout=120s")
    # Exports carry the operator's finalizer: deleted (and disposed of) while it still runs.
    release.kubectl("delete", "snapshotjobexports", "--all", "--timeout=120s", timeout=140)
    with Step("helm-uninstall"):
        release.cluster.helm("uninstall", release.name, "--namespace", release.namespace, "--wait")
        release.installed = False

        def leftovers() -> str:
            return release.kubectl(
                "get",
                "deployments,statefulsets,services,configmaps,pods,poddisruptionbudgets,"
                "serviceaccounts,roles,rolebindings,kopfpeerings",
                "-l",
                f"app.kubernetes.io/instance={release.name}",
                "-o",
                "name",
            ).strip()

        wait_for(release, "release objects gone", lambda: not leftovers(), timeout=120)
    cluster_wide = release.cluster.kubectl(
        "get", "clusterroles,clusterrolebindings", "-o", "name"
    ).split()
    assert not [n for n in cluster_wide if release.fullname in n], cluster_wide


def _running(pod: dict[str, Any]) -> bool:
    return bool(pod["status"].get("phase") == "Running" and pod["spec"].get("nodeName"))


def _chunk_writers(log: str) -> dict[str, int]:
    """Chunks written per executor, from the driver's ``Snapshot chunks written`` lines."""
    writers: dict[str, int] = {}
    for match in CHUNK_WRITERS.finditer(log):
        for part in match.group(1).split(","):
            host, _, count = part.rpartition(":")
            writers[host] = writers.get(host, 0) + int(count)
    return writers
