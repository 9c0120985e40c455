"""End to end on a real cluster: Helm installs the chart into kind, SnapshotJobs run to the end.

Why this test exists: every other tier stops at a boundary (the decision function, a fake
driver, a control plane without kubelet). Here the project image (built locally by
``hack/images/build.sh``, no registry) runs the operator, three Hazelcast members and the
Spark drivers the operator creates, so the chart, the image, RBAC, DNS discovery, the
driver's status writes and the snapshot protocol meet for real.

The pipeline (``tests/e2e/pipelines/sequence_map_sum.py``) sums a bounded sequence per key
into a map of the installation's Hazelcast cluster; its exact result is known in closed form
and is read back with ``kubectl exec`` into a member (the members run the same image, which
has the Python client). The tests of this module share one Helm release and run in file
order: install, complete, suspend and resume, delete, uninstall. Each step's duration is
printed at the end of the session (``E2E timing ...`` lines).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.kind import KindCluster
from tests.e2e.pipelines.sequence_map_sum import expected_sums
from tests.fixtures.kube import binary

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(900)]

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "snapshotjob-operator"
BUILD_SCRIPT = REPO_ROOT / "hack" / "images" / "build.sh"
IMAGE_REPOSITORY = "snapshotjob/runtime-e2e"
IMAGE_TAG = "dev"
IMAGE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
PIPELINE = "e2e_pipelines.sequence_map_sum"
KEYS = 5

TIMINGS: list[tuple[str, float]] = []


@pytest.fixture(scope="module", autouse=True)
def _print_timings(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print every step's duration once the module is done, whatever the capture mode."""
    yield
    # Teardown output is captured like a test's; lift the capture for these lines.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    lift = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with lift:
        print()
        for step, seconds in TIMINGS:
            print(f"E2E timing step={step} seconds={seconds:.1f}", flush=True)


class Step:
    """Times a block and records it under a name: ``with Step("helm-install"): ...``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.start = 0.0

    def __enter__(self) -> Step:
        self.start = time.monotonic()
        return self

    def __exit__(self, *exc: object) -> None:
        TIMINGS.append((self.name, time.monotonic() - self.start))


@dataclass
class Release:
    """The Helm release under test and how to reach its pieces."""

    cluster: KindCluster
    name: str
    namespace: str
    installed: bool = True
    jobs: list[str] = field(default_factory=list)

    @property
    def fullname(self) -> str:
        return f"{self.name}-snapshotjob-operator"

    @property
    def member_pod(self) -> str:
        return f"{self.fullname}-hazelcast-0"

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        return self.cluster.kubectl("-n", self.namespace, *args, timeout=timeout)

    def job(self, name: str) -> dict[str, Any] | None:
        """The SnapshotJob as JSON, or None once it is gone."""
        out = self.kubectl("get", "snapshotjob", name, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else None

    def driver_pods(self, job: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", "pods", "-l", f"snapshotjob.io/job={job}", "-o", "json")
        pods: list[dict[str, Any]] = json.loads(out)["items"]
        return pods

    def read_map(self, map_name: str) -> dict[str, dict[str, int]]:
        """The map's entries, read by a Python client inside a member Pod."""
        script = (
            "import json, sys, hazelcast\n"
            "c = hazelcast.HazelcastClient(cluster_members=['127.0.0.1:5701'],"
            " cluster_name='snapshotjob', smart_routing=False)\n"
            "print(json.dumps(dict(c.get_map(sys.argv[1]).blocking().entry_set())))\n"
            "c.shutdown()\n"
        )
        out = self.kubectl("exec", self.member_pod, "--", "python", "-c", script, map_name)
        raw: dict[str, str] = json.loads(out.strip().splitlines()[-1])
        return {key: json.loads(value) for key, value in raw.items()}

    def apply_job(self, name: str, args: dict[str, Any], **spec: Any) -> None:
        manifest = {
            "apiVersion": "snapshotjob.io/v1alpha1",
            "kind": "SnapshotJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "image": IMAGE,
                "imagePullPolicy": "Never",
                "pipeline": {"module": PIPELINE, "args": args},
                "spark": {
                    "master": "local[2]",
                    # 1g: the JVM, the Python driver and two Arrow workers share the container.
                    "driver": {"cores": 1, "memory": "1g"},
                    "conf": {"spark.sql.shuffle.partitions": "2", "spark.ui.enabled": "false"},
                },
                "snapshotIntervalSeconds": 1,
                **spec,
            },
        }
        subprocess.run(
            [*self._kubectl_argv(), "apply", "-f", "-"],
            input=yaml.safe_dump(manifest),
            text=True,
            capture_output=True,
            check=True,
            timeout=60,
        )
        self.jobs.append(name)

    def _kubectl_argv(self) -> list[str]:
        return [
            str(binary("kubectl")),
            f"--kubeconfig={self.cluster.kubeconfig}",
            "-n",
            self.namespace,
        ]

    def diagnostics(self) -> str:
        """Pods, jobs and the operator's log tail, for failure messages."""
        parts = []
        for args in (
            ("get", "pods", "-o", "wide"),
            ("get", "snapshotjobs", "-o", "yaml"),
            ("logs", f"deploy/{self.fullname}", "--tail=60"),
        ):
            try:
                parts.append(self.kubectl(*args))
            except RuntimeError as exc:
                parts.append(str(exc))
        return "\n".join(parts)[-12000:]


def wait_for(
    release: Release,
    what: str,
    check: Callable[[], Any],
    timeout: float,
    interval: float = 1.0,
) -> Any:
    """Polls ``check`` until it returns something truthy; fails with diagnostics on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            pytest.fail(f"Timed out after {timeout}s waiting for {what}\n{release.diagnostics()}")
        time.sleep(interval)


def wait_phase(
    release: Release, job: str, phases: set[str], timeout: float, seen: list[str] | None = None
) -> dict[str, Any]:
    """Waits until the job's phase is in ``phases``; appends every phase seen to ``seen``."""

    def check() -> dict[str, Any] | None:
        obj = release.job(job)
        phase = ((obj or {}).get("status") or {}).get("phase")
        if seen is not None and phase and (not seen or seen[-1] != phase):
            seen.append(phase)
        if phase in {"FAILED"} - phases:
            pytest.fail(f"Job {job} FAILED: {obj}\n{release.diagnostics()}")
        return obj if phase in phases else None

    result: dict[str, Any] = wait_for(release, f"job={job} phase in {phases}", check, timeout)
    return result


def snapshot_id(obj: dict[str, Any]) -> int:
    return int(((obj.get("status") or {}).get("executionRecord") or {}).get("snapshotId", -1))


@pytest.fixture(scope="module")
def e2e_image(kind_cluster: KindCluster) -> str:
    """Builds the e2e image (cached by input hash) and loads it into the kind node."""
    with Step("image-build"):
        build = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "e2e"],
            capture_output=True,
            text=True,
            timeout=1800,
            check=False,
        )
    if build.returncode != 0:
        pytest.fail(
            f"hack/images/build.sh e2e failed rc={build.returncode}:\n"
            f"{build.stdout[-4000:]}\n{build.stderr[-6000:]}"
        )
    with Step("image-load"):
        kind_cluster.load_image(IMAGE)
    return IMAGE


def _values() -> dict[str, Any]:
    """Chart values for a 2-core machine: the project image everywhere, small requests."""
    image = {"repository": IMAGE_REPOSITORY, "tag": IMAGE_TAG, "pullPolicy": "Never"}
    return {
        "operator": {
            "image": image,
            "replicas": 1,
            "storeRetrySeconds": 3,
            "resyncSeconds": 10,
            "gracefulTimeoutSeconds": 120,
            "resources": {
                "requests": {"cpu": "10m", "memory": "128Mi"},
                "limits": {"memory": "384Mi"},
            },
        },
        "hazelcast": {
            "image": image,
            "command": ["hazelcast-member"],
            "replicas": 3,
            "heap": "256m",
            "gracefulShutdownSeconds": 20,
            "resources": {
                "requests": {"cpu": "10m", "memory": "384Mi"},
                "limits": {"memory": "640Mi"},
            },
        },
    }


@pytest.fixture(scope="module")
def release(
    kind_cluster: KindCluster, e2e_image: str, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Release]:
    """Installs the chart into a fresh namespace, watching only that namespace.

    Watching one namespace (a Role there, a namespaced KopfPeering) keeps this release from
    handling jobs of any other installation in the same cluster, and vice versa.
    """
    suffix = uuid.uuid4().hex[:6]
    rel = Release(cluster=kind_cluster, name=f"e2e{suffix}", namespace=f"sj-e2e-{suffix}")
    values = tmp_path_factory.mktemp("helm") / "values.yaml"
    settings = _values()
    settings["operator"] |= {"allNamespaces": False, "namespaces": [rel.namespace]}
    values.write_text(yaml.safe_dump(settings))
    try:
        with Step("helm-install"):
            kind_cluster.helm(
                "install",
                rel.name,
                str(CHART),
                "--namespace",
                rel.namespace,
                "--create-namespace",
                "--values",
                str(values),
                "--wait",
                "--timeout",
                "5m",
            )
        # helm --wait skips StatefulSets with the OnDelete strategy: wait for the members.
        with Step("hazelcast-ready"):
            rel.kubectl(
                "wait",
                "--for=condition=Ready",
                "pod",
                "-l",
                "app.kubernetes.io/component=hazelcast",
                "--timeout=300s",
                timeout=320,
            )
        yield rel
    finally:
        if rel.installed:
            for job in rel.jobs:
                rel.kubectl("delete", "snapshotjob", job, "--ignore-not-found", "--wait=false")
            time.sleep(5)
            rel.cluster.helm("uninstall", rel.name, "--namespace", rel.namespace, "--wait")
        kind_cluster.kubectl("delete", "namespace", rel.namespace, "--wait=false")


def test_job_runs_to_completion_with_exact_output(release: Release) -> None:
    end = 1000
    seen: list[str] = []
    with Step("job1-running"):
        release.apply_job(
            "sum-once", {"map": "sum-once", "keys": KEYS, "end": end, "rows_per_epoch": 250}
        )
        wait_phase(release, "sum-once", {"RUNNING", "COMPLETED"}, timeout=180, seen=seen)
    with Step("job1-completed"):
        done = wait_phase(release, "sum-once", {"COMPLETED"}, timeout=300, seen=seen)

    assert "RUNNING" in seen and seen.index("RUNNING") < seen.index("COMPLETED"), seen
    assert snapshot_id(done) > 0, done["status"]
    (pod,) = release.driver_pods("sum-once")
    (state,) = pod["status"]["containerStatuses"]
    assert state["state"]["terminated"]["exitCode"] == 0
    assert release.read_map("sum-once") == expected_sums(end, KEYS)


def test_suspend_then_resume_completes_with_exact_output(release: Release) -> None:
    job, end = "sum-suspend", 600
    # 12 epochs of 50 rows: still running when the first snapshot is there.
    with Step("job2-first-snapshot"):
        release.apply_job(job, {"map": job, "keys": KEYS, "end": end, "rows_per_epoch": 50})
        running = wait_for(
            release,
            f"job={job} RUNNING with a snapshot",
            lambda: (
                obj
                if (obj := release.job(job))
                and obj.get("status", {}).get("phase") == "RUNNING"
                and snapshot_id(obj) > 0
                else None
            ),
            timeout=240,
        )
    before = snapshot_id(running)

    with Step("job2-suspended"):
        release.kubectl(
            "patch", "snapshotjob", job, "--type=merge", "-p", '{"spec":{"suspend":true}}'
        )
        suspended = wait_phase(release, job, {"SUSPENDED"}, timeout=180)
    record = suspended["status"]["executionRecord"]
    # The terminal snapshot: taken after the request, and it is the restore point.
    assert snapshot_id(suspended) > before, record
    assert record.get("lastSnapshotFailure") in (None, ""), record
    (first_pod,) = release.driver_pods(job)
    (state,) = first_pod["status"]["containerStatuses"]
    assert state["state"]["terminated"]["exitCode"] == 64, state  # TERMINATED
    partial = release.read_map(job)
    assert sum(v["count"] for v in partial.values()) < end, partial

    seen: list[str] = []
    with Step("job2-resumed-completed"):
        release.kubectl(
            "patch", "snapshotjob", job, "--type=merge", "-p", '{"spec":{"suspend":false}}'
        )
        done = wait_phase(release, job, {"COMPLETED"}, timeout=300, seen=seen)
    assert "RUNNING" in seen, seen
    assert snapshot_id(done) > snapshot_id(suspended), done["status"]
    pods = {p["metadata"]["name"] for p in release.driver_pods(job)}
    assert done["status"]["execution"]["driverPod"] in pods
    assert first_pod["metadata"]["name"] != done["status"]["execution"]["driverPod"]
    assert release.read_map(job) == expected_sums(end, KEYS)


def test_deleting_a_job_removes_its_driver_and_finalizer(release: Release) -> None:
    job = "sum-delete"
    with Step("job3-running"):
        release.apply_job(job, {"map": job, "keys": KEYS, "end": 100_000, "rows_per_epoch": 10})
        wait_phase(release, job, {"RUNNING"}, timeout=180)
        wait_for(
            release,
            f"job={job} driver Pod running",
            lambda: any(p["status"].get("phase") == "Running" for p in release.driver_pods(job)),
            timeout=120,
        )
    obj = release.job(job)
    assert obj is not None and obj["metadata"].get("finalizers"), obj

    with Step("job3-deleted"):
        release.kubectl("delete", "snapshotjob", job, "--wait=false")
        wait_for(release, f"job={job} gone", lambda: release.job(job) is None, timeout=120)
        wait_for(release, f"job={job} driver gone", lambda: not release.driver_pods(job), 120)


def test_helm_uninstall_removes_the_installation(release: Release) -> None:
    for job in release.jobs:
        release.kubectl("delete", "snapshotjob", job, "--ignore-not-found", "--timeout=120s")
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
