"""Fixtures of the end-to-end tests: the images and the chart in the test bed's registry, one
Helm release installed from it, PostgreSQL.

One release serves every e2e module of the session (the chart's install and three members'
start are the slowest fixture); the module that runs last (``test_snapshotjob_kind.py``,
pytest orders modules by name) ends with uninstalling it, and the fixture's teardown cleans
up whatever a failed test left.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from testbed import images
from testbed.kind import KindCluster
from testbed.registry import Registry
from tests.e2e.release import (
    BUILD_SCRIPT,
    CHART,
    CONTROL_PLANE_NODE,
    CUSTOM_IMAGE,
    IMAGE,
    REPO_ROOT,
    TIMINGS,
    Release,
    Step,
    chart_values,
)

POSTGRES_IMAGE = "snapshotjob/postgres:dev"
SERVICES = ("operator", "member", "test-kafka-broker", "test-s3proxy")
"""The split images the cluster tier runs besides the jobs' (spark-runtime is under the e2e
image)."""
POSTGRES_MANIFEST = REPO_ROOT / "examples" / "kubernetes" / "postgres.yaml"
CRD = REPO_ROOT / "crds" / "snapshotjob.yaml"


@pytest.fixture(scope="session", autouse=True)
def _print_timings(request: pytest.FixtureRequest) -> Iterator[None]:
    """Print every step's duration once the session is done, whatever the capture mode."""
    yield
    if not TIMINGS:
        return
    # Teardown output is captured like a test's; lift the capture for these lines.
    capture = request.config.pluginmanager.get_plugin("capturemanager")
    lift = capture.global_and_fixture_disabled() if capture else contextlib.nullcontext()
    with lift:
        print()
        for step, seconds in TIMINGS:
            print(f"E2E timing step={step} seconds={seconds:.1f}", flush=True)


def _build(*targets: str) -> None:
    build = subprocess.run(
        ["bash", str(BUILD_SCRIPT), *targets],
        # No SBOMs here: tests/integration/test_images.py writes them.
        env=dict(os.environ, SBOM="0"),
        capture_output=True,
        text=True,
        timeout=1800,
        check=False,
    )
    if build.returncode != 0:
        pytest.fail(
            f"hack/images/build.sh {' '.join(targets)} failed rc={build.returncode}:\n"
            f"{build.stdout[-4000:]}\n{build.stderr[-6000:]}"
        )


@pytest.fixture(scope="session")
def e2e_image(image_registry: Registry) -> str:
    """Builds the e2e image (cached by input hash) and pushes it to the test bed's registry
    (unchanged layers cost a HEAD request each); returns its pull reference by digest."""
    with Step("image-build"):
        _build("e2e")
    with Step("image-push"):
        return image_registry.push(IMAGE)[IMAGE]


@pytest.fixture(scope="session")
def service_images(image_registry: Registry) -> dict[str, str]:
    """Builds the operator's, the members' and the test servers' images from their Dockerfiles
    (``hack/images/build.sh``, cached by input hash; no SBOMs, the integration tier writes
    those) and pushes them to the registry.

    Returns:
        ``build.sh`` target (``operator``, ``member``, ``test-kafka-broker``,
        ``test-s3proxy``) -> its pull reference by digest.
    """
    names = {target: name for target, name in images.split_images().items() if target in SERVICES}
    with Step("service-images-build"):
        _build(*names)
    with Step("service-images-push"):
        refs = image_registry.push(*names.values())
    return {target: refs[name] for target, name in names.items()}


@pytest.fixture(scope="session")
def custom_image(image_registry: Registry) -> str:
    """Builds the user image of ``examples/custom-image`` (``hack/images/build.sh custom``:
    ``docker build`` of its Dockerfile, cached by input hash) and pushes it to the registry;
    returns its pull reference by digest."""
    with Step("custom-image-build"):
        _build("custom")
    with Step("custom-image-push"):
        return image_registry.push(CUSTOM_IMAGE)[CUSTOM_IMAGE]


@pytest.fixture(scope="session")
def chart_version(image_registry: Registry) -> str:
    """Packages the chart and pushes it to ``oci://<registry>/charts`` (``helm push``); the
    release is installed from there, as users install it."""
    with Step("chart-push"):
        return image_registry.push_chart(CHART)


NAMESPACE_PREFIX = "sj-e2e-"
"""The namespaces of the release fixture's installations; one found at its start is the
installation of a run stopped before its teardown."""


def _remove_stale_releases(cluster: KindCluster) -> None:
    """Removes the releases of earlier sessions that were stopped before their teardown.

    A run stopped from outside (CI's time limit) leaves its release running: three members,
    the operator, PostgreSQL and a job's Pods idle in the kept cluster and take CPU from the
    next run's cluster tier. Their jobs keep the operator's finalizer once the operator is
    uninstalled, so the finalizers go first, or the namespace would stay Terminating.
    """
    names = cluster.kubectl("get", "namespaces", "-o", "jsonpath={.items[*].metadata.name}")
    for namespace in (name for name in names.split() if name.startswith(NAMESPACE_PREFIX)):
        print(f"E2E setup: removing a stale release namespace={namespace}")
        cluster.helm("uninstall", f"e2e{namespace.removeprefix(NAMESPACE_PREFIX)}", "-n", namespace,
                     "--ignore-not-found", "--wait", "--timeout", "2m")  # fmt: skip
        for kind in ("snapshotjobs", "snapshotjobexports"):
            for item in cluster.kubectl("get", kind, "-n", namespace, "-o", "name").split():
                cluster.kubectl("patch", item, "-n", namespace, "--type", "merge",
                                "-p", '{"metadata":{"finalizers":null}}')  # fmt: skip
        cluster.kubectl("delete", "namespace", namespace, "--wait=false")


def _pull_secret_in(cluster: KindCluster, registry: Registry, namespace: str, folder: Path) -> None:
    """Creates the namespace with the registry's pull Secret, which its default
    ServiceAccount carries too: the example servers (PostgreSQL, S3, Kafka) run as it."""
    cluster.kubectl("create", "namespace", namespace)
    secret = folder / "pull-secret.json"
    secret.write_text(json.dumps(registry.pull_secret(namespace)))
    cluster.kubectl("apply", "-f", str(secret))
    secret.unlink()
    patch = json.dumps({"imagePullSecrets": [{"name": registry.secret}]})
    deadline = time.monotonic() + 60
    while True:  # the controller-manager creates the default ServiceAccount
        try:
            cluster.kubectl("-n", namespace, "patch", "serviceaccount", "default", "-p", patch)
            return
        except RuntimeError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="session")
def release(
    kind_cluster: KindCluster,
    image_registry: Registry,
    e2e_image: str,
    service_images: dict[str, str],
    chart_version: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Release]:
    """Installs the chart from the test bed's registry into a fresh namespace, watching only
    that namespace; every image is pulled from the registry with its pull Secret.

    Watching one namespace (a Role there, a namespaced KopfPeering) keeps this release from
    handling jobs of any other installation in the same cluster, and vice versa.
    """
    _remove_stale_releases(kind_cluster)
    suffix = uuid.uuid4().hex[:6]
    namespace = f"{NAMESPACE_PREFIX}{suffix}"
    rel = Release(
        cluster=kind_cluster,
        name=f"e2e{suffix}",
        namespace=namespace,
        image=e2e_image,
        chart=image_registry.chart_url,
        chart_args=("--version", chart_version, *image_registry.helm_args()),
    )
    folder = tmp_path_factory.mktemp("helm")
    values = folder / "values.yaml"
    settings = chart_values(image_registry, service_images)
    settings["operator"] |= {"allNamespaces": False, "namespaces": [rel.namespace]}
    values.write_text(yaml.safe_dump(settings))
    try:
        with Step("helm-install"):
            _pull_secret_in(kind_cluster, image_registry, namespace, folder)
            # Helm installs a chart's CRDs only if they are missing and never upgrades them: a
            # cluster kept from an older run would silently prune the status fields this
            # operator and its drivers write, as after any operator upgrade without this step.
            kind_cluster.kubectl(
                "apply", "--server-side", "--force-conflicts", "-f", str(CRD)
            )  # fmt: skip
            kind_cluster.helm(
                "install",
                rel.name,
                rel.chart,
                *rel.chart_args,
                "--namespace",
                rel.namespace,
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
            # While the operator still runs: it removes the jobs' finalizers, without which
            # the namespace could never be deleted.
            try:
                # Destroy: the session is over, nothing restores these jobs' state.
                for job in rel.jobs:
                    if rel.job(job) is not None:
                        rel.destroy_job(job)
                rel.kubectl("delete", "snapshotjobs", "--all", "--timeout=180s", timeout=200)
                rel.kubectl("delete", "snapshotjobexports", "--all", "--timeout=120s", timeout=140)
            except (RuntimeError, subprocess.SubprocessError) as error:
                print(f"E2E teardown: jobs not deleted error={error}")
            rel.cluster.helm("uninstall", rel.name, "--namespace", rel.namespace, "--wait")
        kind_cluster.kubectl("delete", "namespace", rel.namespace, "--wait=false")


@pytest.fixture(scope="session")
def postgres(image_registry: Registry, release: Release) -> str:
    """PostgreSQL in the release's namespace (``examples/kubernetes/postgres.yaml``).

    Returns:
        The DSN the jobs' drivers and executors use.
    """
    with Step("postgres-image"):
        _build("postgres")
        image = image_registry.push(POSTGRES_IMAGE)[POSTGRES_IMAGE]
    with Step("postgres-ready"):
        documents = [doc for doc in yaml.safe_load_all(POSTGRES_MANIFEST.read_text()) if doc]
        for doc in documents:
            if doc["kind"] == "StatefulSet":
                spec = doc["spec"]["template"]["spec"]
                spec |= CONTROL_PLANE_NODE
                # From the registry, with the Secret of the namespace's default ServiceAccount.
                spec["containers"][0] |= {"image": image, "imagePullPolicy": "IfNotPresent"}
        release.apply(yaml.safe_dump_all(documents))
        release.kubectl("rollout", "status", "statefulset/postgres", "--timeout=300s", timeout=320)
    return "postgresql://snapshotjob:snapshotjob@postgres:5432/snapshotjob"


@pytest.fixture(autouse=True)
def _delete_the_tests_jobs(request: pytest.FixtureRequest) -> Iterator[None]:
    """Deletes the jobs a test applied once it is done, passed or failed.

    A failed test's job would otherwise keep running and hold a worker's CPU, so the next
    test's driver could not be scheduled and would fail too, for an unrelated reason.
    """
    if "release" not in request.fixturenames:
        yield
        return
    rel: Release = request.getfixturevalue("release")
    before = set(rel.jobs)
    yield
    for job in [job for job in rel.jobs if job not in before]:
        try:
            if rel.job(job) is not None:
                rel.destroy_job(job)
        except (RuntimeError, subprocess.SubprocessError) as error:
            print(f"E2E teardown: job={job} not deleted error={error}")
