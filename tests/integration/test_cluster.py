"""Acceptance tests for the Kubernetes testbeds built in hack/kube (issue 3).

They check the testbeds themselves, not the operator: each test pins down one Kubernetes
behaviour that the operator relies on, so that a broken testbed fails here, with a clear
name, rather than as a confusing operator-test failure.

* ``kube`` (control plane, no kubelet): CRD status subresource + optimistic concurrency
  (a stale ``resourceVersion`` is refused with 409), and owner-reference garbage collection.
* ``cluster`` (kind): a locally built image runs and logs, cluster DNS resolves a headless
  Service, StatefulSet ordering and identity, garbage collection, the CRD/409 check,
  Pods on two worker nodes reaching each other (the Pod network spans nodes), and the test
  bed's registry: an image pushed there is pulled with a pull Secret, and a wrong Secret's
  pull fails with the registry's 401.
"""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any, TypeVar

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.controlplane import KubeAPI
from testbed.kind import KindCluster
from testbed.kube_binaries import HACK_KUBE
from testbed.registry import Registry

T = TypeVar("T")

GROUP = "testbed.snapshotjob.io"
PLURAL = "probes"
TESTBOX_IMAGE = "snapshotjob/testbox:dev"

# The client's generated models declare nearly every field Optional; these tests read fields
# the server always sets, so the module is used untyped rather than asserting each one.
k8s: Any = client


def wait_for(
    what: str, probe: Callable[[], T | None], timeout: float = 120, interval: float = 1
) -> T:
    """Poll ``probe`` until it returns a truthy value, or fail with ``what`` in the message.

    Args:
        what: Description for the failure message.
        probe: Returns the awaited value, or a falsy value to keep waiting.
        timeout: Seconds before the test fails.
        interval: Seconds between polls.

    Returns:
        The first truthy value ``probe`` returned.
    """
    deadline = time.monotonic() + timeout
    last: T | None = None
    while time.monotonic() < deadline:
        last = probe()
        if last:
            return last
        time.sleep(interval)
    pytest.fail(f"Timed out after {timeout:.0f}s waiting for {what} (last={last!r})")


def _namespace(api: Any, prefix: str) -> str:
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=name)))
    # The default ServiceAccount is created asynchronously by the controller-manager, and
    # Pods are refused until it exists.
    wait_for(
        f"default ServiceAccount in namespace={name}",
        lambda: any(
            sa.metadata.name == "default"
            for sa in k8s.CoreV1Api(api).list_namespaced_service_account(name).items
        ),
        timeout=60,
        interval=0.3,
    )
    return name


@pytest.fixture
def kube_client(kube_api: KubeAPI) -> Iterator[Any]:
    """An ApiClient for the control-plane testbed."""
    api = kube_api.api_client()
    yield api
    api.close()


@pytest.fixture(scope="module")
def cluster_client(kind_cluster: KindCluster) -> Iterator[Any]:
    """An ApiClient for the kind testbed."""
    api = kind_cluster.api_client()
    yield api
    api.close()


# ----------------------------------------------------------------------------------------
# Scenarios shared by both testbeds
# ----------------------------------------------------------------------------------------


def crd_status_conflict_scenario(api: Any) -> None:
    """A status patch carrying a stale resourceVersion must be answered with 409 Conflict."""
    ext = k8s.ApiextensionsV1Api(api)
    crd_name = f"{PLURAL}.{GROUP}"
    crd = {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": crd_name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"plural": PLURAL, "singular": "probe", "kind": "Probe"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {
                                "spec": {
                                    "type": "object",
                                    "properties": {"size": {"type": "integer"}},
                                },
                                "status": {
                                    "type": "object",
                                    "properties": {"phase": {"type": "string"}},
                                },
                            },
                        }
                    },
                }
            ],
        },
    }
    try:
        ext.create_custom_resource_definition(crd)
    except ApiException as exc:
        if exc.status != 409:  # already there from an earlier test on the same cluster
            raise

    def established() -> bool:
        conditions = ext.read_custom_resource_definition(crd_name).status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    wait_for(f"CRD {crd_name} Established", established, timeout=60, interval=0.3)

    namespace = _namespace(api, "crd")
    custom = k8s.CustomObjectsApi(api)
    try:
        obj = wait_for(
            "CRD endpoint to serve creates",
            lambda: _try_create_probe(custom, namespace),
            timeout=30,
            interval=0.5,
        )
        stale_rv = obj["metadata"]["resourceVersion"]
        fresh = custom.patch_namespaced_custom_object_status(
            GROUP, "v1", namespace, PLURAL, "probe-1",
            {"metadata": {"resourceVersion": stale_rv}, "status": {"phase": "Running"}},
        )  # fmt: skip
        assert fresh["status"]["phase"] == "Running"
        assert fresh["metadata"]["resourceVersion"] != stale_rv

        with pytest.raises(ApiException) as caught:
            custom.patch_namespaced_custom_object_status(
                GROUP, "v1", namespace, PLURAL, "probe-1",
                {"metadata": {"resourceVersion": stale_rv}, "status": {"phase": "Stale"}},
            )  # fmt: skip
        assert caught.value.status == 409, caught.value.body

        current = custom.get_namespaced_custom_object(GROUP, "v1", namespace, PLURAL, "probe-1")
        assert current["status"]["phase"] == "Running"
        # The status subresource ignores spec changes, and the main resource ignores status.
        assert current["spec"] == {"size": 1}
    finally:
        k8s.CoreV1Api(api).delete_namespace(namespace)


def _try_create_probe(custom: Any, namespace: str) -> dict[str, Any] | None:
    body = {
        "apiVersion": f"{GROUP}/v1",
        "kind": "Probe",
        "metadata": {"name": "probe-1"},
        "spec": {"size": 1},
        "status": {"phase": "IgnoredOnCreate"},
    }
    try:
        created: dict[str, Any] = custom.create_namespaced_custom_object(
            GROUP, "v1", namespace, PLURAL, body
        )
    except ApiException as exc:
        if exc.status == 404:  # discovery of a just-established CRD can lag briefly
            return None
        raise
    assert "status" not in created or created["status"] != {"phase": "IgnoredOnCreate"}
    return created


def owner_gc_scenario(api: Any) -> None:
    """Deleting an owner makes the garbage collector delete its dependents."""
    core = k8s.CoreV1Api(api)
    namespace = _namespace(api, "gc")
    try:
        owner = core.create_namespaced_config_map(
            namespace, k8s.V1ConfigMap(metadata=k8s.V1ObjectMeta(name="owner"))
        )
        ref = k8s.V1OwnerReference(
            api_version="v1", kind="ConfigMap", name="owner", uid=owner.metadata.uid
        )
        for i in range(3):
            core.create_namespaced_config_map(
                namespace,
                k8s.V1ConfigMap(
                    metadata=k8s.V1ObjectMeta(name=f"child-{i}", owner_references=[ref])
                ),
            )
        core.delete_namespaced_config_map(
            "owner", namespace, body=k8s.V1DeleteOptions(propagation_policy="Background")
        )

        def children_gone() -> bool:
            names = {cm.metadata.name for cm in core.list_namespaced_config_map(namespace).items}
            return not any(n.startswith("child-") for n in names)

        wait_for("garbage collection of child ConfigMaps", children_gone, timeout=90)
    finally:
        core.delete_namespace(namespace)


# ----------------------------------------------------------------------------------------
# Control-plane mode
# ----------------------------------------------------------------------------------------


@pytest.mark.integration
@pytest.mark.kube
def test_control_plane_crd_status_patch_with_stale_resource_version_is_409(
    kube_client: Any,
) -> None:
    crd_status_conflict_scenario(kube_client)


@pytest.mark.integration
@pytest.mark.kube
def test_control_plane_owner_reference_gc_deletes_children(kube_client: Any) -> None:
    owner_gc_scenario(kube_client)


@pytest.mark.integration
@pytest.mark.kube
def test_control_plane_serves_version_and_kubectl(kube_api: KubeAPI) -> None:
    version = k8s.VersionApi(kube_api.api_client()).get_code()
    expected = HACK_KUBE.joinpath("versions.env").read_text()
    assert f"KUBE_VERSION={version.git_version}" in expected
    assert "kubernetes" in kube_api.kubectl("get", "svc", "-n", "default", "-o", "name")


# ----------------------------------------------------------------------------------------
# Cluster mode (kind)
# ----------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def testbox_image(kind_cluster: KindCluster) -> str:
    """Build the busybox-based test image locally and load it into the kind nodes."""
    subprocess.run(["bash", str(HACK_KUBE / "images.sh"), "testbox"], check=True, timeout=600)
    kind_cluster.load_image(TESTBOX_IMAGE)
    return TESTBOX_IMAGE


def _container(name: str, image: str, command: list[str], **kwargs: Any) -> Any:
    return k8s.V1Container(
        name=name, image=image, image_pull_policy="Never", command=command, **kwargs
    )


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_deployment_of_local_image_becomes_ready_with_logs(
    cluster_client: Any, testbox_image: str
) -> None:
    apps, core = k8s.AppsV1Api(cluster_client), k8s.CoreV1Api(cluster_client)
    namespace = _namespace(cluster_client, "deploy")
    labels = {"app": "hello"}
    container = _container(
        "hello",
        testbox_image,
        ["sh", "-c", "echo hello-from-testbox; exec httpd -f -p 8080 -h /"],
        readiness_probe=k8s.V1Probe(tcp_socket=k8s.V1TCPSocketAction(port=8080), period_seconds=1),
    )
    deployment = k8s.V1Deployment(
        metadata=k8s.V1ObjectMeta(name="hello"),
        spec=k8s.V1DeploymentSpec(
            replicas=1,
            selector=k8s.V1LabelSelector(match_labels=labels),
            template=k8s.V1PodTemplateSpec(
                metadata=k8s.V1ObjectMeta(labels=labels),
                spec=k8s.V1PodSpec(containers=[container]),
            ),
        ),
    )
    try:
        apps.create_namespaced_deployment(namespace, deployment)
        wait_for(
            "Deployment hello available",
            lambda: (
                (
                    apps.read_namespaced_deployment_status("hello", namespace).status
                ).available_replicas
            ),
            timeout=180,
        )
        pod = core.list_namespaced_pod(namespace, label_selector="app=hello").items[0]
        logs = core.read_namespaced_pod_log(pod.metadata.name, namespace)
        assert "hello-from-testbox" in logs
    finally:
        core.delete_namespace(namespace)


@pytest.fixture(scope="module")
def statefulset(cluster_client: Any, testbox_image: str) -> Iterator[str]:
    """A headless Service ``web`` and a 3-replica StatefulSet ``web``; yields the namespace."""
    apps, core = k8s.AppsV1Api(cluster_client), k8s.CoreV1Api(cluster_client)
    namespace = _namespace(cluster_client, "sts")
    labels = {"app": "web"}
    core.create_namespaced_service(
        namespace,
        k8s.V1Service(
            metadata=k8s.V1ObjectMeta(name="web"),
            spec=k8s.V1ServiceSpec(
                cluster_ip="None",
                selector=labels,
                ports=[k8s.V1ServicePort(name="http", port=8080)],
            ),
        ),
    )
    container = _container(
        "web",
        testbox_image,
        ["sh", "-c", "exec httpd -f -p 8080 -h /"],
        readiness_probe=k8s.V1Probe(tcp_socket=k8s.V1TCPSocketAction(port=8080), period_seconds=1),
    )
    apps.create_namespaced_stateful_set(
        namespace,
        k8s.V1StatefulSet(
            metadata=k8s.V1ObjectMeta(name="web"),
            spec=k8s.V1StatefulSetSpec(
                replicas=3,
                service_name="web",
                pod_management_policy="OrderedReady",
                selector=k8s.V1LabelSelector(match_labels=labels),
                template=k8s.V1PodTemplateSpec(
                    metadata=k8s.V1ObjectMeta(labels=labels),
                    spec=k8s.V1PodSpec(containers=[container], termination_grace_period_seconds=1),
                ),
            ),
        ),
    )
    wait_for(
        "StatefulSet web 3/3 ready",
        lambda: (
            (apps.read_namespaced_stateful_set_status("web", namespace).status.ready_replicas) == 3
        ),
        timeout=300,
    )
    yield namespace
    core.delete_namespace(namespace)


def _ready_since(pod: Any) -> datetime:
    for cond in pod.status.conditions or []:
        if cond.type == "Ready" and cond.status == "True":
            return cond.last_transition_time  # type: ignore[no-any-return]
    raise AssertionError(f"Pod {pod.metadata.name} is not Ready")


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_statefulset_starts_in_order_and_recreates_same_name(
    cluster_client: Any, statefulset: str
) -> None:
    core = k8s.CoreV1Api(cluster_client)
    namespace = statefulset
    pods = {p.metadata.name: p for p in core.list_namespaced_pod(namespace).items}
    assert sorted(pods) == ["web-0", "web-1", "web-2"]
    # OrderedReady: web-N is only created once web-(N-1) is Ready (timestamps are whole
    # seconds, hence >=).
    for prev, nxt in (("web-0", "web-1"), ("web-1", "web-2")):
        assert pods[nxt].metadata.creation_timestamp >= _ready_since(pods[prev])
        assert pods[nxt].metadata.creation_timestamp >= pods[prev].metadata.creation_timestamp

    old_uid = pods["web-1"].metadata.uid
    core.delete_namespaced_pod("web-1", namespace, grace_period_seconds=0)

    def recreated_ready() -> bool:
        try:
            pod = core.read_namespaced_pod("web-1", namespace)
        except ApiException as exc:
            if exc.status == 404:
                return False
            raise
        if pod.metadata.uid == old_uid:
            return False
        return any(c.type == "Ready" and c.status == "True" for c in (pod.status.conditions or []))

    wait_for("web-1 recreated and Ready", recreated_ready, timeout=180)


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_headless_service_resolves_through_cluster_dns(
    cluster_client: Any, statefulset: str, testbox_image: str
) -> None:
    core = k8s.CoreV1Api(cluster_client)
    namespace = statefulset
    fqdn = f"web.{namespace}.svc.cluster.local"
    script = f"nslookup {fqdn} && nslookup web-0.{fqdn}"
    core.create_namespaced_pod(
        namespace,
        k8s.V1Pod(
            metadata=k8s.V1ObjectMeta(name="dns-client"),
            spec=k8s.V1PodSpec(
                restart_policy="Never",
                containers=[_container("dns", testbox_image, ["sh", "-c", script])],
            ),
        ),
    )

    def finished() -> str | None:
        phase: str = core.read_namespaced_pod("dns-client", namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = wait_for("dns-client pod to finish", finished, timeout=180)
    logs = core.read_namespaced_pod_log("dns-client", namespace)
    assert phase == "Succeeded", logs
    web_pods = core.list_namespaced_pod(namespace, label_selector="app=web").items
    ips = {p.status.pod_ip for p in web_pods}
    found = {ip for ip in ips if ip and ip in logs}
    assert len(found) == 3, f"headless Service should resolve to all 3 pod IPs {ips}:\n{logs}"


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_owner_reference_gc_deletes_children(cluster_client: Any) -> None:
    owner_gc_scenario(cluster_client)


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_crd_status_patch_with_stale_resource_version_is_409(
    cluster_client: Any,
) -> None:
    crd_status_conflict_scenario(cluster_client)


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_pods_on_two_workers_reach_each_other_and_cluster_dns(
    kind_cluster: KindCluster, cluster_client: Any, testbox_image: str
) -> None:
    """The Pod network spans nodes: a Pod on one worker fetches from a Pod on another.

    The client also resolves ``kubernetes.default`` through CoreDNS, which may run on a third
    node, so DNS and Services are checked across nodes too.
    """
    workers = kind_cluster.worker_nodes()
    if len(workers) < 2:
        pytest.skip(f"needs two worker nodes, the cluster has workers={workers} (KIND_WORKERS)")
    assert kind_cluster.node_container(workers[0]) == workers[0]
    core = k8s.CoreV1Api(cluster_client)
    namespace = _namespace(cluster_client, "net")
    server_script = "mkdir -p /www && hostname > /www/index.html && exec httpd -f -p 8080 -h /www"
    try:
        core.create_namespaced_pod(
            namespace,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name="server"),
                spec=k8s.V1PodSpec(
                    node_name=workers[0],
                    containers=[_container("server", testbox_image, ["sh", "-c", server_script])],
                ),
            ),
        )
        server_ip = wait_for(
            "server Pod IP",
            lambda: core.read_namespaced_pod("server", namespace).status.pod_ip,
            timeout=120,
        )
        # busybox's static wget crashes in glibc's resolver; nc speaks the HTTP just as well.
        client_script = (
            f"printf 'GET / HTTP/1.0\\r\\n\\r\\n' | nc -w 5 {server_ip} 8080 | tail -1 && "
            "nslookup kubernetes.default.svc.cluster.local"
        )
        core.create_namespaced_pod(
            namespace,
            k8s.V1Pod(
                metadata=k8s.V1ObjectMeta(name="client"),
                spec=k8s.V1PodSpec(
                    node_name=workers[1],
                    restart_policy="Never",
                    containers=[_container("client", testbox_image, ["sh", "-c", client_script])],
                ),
            ),
        )

        def finished() -> str | None:
            phase: str = core.read_namespaced_pod("client", namespace).status.phase
            return phase if phase in ("Succeeded", "Failed") else None

        phase = wait_for("client Pod to finish", finished, timeout=180)
        logs = core.read_namespaced_pod_log("client", namespace)
        assert phase == "Succeeded", logs
        assert "server" in logs.splitlines()[0], logs
        service_ip = core.read_namespaced_service("kubernetes", "default").spec.cluster_ip
        assert service_ip in logs, logs
    finally:
        core.delete_namespace(namespace)


def _waiting(core: Any, namespace: str, pod: str) -> Any:
    statuses = core.read_namespaced_pod(pod, namespace).status.container_statuses or []
    return statuses[0].state.waiting if statuses else None


@pytest.mark.integration
@pytest.mark.cluster
def test_cluster_pulls_from_the_registry_with_the_pull_secret_and_a_wrong_one_is_refused(
    cluster_client: Any, image_registry: Registry
) -> None:
    """The test bed's registry as the cluster tier uses it: an image pushed from this machine
    is pulled by a node (TLS from the registry's CA, which containerd trusts; credentials from
    the Pod's ``imagePullSecrets`` only), and a Secret with a wrong password gets the
    registry's ``401 Unauthorized`` in the container's waiting message."""
    subprocess.run(["bash", str(HACK_KUBE / "images.sh"), "testbox"], check=True, timeout=600)
    ref = image_registry.push(TESTBOX_IMAGE)[TESTBOX_IMAGE]
    assert ref.startswith(f"{image_registry.pull_host}/snapshotjob/testbox@sha256:")
    core = k8s.CoreV1Api(cluster_client)
    namespace = _namespace(cluster_client, "registry")
    try:
        for name, password in (("right", None), ("wrong", "not-the-password")):
            secret = image_registry.pull_secret(namespace, name=f"pull-{name}", password=password)
            core.create_namespaced_secret(namespace, secret)
            # Always: a node that holds the image from an earlier pull still asks the registry.
            container = k8s.V1Container(
                name="box", image=ref, image_pull_policy="Always", command=["sleep", "600"]
            )
            spec = k8s.V1PodSpec(
                containers=[container],
                image_pull_secrets=[k8s.V1LocalObjectReference(name=f"pull-{name}")],
                termination_grace_period_seconds=0,
            )
            core.create_namespaced_pod(
                namespace, k8s.V1Pod(metadata=k8s.V1ObjectMeta(name=name), spec=spec)
            )
        wait_for(
            "the Pod with the right pull Secret running",
            lambda: core.read_namespaced_pod("right", namespace).status.phase == "Running",
            timeout=180,
        )
        waiting = wait_for(
            "the Pod with the wrong pull Secret failing to pull",
            lambda: (
                (w := _waiting(core, namespace, "wrong"))
                and w.reason in {"ErrImagePull", "ImagePullBackOff"}
                and w
            ),
            timeout=180,
        )
        assert "401 Unauthorized" in waiting.message, waiting.message
        assert core.read_namespaced_pod("wrong", namespace).status.phase == "Pending"
    finally:
        core.delete_namespace(namespace)
