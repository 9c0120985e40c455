"""The Helm release the end-to-end tests drive, and how they wait on it and time their steps.

Why a module of its own: the e2e tests of every module share one release (installing the
chart and starting three members takes a minute or two of the session's budget), and the
same waits, readers and faults serve all of them. Fixtures live in ``conftest.py``.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from testbed.jvm import QUICK_JIT_OPTIONS
from testbed.kind import KindCluster
from testbed.registry import Registry
from tests.fixtures.kube import binary

REPO_ROOT = Path(__file__).resolve().parents[2]
CHART = REPO_ROOT / "charts" / "snapshotjob-operator"
BUILD_SCRIPT = REPO_ROOT / "hack" / "images" / "build.sh"
IMAGE_REPOSITORY = "snapshotjob/runtime-e2e"
IMAGE_TAG = "dev"
IMAGE = f"{IMAGE_REPOSITORY}:{IMAGE_TAG}"
"""The e2e image as built locally; the tests run it as pushed to the test bed's registry
(:attr:`Release.image`, by digest)."""
CUSTOM_IMAGE = "my-pipeline:dev"
"""The user image of examples/custom-image, the tag its snapshotjob.yaml runs."""

EXECUTORS: dict[str, Any] = {"instances": 2, "cores": 1, "coresRequest": "250m", "memory": "512m"}
"""Two small executors: with a 1-CPU driver they fit two workers of a 2-core machine."""

SEQUENCE_SUM = "examples.sequence_sum"
"""The pipeline of the tests with an append-only sink: one row per event, in PostgreSQL."""
SUM_KEYS = 10

TIMINGS: list[tuple[str, float]] = []
"""Every step's duration, printed at the end of the session (``E2E timing ...`` lines)."""

_RESTORED = re.compile(r"Restored snapshotId=(-?\d+)")


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
    """The Helm release under test and how to reach its pieces.

    ``image`` is the e2e job image's pull reference in the test bed's registry
    (``sj-registry:5000/snapshotjob/runtime-e2e@sha256:...``): the jobs run it, pulled with the
    registry's pull Secret; the operator and the members run their own images. ``chart`` and
    ``chart_args`` are where helm finds the chart (``oci://...`` with ``--version`` and the
    registry's CA).
    """

    cluster: KindCluster
    name: str
    namespace: str
    image: str = IMAGE
    chart: str = str(CHART)
    chart_args: tuple[str, ...] = ()
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

    def upgrade(self, *settings: str, wait: bool = False) -> None:
        """``helm upgrade --reuse-values`` of this release with ``--set`` for each setting;
        with ``wait``, until its Deployment and Pods are ready (``--wait``)."""
        args = ["upgrade", self.name, self.chart, *self.chart_args, "--namespace", self.namespace]
        args += ["--reuse-values", *(arg for setting in settings for arg in ("--set", setting))]
        if wait:
            args += ["--wait", "--timeout", "5m"]
        self.cluster.helm(*args)

    def jobs_in_phase(self, phase: str) -> list[str]:
        """This namespace's SnapshotJobs whose ``status.phase`` is ``phase``, sorted by name."""
        out = self.kubectl("get", "snapshotjobs", "-o", "json")
        return sorted(
            item["metadata"]["name"]
            for item in json.loads(out)["items"]
            if (item.get("status") or {}).get("phase") == phase
        )

    def store_label(self) -> str:
        """The ``snapshotjob.io/store`` label the operator gives this store's jobs' Pods (its
        Deployment's ``SJ_OPERATOR_STORE_LABEL``), which the store's NetworkPolicy admits."""
        deployment = json.loads(self.kubectl("get", "deployment", self.fullname, "-o", "json"))
        (container,) = deployment["spec"]["template"]["spec"]["containers"]
        (label,) = [e["value"] for e in container["env"] if e["name"] == "SJ_OPERATOR_STORE_LABEL"]
        return str(label)

    def pods(self, selector: str) -> list[dict[str, Any]]:
        out = self.kubectl("get", "pods", "-l", selector, "-o", "json")
        pods: list[dict[str, Any]] = json.loads(out)["items"]
        return pods

    def driver_pods(self, job: str) -> list[dict[str, Any]]:
        return self.pods(f"snapshotjob.io/job={job},app.kubernetes.io/component=driver")

    def executor_pods(self, job: str) -> list[dict[str, Any]]:
        return self.pods(f"snapshotjob.io/job={job},app.kubernetes.io/component=executor")

    def current_driver(self, job: str) -> dict[str, Any]:
        """The driver Pod of the job's current execution."""
        obj = self.job(job) or {}
        name = ((obj.get("status") or {}).get("execution") or {}).get("driverPod")
        assert name, f"job={job} has no execution: {obj.get('status')}"
        return dict(json.loads(self.kubectl("get", "pod", name, "-o", "json")))

    def restored_snapshot(self, pod: str, timeout: float = 180) -> int:
        """The snapshot id the driver Pod's execution restored (-1: started empty).

        Waits for the driver's ``Restored snapshotId=...`` line: a Pod may run for a while
        (Spark, executors) before it restores.
        """
        deadline = time.monotonic() + timeout
        while True:
            try:
                found = _RESTORED.findall(self.kubectl("logs", pod, "-c", "driver"))
            except RuntimeError as error:
                # The status names the Pod before the Pod exists, and a container logs
                # nothing before it starts.
                found, last = [], str(error)
            else:
                last = "no restore logged"
            if found:
                return int(found[-1])
            assert time.monotonic() < deadline, f"pod={pod}: {last} in {timeout}s"
            time.sleep(2)

    def scrape(self, pod: str, port: int) -> str:
        """The Pod's Prometheus metrics, fetched through the API server's Pod proxy: the path
        a Prometheus outside the cluster network would not have, but kubectl does."""
        return self.cluster.kubectl(
            "get", "--raw", f"/api/v1/namespaces/{self.namespace}/pods/{pod}:{port}/proxy/metrics"
        )

    def read_map(self, map_name: str) -> dict[str, dict[str, int]]:
        """The map's entries, read by a Python client in an operator Pod (the member image has
        no Python), connected to the members the chart gives the operator."""
        script = (
            "import json, os, sys, hazelcast\n"
            "c = hazelcast.HazelcastClient("
            "cluster_members=os.environ['SJ_OPERATOR_STORE_MEMBERS'].split(','),"
            " cluster_name=os.environ.get('SJ_OPERATOR_STORE_CLUSTER_NAME', 'snapshotjob'))\n"
            "print(json.dumps(dict(c.get_map(sys.argv[1]).blocking().entry_set())))\n"
            "c.shutdown()\n"
        )
        out = self.kubectl(
            "exec", f"deploy/{self.fullname}", "--", "python", "-c", script, map_name
        )
        raw: dict[str, str] = json.loads(out.strip().splitlines()[-1])
        return {key: json.loads(value) for key, value in raw.items()}

    def apply_job(
        self,
        name: str,
        args: dict[str, Any],
        *,
        pipeline: str = "e2e_pipelines.sequence_map_sum",
        spark: dict[str, Any] | None = None,
        conf: dict[str, str] | None = None,
        **spec: Any,
    ) -> None:
        """Applies a SnapshotJob; by default with two executor Pods (``master: k8s``).

        ``conf`` adds Spark settings to the default ``spark`` section's.
        """
        manifest = {
            "apiVersion": "snapshotjob.io/v1alpha1",
            "kind": "SnapshotJob",
            "metadata": {"name": name, "namespace": self.namespace},
            "spec": {
                "image": self.image,
                "imagePullPolicy": "IfNotPresent",
                "pipeline": {"module": pipeline, "args": args},
                "spark": spark
                or {
                    "driver": {"cores": 1, "memory": "768m"},
                    "executor": EXECUTORS,
                    "conf": {"spark.ui.enabled": "false", **QUICK_JIT_CONF, **(conf or {})},
                },
                "snapshotIntervalSeconds": 1,
                **spec,
            },
        }
        self.apply(manifest)
        if name not in self.jobs:
            self.jobs.append(name)

    def destroy_job(self, name: str) -> None:
        """Deletes a job with ``deletionPolicy: Destroy``, without waiting: a test's job that
        is done with, whose state nobody needs (the default, Export, would take a terminal
        export first and keep it)."""
        self.kubectl(
            "patch",
            "snapshotjob",
            name,
            "--type=merge",
            "-p",
            '{"spec":{"deletionPolicy":"Destroy"}}',
        )
        self.kubectl("delete", "snapshotjob", name, "--ignore-not-found", "--wait=false")

    def apply(self, manifest: dict[str, Any] | str) -> None:
        text = manifest if isinstance(manifest, str) else yaml.safe_dump(manifest)
        subprocess.run(
            [*self._kubectl_argv(), "apply", "-f", "-"],
            input=text,
            text=True,
            capture_output=True,
            check=True,
            timeout=60,
        )

    def _kubectl_argv(self) -> list[str]:
        return [
            str(binary("kubectl")),
            f"--kubeconfig={self.cluster.kubeconfig}",
            "-n",
            self.namespace,
        ]

    def why_restarted(self, job: str, driver_pod: str) -> str:
        """What the status says of the job's last exits, and the end of ``driver_pod``'s log.

        For the message of a check that an execution went on: with the whole status object
        the message was cut before the failure's reason and the old driver's last lines.
        """
        status = (self.job(job) or {}).get("status") or {}
        told = {key: status.get(key) for key in ("restarts", "lastFailure", "driverExit")}
        try:
            log = self.kubectl("logs", driver_pod, "-c", "driver")
        except (RuntimeError, subprocess.SubprocessError) as exc:
            log = str(exc)
        # Without the stack frames: a JVM error's frames alone filled any tail of the log.
        lines = [line for line in log.splitlines() if not line.lstrip().startswith("at ")]
        tail = "\n".join(lines[-60:])
        return f"{told}\n$ kubectl logs {driver_pod} -c driver (last 60 lines but frames)\n{tail}"

    def diagnostics(self) -> str:
        """Pods, events, jobs and the operator's log tail, for failure messages.

        Each part is cut to its own tail: with one cut over all of them, the operator's JSON
        log lines alone filled it and a failure's message lost the Pods and the events.
        """
        parts = []
        for args, limit in (
            (("get", "pods", "-o", "wide"), 4000),
            (("get", "events", "--sort-by=.lastTimestamp"), 5000),
            (("get", "snapshotjobs", "-o", "yaml"), 3000),
            (("logs", f"deploy/{self.fullname}", "--tail=60"), 6000),
        ):
            try:
                text = self.kubectl(*args)
            except (RuntimeError, subprocess.SubprocessError) as exc:
                text = str(exc)
            cut = "" if len(text) <= limit else f"[{len(text) - limit} characters cut]\n"
            parts.append(f"$ kubectl {' '.join(args)}\n{cut}{text[-limit:]}")
        return "\n".join(parts)


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


def attempt(obj: dict[str, Any]) -> int:
    """The job's execution count (``status.execution.attempt``)."""
    return int(((obj.get("status") or {}).get("execution") or {}).get("attempt", 0))


def next_execution(release: Release, job: str, before: dict[str, Any]) -> dict[str, Any]:
    """Waits for a newer execution, checks its restore, and waits for its own next snapshot.

    The new execution must have restored at least the last snapshot before the fault (one may
    complete between the look and the fault), as its ``Restored snapshotId=`` line says.

    Returns:
        The job once it has a snapshot newer than the restored one.
    """
    old = attempt(before)
    current = wait_for(
        release,
        f"job={job} execution after attempt {old}",
        lambda: obj if (obj := release.job(job)) is not None and attempt(obj) > old else None,
        timeout=300,
    )
    restored = release.restored_snapshot(current["status"]["execution"]["driverPod"])
    assert restored >= snapshot_id(before), (restored, before["status"])
    return wait_snapshot(release, job, restored, timeout=300)


def wait_snapshot(release: Release, job: str, above: int, timeout: float = 240) -> dict[str, Any]:
    """Waits until the job is RUNNING with a snapshot newer than ``above``."""
    result: dict[str, Any] = wait_for(
        release,
        f"job={job} RUNNING with a snapshot above {above}",
        lambda: (
            obj
            if (obj := release.job(job))
            and (obj.get("status") or {}).get("phase") == "RUNNING"
            and snapshot_id(obj) > above
            else None
        ),
        timeout=timeout,
    )
    if (result.get("status") or {}).get("phase") == "FAILED":
        pytest.fail(f"Job {job} FAILED: {result}")
    return result


KIND_VALUES = REPO_ROOT / "examples" / "kubernetes" / "values-kind.yaml"
"""The chart values ``make demo`` installs with too: both run on the same kind cluster."""

CONTROL_PLANE_NODE: dict[str, Any] = {
    key: yaml.safe_load(KIND_VALUES.read_text())["operator"][key]
    for key in ("nodeSelector", "tolerations")
}
"""Where the installation (operator, members) and PostgreSQL run: the jobs' Pods then have the
worker nodes to themselves, so a worker lost or drained takes only a job's driver and
executors with it, which is the fault those tests are about (store faults have their own)."""


QUICK_JIT = " ".join(QUICK_JIT_OPTIONS)
"""The JIT option the tests' Spark JVMs run with (:mod:`testbed.jvm`)."""

QUICK_JIT_CONF = {
    "spark.driver.extraJavaOptions": QUICK_JIT,
    "spark.executor.extraJavaOptions": QUICK_JIT,
}
"""The jobs' Spark settings for it: the cluster's drivers and executors are as short-lived."""


def chart_values(registry: Registry, service_images: dict[str, str]) -> dict[str, Any]:
    """``examples/kubernetes/values-kind.yaml`` with the operator's and the members' images from
    the test bed's registry (``service_images``: ``build.sh`` target -> pull reference by
    digest), the registry's pull Secret for the operator, the members and every job's Pods,
    and a quicker lost node."""
    values: dict[str, Any] = yaml.safe_load(KIND_VALUES.read_text())
    values |= registry.chart_values()
    values["hazelcast"]["image"] = registry.image_values(service_images["member"])
    # The lost-node test waits this long after the node controller marks the driver's Pod
    # not Ready; the chart's 60 s would only make the test slower.
    values["operator"] |= {
        "image": registry.image_values(service_images["operator"]),
        "driverLostSeconds": 20,
    }
    return values


CATCH_UP = 1000
"""Rows per epoch at most while a restored job catches up with its pace. An epoch's cost is
mostly fixed (an epoch of 400 rows took 1 to 2 s on the kind cluster), so bigger catch-up
epochs clear the lag of a fault (a minute of no progress: 6000 rows at 100 per second)
sooner: with 200 the catch-up barely outran the pace. A catch-up that lags leaves the job
less far along when it is suspended, and a test that waits for the next snapshot after a
fault waits for it."""


SECRET_DSN = "$(PG_DSN)"
"""The PostgreSQL DSN as a job's arguments carry it: a reference to the driver's environment,
which :data:`DSN_FROM_SECRET` fills from ``examples/kubernetes/postgres.yaml``'s Secret."""

DSN_FROM_SECRET: dict[str, Any] = {
    "spec": {
        "containers": [
            {
                "name": "main",
                "env": [
                    {
                        "name": "PG_DSN",
                        "valueFrom": {"secretKeyRef": {"name": "postgres", "key": "DSN"}},
                    }
                ],
            }
        ]
    }
}
"""A ``podTemplate`` that gives the driver (and executors) the DSN from the Secret."""


def sequence_sum_args(
    dsn: str,
    job: str,
    end: int,
    rate: int,
    max_rows_per_epoch: int | None = None,
    keys: int = SUM_KEYS,
) -> dict[str, Any]:
    """Arguments of ``examples.sequence_sum`` writing to the job's own two tables.

    The sequence is paced at ``rate`` rows per second from the job's first start, so the job
    runs at least ``end / rate`` seconds whatever its faults do; each test picks ``end`` so
    that this comes after its last fault. ``max_rows_per_epoch`` caps how fast a restored job
    catches up with the pace (:data:`CATCH_UP` in the tests with faults). ``keys``: the
    running sums' keys (value modulo keys).
    """
    table = job.replace("-", "_")
    return {
        "dsn": dsn,
        "table": f"{table}_sums",
        "events_table": f"{table}_events",
        "keys": keys,
        "end": end,
        "rows_per_second": rate,
        **({} if max_rows_per_epoch is None else {"max_rows_per_epoch": max_rows_per_epoch}),
    }


Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]
"""Scraped samples by name and sorted labels."""


def parse_metrics(text: str) -> Samples:
    """The samples of a scrape in Prometheus' text format."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """One sample's value, None if the scrape has no such series."""
    return samples.get((name, tuple(sorted(labels.items()))))


def psql(release: Release, query: str) -> list[list[str]]:
    """Runs a query in the in-cluster PostgreSQL; rows as lists of strings."""
    out = release.kubectl(
        "exec",
        "postgres-0",
        "--",
        "psql",
        "postgresql://snapshotjob:snapshotjob@127.0.0.1:5432/snapshotjob",
        "-tA",
        "-F",
        ",",
        "-c",
        query,
    )
    return [line.split(",") for line in out.strip().splitlines() if line]


UNENDING = 10_000_000
"""``end`` of a job that a test stops itself (:func:`suspend_with_exact_prefix`): at the tests'
pace it would run for more than a day, so it is still running whatever the faults cost."""


def patch_spec(release: Release, job: str, spec: dict[str, Any]) -> None:
    """Merge-patches the job's spec, as ``kubectl patch --type=merge`` does for a user."""
    release.kubectl("patch", "snapshotjob", job, "--type=merge", "-p", json.dumps({"spec": spec}))


def suspend_with_exact_prefix(release: Release, job: str, keys: int = SUM_KEYS) -> int:
    """Suspends the job, then checks that its output is an exact prefix of the sequence.

    Suspending takes a terminal snapshot, whose 2nd phase commits the sinks' last epochs; the
    events table must then hold the ids 0 .. n - 1 each once (a replayed epoch is an extra
    row, a lost one a gap or a short count) and the sums exactly theirs. A test that ends its
    job this way, rather than waiting for a bounded one to end, does not have to pace the job
    past its last fault.

    Args:
        release: The chart release.
        job: The job, which ran ``examples.sequence_sum``.
        keys: Its ``keys`` argument.

    Returns:
        n, the number of events committed.
    """
    patch_spec(release, job, {"suspend": True})
    wait_phase(release, job, {"SUSPENDED"}, timeout=240)
    table = job.replace("-", "_")
    ((committed,),) = psql(release, f"SELECT count(*) FROM {table}_events")
    assert int(committed) > 0, f"job={job} committed nothing"
    assert_exactly_once(release, job, int(committed), keys)
    return int(committed)


def assert_exactly_once(release: Release, job: str, end: int, keys: int = SUM_KEYS) -> None:
    """Every event id exactly once, exact sums (of ``keys`` keys), no prepared transaction
    left behind."""
    table = job.replace("-", "_")
    ((rows, distinct, low, high),) = psql(
        release, f"SELECT count(*), count(DISTINCT id), min(id), max(id) FROM {table}_events"
    )
    assert (int(rows), int(distinct), int(low), int(high)) == (end, end, 0, end - 1), (
        f"events rows={rows} distinct={distinct} min={low} max={high}, expected {end} ids once"
    )
    sums = {
        int(key): (int(total), int(count))
        for key, total, count in psql(
            release, f"SELECT key, total, count FROM {table}_sums ORDER BY key"
        )
    }
    expected = {
        key: (sum(range(key, end, keys)), len(range(key, end, keys)))
        for key in range(min(keys, end))
    }
    assert sums == expected
    ((prepared,),) = psql(release, "SELECT count(*) FROM pg_prepared_xacts")
    assert int(prepared) == 0


S3_MANIFEST = REPO_ROOT / "examples" / "kubernetes" / "s3proxy.yaml"
MEMBERS = "app.kubernetes.io/component=hazelcast"
S3_SECRET_KEY = "snapshotjob-demo-secret"
"""The secret key of examples/kubernetes/s3proxy.yaml's Secret ``snapshots-s3``, which the
server accepts and :data:`DURABLE_STORAGE` names."""

DURABLE_STORAGE: dict[str, Any] = {
    "bucket": "snapshots",
    "prefix": "e2e",
    "endpoint": "http://s3proxy:8080",
    "credentialsSecret": "snapshots-s3",
    "snapshotCopyIntervalSeconds": 10,
}
"""``spec.durableStorage`` on the in-cluster S3 server of :func:`deploy_s3`."""


CLIENT_CONTAINER = "client"
"""The container :func:`deploy_example` adds for a test's clients (Python, ``confluent_kafka``):
the test servers' images hold the server alone."""


def deploy_example(
    release: Release, manifest: Path, statefulset: str, image: str, *, client: bool = False
) -> None:
    """Applies one of ``examples/kubernetes/`` on the control-plane node with its test image
    as pushed to the test bed's registry, and waits until its StatefulSet's Pod is Ready.

    Args:
        release: The release whose namespace gets the example.
        manifest: The example's manifest.
        statefulset: The name of its StatefulSet.
        image: The server's pull reference, e.g. the test-kafka-broker image's.
        client: Also run the e2e job image in the Pod, idle, as :data:`CLIENT_CONTAINER`, for
            ``kubectl exec`` of a test's client scripts.
    """
    documents = [doc for doc in yaml.safe_load_all(manifest.read_text()) if doc]
    for doc in documents:
        if doc["kind"] == "StatefulSet":
            spec = doc["spec"]["template"]["spec"]
            spec |= CONTROL_PLANE_NODE
            # Pulled with the registry's Secret, which the namespace's default ServiceAccount
            # carries.
            server = spec["containers"][0]
            server |= {"image": image, "imagePullPolicy": "IfNotPresent"}
            if client:
                spec["containers"].append(
                    {
                        "name": CLIENT_CONTAINER,
                        "image": release.image,
                        "imagePullPolicy": "IfNotPresent",
                        "command": ["sleep", "infinity"],
                        "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
                        "securityContext": server.get("securityContext", {}),
                    }
                )
    release.apply(yaml.safe_dump_all(documents))
    release.kubectl(
        "rollout", "status", f"statefulset/{statefulset}", "--timeout=300s", timeout=320
    )


def deploy_s3(release: Release, image: str) -> None:
    """Runs ``examples/kubernetes/s3proxy.yaml`` (its Secret, server and Service) with the
    test-s3proxy image's pull reference ``image``."""
    deploy_example(release, S3_MANIFEST, "s3proxy", image)


def durable_copies(release: Release, uid: str) -> list[int]:
    """The snapshot ids of a job's periodic copies, as files in the S3 server's volume."""
    # s3proxy's filesystem backend keeps an object under its key as a path.
    script = f"ls /var/lib/s3proxy/snapshots/e2e/__sj.copy.{uid} 2>/dev/null || true"
    out = release.kubectl("exec", "s3proxy-0", "--", "sh", "-c", script)
    return sorted(int(name) for name in out.split() if name.isdigit())


def recreate_the_store(release: Release) -> None:
    """Deletes the Hazelcast StatefulSet with its members and creates it again, as it was.

    What a user does after losing the store's namespace or moving it: every snapshot in the
    store is lost, and the members that come back are new Pods of a new StatefulSet (the
    operator's restart loop finds it again by name). Waits for three of them, Ready.
    """
    name = f"{release.fullname}-hazelcast"
    manifest = json.loads(release.kubectl("get", "statefulset", name, "-o", "json"))
    metadata = manifest["metadata"]
    for generated in ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields"):
        metadata.pop(generated, None)
    manifest.pop("status", None)
    before = {p["metadata"]["uid"] for p in release.pods(MEMBERS)}
    release.kubectl("delete", "statefulset", name, "--cascade=foreground", "--wait=true")
    wait_for(
        release,
        "the old members gone",
        lambda: not {p["metadata"]["uid"] for p in release.pods(MEMBERS)} & before,
        timeout=300,
    )
    release.apply(json.dumps(manifest))

    def replaced() -> bool:
        pods = release.pods(MEMBERS)
        return len(pods) == 3 and all(
            any(
                c["type"] == "Ready" and c["status"] == "True"
                for c in p["status"].get("conditions") or []
            )
            for p in pods
        )

    wait_for(release, "three members of the new StatefulSet, Ready", replaced, timeout=300)
