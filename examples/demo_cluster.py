"""``make demo``: the operator runs the sequence-sum job on the local kind cluster.

Why this exists: the product is a Kubernetes operator, so its demo must show it doing its work
on a cluster: running a job that snapshots, restoring it after its driver Pod is lost,
suspending and resuming it, and ending with an exactly-once result that is checked, not just
printed. Everything comes from this machine: the kind cluster (``hack/kube/cluster.sh``), the
project's images (the operator's, the members', and the job's ``snapshotjob/examples``, built
FROM ``snapshotjob/spark-runtime``) and PostgreSQL's (``hack/images/build.sh app postgres``),
the chart (``charts/snapshotjob-operator``) and the manifests in ``examples/kubernetes/``. As a user
installs it: the images and the packaged chart are pushed to the test bed's OCI registry
(``hack/kube/registry.sh``: TLS, basic auth), the chart is installed from there
(``helm upgrade --install oci://...``) and the nodes pull every image with a pull Secret.

``python -m examples.demo_cluster`` runs the demo and leaves the cluster up;
``python -m examples.demo_cluster down`` uninstalls it and deletes the cluster.

Environment: ``KIND_CLUSTER_NAME`` [snapshotjob], ``SNAPSHOTJOB_DEMO_NAMESPACE``
[snapshotjob-demo], ``SNAPSHOTJOB_DEMO_MASTER`` (overrides the manifest's ``spec.spark.master``,
e.g. ``local[2]`` on a machine without room for executors).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import yaml

from testbed import images as project_images
from testbed import registry
from testbed.kind import CLUSTER_SCRIPT, KindCluster, cluster_script, use_or_create
from testbed.kube_binaries import binary_path, default_bin_dir, ensure_binaries
from testbed.registry import Registry

REPO = Path(__file__).resolve().parent.parent
MANIFESTS = REPO / "examples" / "kubernetes"
CHART = REPO / "charts" / "snapshotjob-operator"
CRD_FILE = REPO / "crds" / "snapshotjob.yaml"
BUILD_SCRIPT = REPO / "hack" / "images" / "build.sh"
POSTGRES_IMAGE = "snapshotjob/postgres:dev"
JOB_IMAGE = "snapshotjob/examples:dev"
"""The job's image: the Spark runtime image plus examples/ (``hack/images/build.sh examples``)."""
RELEASE = "snapshotjob-demo"
JOB = "sequence-sum"
STARTED = time.monotonic()


class DemoError(RuntimeError):
    """A step of the demo failed or a check did not hold; the message says which."""


def say(message: str) -> None:
    """Prints a progress line with the seconds since the demo started."""
    print(f"[{time.monotonic() - STARTED:6.0f}s] {message}", flush=True)


@contextmanager
def step(what: str) -> Iterator[None]:
    """Announces a step and reports how long it took."""
    say(f"==> {what} ...")
    start = time.monotonic()
    yield
    say(f"    done: {what} ({time.monotonic() - start:.0f}s)")


def show(title: str, text: str) -> None:
    """Prints kubectl output indented under a title, for the user to follow."""
    say(title)
    for line in text.rstrip().splitlines():
        print(f"        {line}", flush=True)


class Demo:
    """The demo's cluster, namespace and job, and the kubectl calls it makes on them."""

    def __init__(self, cluster: KindCluster, namespace: str, image: str) -> None:
        self.cluster = cluster
        self.namespace = namespace
        # The job image's pull reference in the registry (by digest).
        self.image = image

    def kubectl(self, *args: str, timeout: float = 300) -> str:
        """Runs kubectl in the demo's namespace and returns its stdout."""
        return self.cluster.kubectl("-n", self.namespace, *args, timeout=timeout)

    def apply(self, manifests: list[dict[str, Any]]) -> None:
        """Applies the objects in the demo's namespace."""
        text = yaml.safe_dump_all(manifests)
        subprocess.run(
            [
                str(binary_path("kubectl")),
                f"--kubeconfig={self.cluster.kubeconfig}",
                "-n",
                self.namespace,
                "apply",
                "-f",
                "-",
            ],
            input=text,
            text=True,
            check=True,
            capture_output=True,
            timeout=120,
        )

    def job(self) -> dict[str, Any]:
        """The SnapshotJob object, or an empty dict if it does not exist."""
        out = self.kubectl("get", "snapshotjob", JOB, "-o", "json", "--ignore-not-found")
        return json.loads(out) if out.strip() else {}

    def table(self) -> str:
        """``kubectl get snapshotjob`` with the CRD's printer columns, plus the Pods."""
        return self.kubectl("get", "snapshotjob,pods", "-o", "wide")

    def sql(self, query: str) -> list[list[str]]:
        """Runs a query with psql in the PostgreSQL Pod; rows of text fields."""
        out = self.kubectl(
            "exec", "postgres-0", "-c", "postgres", "--", "psql", "--host=/tmp",
            "--username=snapshotjob", "--dbname=snapshotjob", "--no-align", "--tuples-only",
            "--field-separator=,", "--set=ON_ERROR_STOP=1", "--command", query,
        )  # fmt: skip
        return [line.split(",") for line in out.splitlines() if line]

    def committed_events(self) -> int:
        """Rows in the events table (committed by the sink), 0 before it exists."""
        rows = self.sql("SELECT CASE WHEN to_regclass('events') IS NULL THEN 0 ELSE "
                        "(SELECT count(*) FROM events) END")  # fmt: skip
        return int(rows[0][0])


def status(obj: dict[str, Any]) -> dict[str, Any]:
    """The job's status, empty if it has none yet."""
    return obj.get("status") or {}


def snapshot_id(obj: dict[str, Any]) -> int:
    """The job's restore point id (-1: none yet)."""
    return int((status(obj).get("executionRecord") or {}).get("snapshotId", -1))


def execution(obj: dict[str, Any]) -> dict[str, Any]:
    """The job's current (or last) execution."""
    return status(obj).get("execution") or {}


def wait_job(
    demo: Demo, what: str, done: Callable[[dict[str, Any]], bool], timeout: float
) -> dict[str, Any]:
    """Polls the job until ``done``, printing its phase as it changes; fails on FAILED."""
    start = time.monotonic()
    last_phase, last_print = "", start
    while True:
        obj = demo.job()
        phase = status(obj).get("phase", "-")
        seen = f"phase={phase} snapshot={snapshot_id(obj)}"
        now = time.monotonic()
        if phase != last_phase or now - last_print > 15:
            say(f"    {JOB}: {seen} (waiting {now - start:.0f}s for {what})")
            last_phase, last_print = phase, now
        if done(obj):
            return obj
        if phase == "FAILED":
            failure = status(obj).get("lastFailure") or {}
            raise DemoError(f"The job FAILED while waiting for {what}: {failure}")
        if now - start > timeout:
            pods = demo.kubectl("get", "pods", "--field-selector=status.phase!=Running")
            raise DemoError(
                f"Timed out after {timeout:.0f}s waiting for {what} ({seen}); "
                f"Pods not running:\n{pods}"
            )
        time.sleep(1)


def job_manifest(demo: Demo) -> dict[str, Any]:
    """``examples/kubernetes/snapshotjob.yaml`` for this cluster: its image and master."""
    manifest: dict[str, Any] = yaml.safe_load((MANIFESTS / "snapshotjob.yaml").read_text())
    spec = manifest["spec"]
    # As pushed to the registry; the chart gives the job's Pods the pull Secret.
    spec["image"] = demo.image
    spec["imagePullPolicy"] = "IfNotPresent"
    master = os.environ.get("SNAPSHOTJOB_DEMO_MASTER")
    if master:
        spec["spark"]["master"] = master
    elif (
        spec["spark"]["master"] == "k8s"
        and len(demo.kubectl("get", "nodes", "-o", "name").split()) < 2
    ):
        # The kind cluster of a 2-core machine: its control plane and the 1-CPU driver leave
        # no room on one node for executor Pods, which would stay Pending.
        spec["spark"]["master"] = "local[2]"
        say(
            "    one-node cluster: spark.master=local[2] instead of executor Pods "
            "(SNAPSHOTJOB_DEMO_MASTER=k8s forces them)"
        )
    return manifest


def chart_values(
    namespace: str, operator_image: str, member_image: str, images: Registry
) -> dict[str, Any]:
    """``examples/kubernetes/values-kind.yaml``, with the operator's and the members' images
    (their pull references in the registry), the registry and its pull Secret, and the demo's
    namespace."""
    values: dict[str, Any] = yaml.safe_load((MANIFESTS / "values-kind.yaml").read_text())
    values |= images.chart_values()
    values["hazelcast"]["image"] = images.image_values(member_image)
    # Only the demo's namespace: other installations in the cluster keep their jobs.
    values["operator"] |= {
        "image": images.image_values(operator_image),
        "allNamespaces": False,
        "namespaces": [namespace],
    }
    return values


def closed_form(end: int, keys: int) -> dict[int, tuple[int, int]]:
    """key -> (sum, count) of the values n < end with n % keys == key, without summing."""
    result = {}
    for key in range(min(keys, end)):
        count = (end - key + keys - 1) // keys
        result[key] = (count * key + keys * count * (count - 1) // 2, count)
    return result


def set_up(demo: Demo, values: Path, images: Registry, chart_version: str, postgres: str) -> None:
    """Installs the chart from the registry and PostgreSQL; removes a previous run's job and
    tables."""
    with step(f"namespace {demo.namespace} and the registry's pull Secret {images.secret}"):
        if not demo.cluster.kubectl("get", "namespace", demo.namespace, "--ignore-not-found"):
            demo.cluster.kubectl("create", "namespace", demo.namespace)
        demo.apply([images.pull_secret(demo.namespace)])
        # PostgreSQL runs as the default ServiceAccount: it pulls with the Secret too.
        wait_default_service_account(demo)
        demo.kubectl(
            "patch", "serviceaccount", "default", "-p",
            json.dumps({"imagePullSecrets": [{"name": images.secret}]}),
        )  # fmt: skip
    with step("the SnapshotJob CRD (crds/snapshotjob.yaml)"):
        # Helm installs a chart's CRDs only if they are missing and never upgrades them, so a
        # cluster kept from an older run would prune the status fields this operator writes.
        demo.cluster.kubectl(
            "apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE)
        )  # fmt: skip
    with step(
        f"helm upgrade --install {RELEASE} {images.chart_url} --version {chart_version} "
        "(operator + 3 Hazelcast members)"
    ):
        demo.cluster.helm(
            "upgrade", "--install", RELEASE, images.chart_url, "--version", chart_version,
            *images.helm_args(), "--namespace", demo.namespace, "--values", str(values),
            "--wait", "--timeout", "10m",
        )  # fmt: skip
        # helm --wait skips StatefulSets with the OnDelete strategy: wait for the members.
        demo.kubectl(
            "wait", "--for=condition=Ready", "pod", "-l",
            "app.kubernetes.io/component=hazelcast", "--timeout=600s", timeout=620,
        )  # fmt: skip
    with step("PostgreSQL in the cluster (examples/kubernetes/postgres.yaml)"):
        documents = [d for d in yaml.safe_load_all((MANIFESTS / "postgres.yaml").read_text()) if d]
        for doc in documents:
            if doc["kind"] == "StatefulSet":
                container = doc["spec"]["template"]["spec"]["containers"][0]
                container |= {"image": postgres, "imagePullPolicy": "IfNotPresent"}
        demo.apply(documents)
        demo.kubectl("rollout", "status", "statefulset/postgres", "--timeout=300s", timeout=320)
        demo.sql("SELECT 1")
    if demo.job():
        with step(f"removing the previous run's SnapshotJob {JOB} and tables"):
            # The demo starts over: its old state is not kept as an export (deletionPolicy).
            demo.kubectl(
                "patch",
                "snapshotjob",
                JOB,
                "--type=merge",
                "-p",
                '{"spec":{"deletionPolicy":"Destroy"}}',
            )
            demo.kubectl("delete", "snapshotjob", JOB, "--wait=true", "--timeout=180s")
            demo.sql("DROP TABLE IF EXISTS sums; DROP TABLE IF EXISTS events")


def wait_default_service_account(demo: Demo) -> None:
    """Waits for the namespace's default ServiceAccount (the controller-manager makes it)."""
    deadline = time.monotonic() + 60
    while not demo.kubectl("get", "serviceaccount", "default", "--ignore-not-found").strip():
        if time.monotonic() > deadline:
            raise DemoError(f"No default ServiceAccount in namespace {demo.namespace} after 60s")
        time.sleep(0.5)


def run_job(demo: Demo, manifest: dict[str, Any]) -> None:
    """Applies the job, then kills its driver, suspends and resumes it, and waits for the end."""
    spark = manifest["spec"]["spark"]
    with step(f"SnapshotJob {JOB} (spark.master={spark['master']}, paced to ~3 minutes)"):
        demo.apply([manifest])
        obj = wait_job(
            demo,
            "RUNNING with 2 snapshots",
            lambda o: status(o).get("phase") == "RUNNING" and snapshot_id(o) >= 1,
            timeout=600,
        )
    show("The job runs and snapshots (kubectl get snapshotjob,pods):", demo.table())

    before = execution(obj)
    events_before = demo.committed_events()
    with step(f"deleting the driver Pod {before['driverPod']} (a lost driver)"):
        demo.kubectl("delete", "pod", before["driverPod"], "--wait=false")
        started = wait_job(
            demo,
            "the operator to start a new execution",
            lambda o: execution(o).get("id") not in (None, before["id"]),
            timeout=600,
        )
        # The restore point the new driver starts from: the old driver may have completed one
        # more snapshot while it was being stopped.
        restore_point = snapshot_id(started)
        restored = wait_job(
            demo,
            f"the new execution to restore snapshot {restore_point} and take the next one",
            lambda o: (
                execution(o).get("id") == execution(started)["id"]
                and status(o).get("phase") == "RUNNING"
                and snapshot_id(o) > restore_point
            ),
            timeout=600,
        )
    events_after = demo.committed_events()
    show("Restored from its snapshot (kubectl get snapshotjob,pods):", demo.table())
    now = execution(restored)
    say(
        f"    execution {before['id']} (Pod {before['driverPod']}) -> {now['id']} "
        f"(Pod {now['driverPod']}, attempt {now.get('attempt')}); restored snapshot "
        f"{restore_point}, then took snapshot {snapshot_id(restored)}; events committed: "
        f"{events_before} before the loss, {events_after} after (it did not start over)"
    )
    if events_after < events_before:
        raise DemoError(f"Committed events went back from {events_before} to {events_after}")
    if status(restored).get("phase") == "COMPLETED":
        raise DemoError("The job completed before the suspend step: pace it slower")

    with step("suspending: kubectl patch snapshotjob --type=merge -p {spec:{suspend:true}}"):
        demo.kubectl("patch", "snapshotjob", JOB, "--type=merge", "-p", '{"spec":{"suspend":true}}')
        suspended = wait_job(
            demo, "SUSPENDED", lambda o: status(o).get("phase") == "SUSPENDED", timeout=300
        )
    show("Suspended: no driver runs; the terminal snapshot is the restore point:", demo.table())
    last_driver = execution(suspended).get("driverPod", "")
    exit_code = demo.kubectl(
        "get", "pod", last_driver, "--ignore-not-found", "-o",
        "jsonpath={.status.containerStatuses[0].state.terminated.exitCode}",
    )  # fmt: skip
    if exit_code:
        # A driver that ended as asked exits 0 (Completed); the status and the termination
        # message say it was a suspend, not the end of the pipeline.
        message = demo.kubectl(
            "get", "pod", last_driver, "--ignore-not-found", "-o",
            "jsonpath={.status.containerStatuses[0].state.terminated.message}",
        )  # fmt: skip
        reported = (status(suspended).get("driverExit") or {}).get("exitCode")
        say(
            f"    {last_driver} exited {exit_code} after the terminal snapshot, reported "
            f"{reported} (TERMINATED: ended as asked) in status.driverExit; its termination "
            f"message: {message.strip() or '(none)'}"
        )
        if exit_code != "0":
            raise DemoError(f"The suspended driver exited {exit_code}, not 0: see its log")
    time.sleep(5)
    with step("resuming: kubectl patch snapshotjob --type=merge -p {spec:{suspend:false}}"):
        demo.kubectl(
            "patch", "snapshotjob", JOB, "--type=merge", "-p", '{"spec":{"suspend":false}}'
        )
        wait_job(
            demo,
            "RUNNING past the terminal snapshot",
            lambda o: (
                status(o).get("phase") in {"RUNNING", "COMPLETED"}
                and snapshot_id(o) > snapshot_id(suspended)
            ),
            timeout=600,
        )
    show("Resumed from the terminal snapshot:", demo.table())
    with step("running to the end of the sequence"):
        wait_job(demo, "COMPLETED", lambda o: status(o).get("phase") == "COMPLETED", timeout=900)
    show("Completed:", demo.kubectl("get", "snapshotjob"))


def check_result(demo: Demo, args: dict[str, Any]) -> None:
    """Sums equal the closed form; the events table holds every id exactly once."""
    end, keys = int(args["end"]), int(args["keys"])
    rows = demo.sql("SELECT key, total, count FROM sums ORDER BY key")
    show("SELECT key, total, count FROM sums ORDER BY key:", "\n".join(" ".join(r) for r in rows))
    actual = {int(k): (int(t), int(c)) for k, t, c in rows}
    expected = closed_form(end, keys)
    if actual != expected:
        raise DemoError(f"Sums are WRONG: expected {expected}, got {actual}")
    say(f"    sums equal the closed form for end={end} keys={keys}")
    ((count, distinct, low, high),) = demo.sql(
        "SELECT count(*), count(DISTINCT id), min(id), max(id) FROM events"
    )
    say(f"    events: count(*)={count} count(DISTINCT id)={distinct} ids {low}..{high}")
    if not int(count) == int(distinct) == end or (int(low), int(high)) != (0, end - 1):
        raise DemoError(
            f"The events table is not exactly once: {count} rows, {distinct} distinct ids, "
            f"ids {low}..{high}, expected {end} rows with ids 0..{end - 1} once each"
        )
    say(f"    every event id 0..{end - 1} exactly once: exactly-once held")


def explore_hints(demo: Demo) -> None:
    """How to look around the cluster that stays up, and how to remove it."""
    kubectl = binary_path("kubectl")
    print(
        f"""
The cluster stays up. To explore it:
  export PATH={default_bin_dir()}:$PATH KUBECONFIG={demo.cluster.kubeconfig}
  kubectl -n {demo.namespace} get snapshotjob {JOB} -o yaml     # spec and status
  kubectl -n {demo.namespace} get pods                             # operator, Hazelcast, PostgreSQL
  kubectl -n {demo.namespace} logs deploy/{RELEASE}-snapshotjob-operator
  kubectl -n {demo.namespace} exec -it postgres-0 -- psql -h /tmp -U snapshotjob snapshotjob
(kubectl is {kubectl}.) Remove it all: make demo-down""",
        flush=True,
    )


def kubeconfig_path(cluster_name: str) -> Path:
    """Where ``hack/kube/cluster.sh up`` writes the cluster's kubeconfig (kept across runs)."""
    return default_bin_dir().parent / f"kind-{cluster_name}.kubeconfig"


def up(cluster_name: str, namespace: str) -> None:
    """The whole demo; leaves the cluster up."""
    ensure_binaries(["kubectl", "helm", "kind"], ["kubernetes", "helm", "kind"])
    kubeconfig = kubeconfig_path(cluster_name)
    with step(f"kind cluster {cluster_name} (hack/kube/cluster.sh up; reused if it exists)"):
        # Run here rather than inside use_or_create, so that its progress (a cold node image
        # takes minutes) is shown as it happens.
        subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "up"],
            env=dict(os.environ, KIND_CLUSTER_NAME=cluster_name),
            check=True,
        )
        cluster = use_or_create(kubeconfig, cluster_name)
    split = project_images.split_images()
    built = [split["operator"], split["member"], JOB_IMAGE, POSTGRES_IMAGE]
    with step(f"images {', '.join(built)} (hack/images/build.sh app postgres)"):
        subprocess.run(["bash", str(BUILD_SCRIPT), "app", "postgres"], check=True)
    with step("the test bed's registry (hack/kube/registry.sh up; TLS, basic auth)"):
        images = registry.up(cluster_name)
    with step(f"pushing the images to {images.push_host}"):
        refs = images.push(*built)
    with step(f"pushing the chart to oci://{images.push_host}/charts (helm package, helm push)"):
        chart_version = images.push_chart(CHART)
    demo = Demo(cluster, namespace, refs[JOB_IMAGE])
    with tempfile.TemporaryDirectory() as tmp:
        values = Path(tmp) / "values.yaml"
        settings = chart_values(namespace, refs[split["operator"]], refs[split["member"]], images)
        values.write_text(yaml.safe_dump(settings))
        set_up(demo, values, images, chart_version, refs[POSTGRES_IMAGE])
    manifest = job_manifest(demo)
    run_job(demo, manifest)
    with step("checking the result in PostgreSQL"):
        check_result(demo, manifest["spec"]["pipeline"]["args"])
    say(f"Demo passed in {time.monotonic() - STARTED:.0f}s")
    explore_hints(demo)


def down(cluster_name: str, namespace: str) -> None:
    """Uninstalls the demo's release and deletes the kind cluster."""
    if cluster_script(cluster_name, "status", timeout=60).returncode != 0:
        say(f"No kind cluster {cluster_name}: nothing to remove")
        return
    kubeconfig = kubeconfig_path(cluster_name)
    cluster = use_or_create(kubeconfig, cluster_name)
    with step(f"helm uninstall {RELEASE}"):
        demo = Demo(cluster, namespace, "")
        if demo.kubectl("get", "namespace", namespace, "--ignore-not-found").strip():
            demo.kubectl("delete", "snapshotjob", "--all", "--wait=true", "--timeout=120s")
            # Exports carry the operator's finalizer: delete them while it still runs.
            demo.kubectl("delete", "snapshotjobexports", "--all", "--wait=true", "--timeout=120s")
            cluster.helm("uninstall", RELEASE, "--namespace", namespace, "--ignore-not-found")
    with step(f"deleting the kind cluster {cluster_name}"):
        subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "down"],
            env=dict(os.environ, KIND_CLUSTER_NAME=cluster_name),
            check=True,
        )
    kubeconfig.unlink(missing_ok=True)


def main() -> int:
    """Runs the demo (``up``, the default) or removes it (``down``)."""
    options = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    options.add_argument("action", nargs="?", choices=["up", "down"], default="up")
    action = options.parse_args().action
    cluster_name = os.environ.get("KIND_CLUSTER_NAME", "snapshotjob")
    namespace = os.environ.get("SNAPSHOTJOB_DEMO_NAMESPACE", "snapshotjob-demo")
    try:
        if action == "down":
            down(cluster_name, namespace)
        else:
            up(cluster_name, namespace)
    except (DemoError, RuntimeError, subprocess.CalledProcessError) as error:
        detail = getattr(error, "stderr", None) or ""
        print(f"\ndemo FAILED: {error}\n{detail}".rstrip(), file=sys.stderr, flush=True)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
