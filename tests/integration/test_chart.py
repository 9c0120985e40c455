"""The Helm chart: it lints, renders, and grants and configures what the operator relies on.

Rendering with the real ``helm`` (built by ``hack/kube/build.sh`` with the rest of the
Kubernetes binaries) checks the templates as users will run them; the assertions then tie the
rendered objects to the code: the operator's permissions cover the driver Role it grants
(Kubernetes refuses to grant more than the granter holds), the store members the operator is
given are the StatefulSet's Pods, and the member config holds the protocol's settings. Helm
also validates every values combination the project installs with against
values.schema.json; the install notes name the release's objects; the PodMonitors, alerts and
dashboard use the metrics, ports and Pod labels of snapshotjob_contract; and the ``helm test``
Pod's script runs here against fake endpoints (the same Pod on kind: ``helm test``).
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, ClassVar

import pytest
import yaml

from examples import demo_cluster
from snapshot_operator.manifests import build_role
from snapshot_operator.reconcile import JobRef
from snapshot_operator.settings import parse_settings
from snapshotjob_contract import (
    SPLIT_BRAIN_PROTECTION,
    member_map_backup_counts,
    member_map_merge_policy,
)
from snapshotjob_contract.observability import (
    DRIVER_METRICS,
    METRICS_PATH,
    METRICS_PORT_NAME,
    OPERATOR_METRICS,
    OPERATOR_METRICS_PORT,
    LogFormat,
    MetricType,
)
from snapshotjob_contract.pods import LABEL_COMPONENT, LABEL_JOB, LABEL_MANAGED_BY, MANAGED_BY
from testbed import images
from testbed.registry import Registry
from tests.e2e import release as e2e_release
from tests.fixtures.kube import binary
from tests.integration.chart_render import (
    CHART,
    NAMESPACE,
    RELEASE,
    REPO,
    assert_schema_refuses,
    by_kind,
    covers,
    helm,
    operator,
    pod_specs,
    render,
    run_helm,
)
from tests.integration.chart_render import values_file as _values_file

pytestmark = pytest.mark.helm

KIND_VALUES = REPO / "examples" / "kubernetes" / "values-kind.yaml"
LOCAL_VALUES = CHART / "values-local.yaml"
APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]


def named(objects: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    """The one rendered object of a kind and name."""
    (obj,) = [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]
    return obj


HAZELCAST_SERVICE = f"{RELEASE}-snapshotjob-operator-hazelcast"


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    """The operator container's plain environment variables."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


def lint(*args: str) -> str:
    """``helm lint --strict`` with more arguments; fails on any warning or error."""
    out = helm("lint", str(CHART), "--strict", "--namespace", NAMESPACE, *args)
    assert "0 chart(s) failed" in out, out
    assert not re.search(r"\[(WARNING|ERROR)\]", out), out
    return out


def test_chart_lints() -> None:
    lint()


@pytest.mark.parametrize(
    "args",
    [
        ("--values", str(LOCAL_VALUES)),
        ("--values", str(KIND_VALUES)),
        (
            "--set",
            "metrics.podMonitor.enabled=true,metrics.prometheusRule.enabled=true,"
            "metrics.dashboard.enabled=true",
        ),
        ("--set", "metrics.enabled=false,tests.enabled=false,hazelcast.enabled=false"),
        ("--set", "operator.allNamespaces=false,operator.namespaces={team-a,team-b}"),
        ("--set", "peering.enabled=false,operator.replicas=1"),
    ],
    ids=["values-local", "values-kind", "monitoring", "minimal", "namespaced", "standalone"],
)
def test_chart_lints_with_the_values_it_is_installed_with(args: tuple[str, ...]) -> None:
    lint(*args)


def test_operator_holds_every_permission_it_grants_to_drivers() -> None:
    objects = render()
    (role,) = [
        r
        for r in by_kind(objects, "ClusterRole")
        if r["metadata"]["name"] == RELEASE + "-snapshotjob-operator"
    ]
    driver_rules = build_role(JobRef("ns", "job", "uid"))["rules"]
    for rule in driver_rules:
        assert covers(role["rules"], rule), f"operator cannot grant {rule}"
    for needed in (
        {
            "apiGroups": ["snapshotjob.io"],
            "resources": ["snapshotjobs"],
            "verbs": ["watch", "patch"],
        },
        {"apiGroups": ["snapshotjob.io"], "resources": ["snapshotjobs/status"], "verbs": ["patch"]},
        {
            "apiGroups": ["snapshotjob.io"],
            "resources": ["snapshotjobexports"],
            "verbs": ["list", "watch", "create", "patch", "delete"],
        },
        {
            "apiGroups": ["snapshotjob.io"],
            "resources": ["snapshotjobexports/status"],
            "verbs": ["patch"],
        },
        {"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]},
        {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create"]},
        {
            "apiGroups": ["rbac.authorization.k8s.io"],
            "resources": ["roles", "rolebindings"],
            "verbs": ["create"],
        },
        {"apiGroups": ["kopf.dev"], "resources": ["kopfpeerings"], "verbs": ["patch"]},
    ):
        assert covers(role["rules"], needed), f"operator lacks {needed}"
    (binding,) = [
        b
        for b in by_kind(objects, "ClusterRoleBinding")
        if b["roleRef"]["name"] == role["metadata"]["name"]
    ]
    (account,) = by_kind(objects, "ServiceAccount")
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]
    assert env_of(by_kind(objects, "Deployment")[0])["SJ_OPERATOR_ALL_NAMESPACES"] == "true"
    assert [p["kind"] for p in objects if p["apiVersion"] == "kopf.dev/v1"] == [
        "ClusterKopfPeering"
    ]


def test_namespaced_mode_grants_roles_only_where_it_watches() -> None:
    objects = render("operator.allNamespaces=false", "operator.namespaces={team-a,team-b}")
    roles = [
        r
        for r in by_kind(objects, "Role")
        if r["metadata"]["name"] == f"{RELEASE}-snapshotjob-operator"
    ]
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        for rule in build_role(JobRef("ns", "job", "uid"))["rules"]:
            assert covers(role["rules"], rule)
    cluster_roles = by_kind(objects, "ClusterRole")
    assert [r["metadata"]["name"] for r in cluster_roles] == [
        f"{RELEASE}-snapshotjob-operator-discovery"
    ]
    assert not any(rule["resources"] == ["pods"] for r in cluster_roles for rule in r["rules"]), (
        "no cluster-wide Pod access in namespaced mode"
    )
    env = env_of(by_kind(objects, "Deployment")[0])
    assert env["SJ_OPERATOR_NAMESPACES"] == "team-a,team-b"
    peerings = [p for p in objects if p["kind"] == "KopfPeering"]
    assert sorted(p["metadata"]["namespace"] for p in peerings) == ["team-a", "team-b"]


def test_namespaced_mode_without_namespaces_is_refused() -> None:
    result = subprocess.run(
        [
            str(binary("helm")),
            "template",
            RELEASE,
            str(CHART),
            "--set",
            "operator.allNamespaces=false",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "operator.namespaces must list namespaces" in result.stderr


@pytest.mark.parametrize("replicas", [3, 5])
def test_hazelcast_statefulset_and_operator_agree_on_the_members(replicas: int) -> None:
    objects = render(f"hazelcast.replicas={replicas}")
    (statefulset,) = by_kind(objects, "StatefulSet")
    service = named(objects, "Service", HAZELCAST_SERVICE)
    assert statefulset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert statefulset["spec"]["replicas"] == replicas
    assert service["spec"]["clusterIP"] == "None"
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    name = statefulset["metadata"]["name"]
    members = env_of(by_kind(objects, "Deployment")[0])["SJ_OPERATOR_STORE_MEMBERS"].split(",")
    assert members == [f"{name}-{i}.{name}.{NAMESPACE}.svc:5701" for i in range(replicas)]
    pdb = named(objects, "PodDisruptionBudget", HAZELCAST_SERVICE)
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == statefulset["spec"]["selector"]["matchLabels"]


def test_a_chart_version_bump_leaves_the_member_template_alone(tmp_path: Path) -> None:
    """A new chart version (and appVersion) restarts no store member.

    The StatefulSet's revision is a hash of its Pod template, and the operator restarts the
    members one by one when the revision changes (``snapshot_operator.rollout``): a template
    that carried the chart's version would roll the whole store at every chart upgrade. The
    operator's own Deployment does change, which shows the bump is there to see; a change of
    the member config still changes the template (its checksum annotation).
    """
    bumped = tmp_path / CHART.name
    shutil.copytree(CHART, bumped)
    meta = yaml.safe_load((bumped / "Chart.yaml").read_text())
    meta["version"], meta["appVersion"] = "99.1.0", "99.1.0"
    (bumped / "Chart.yaml").write_text(yaml.safe_dump(meta))
    # An install names its image's tag; an empty one is the appVersion's image, whose new
    # image is what should restart the members (below).
    tag = "hazelcast.image.tag=1.0.0"

    before, after = render(tag), render(tag, chart=bumped)

    (old_members,) = by_kind(before, "StatefulSet")
    (new_members,) = by_kind(after, "StatefulSet")
    assert new_members["spec"]["template"] == old_members["spec"]["template"]
    assert new_members["metadata"]["labels"] != old_members["metadata"]["labels"]
    old_operator, new_operator = operator(before), operator(after)
    assert new_operator["spec"]["template"] != old_operator["spec"]["template"]
    (reconfigured,) = by_kind(
        render(tag, "hazelcast.clusterName=other", chart=bumped), "StatefulSet"
    )
    assert reconfigured["spec"]["template"] != new_members["spec"]["template"]
    # With the default tag the image follows the appVersion, and nothing else changes.
    (default_before,) = by_kind(render(), "StatefulSet")
    (default_after,) = by_kind(render(chart=bumped), "StatefulSet")
    old_pod, new_pod = default_before["spec"]["template"], default_after["spec"]["template"]
    assert new_pod["spec"]["containers"][0].pop("image") == "snapshotjob/member:99.1.0"
    old_pod["spec"]["containers"][0].pop("image")
    assert new_pod == old_pod


def test_hazelcast_member_config() -> None:
    objects = render("hazelcast.backupCount=2", "hazelcast.clusterName=store-1")
    (config_map,) = by_kind(objects, "ConfigMap")
    config = yaml.safe_load(config_map["data"]["hazelcast.yaml"])["hazelcast"]
    service = named(objects, "Service", HAZELCAST_SERVICE)
    assert config["cluster-name"] == "store-1"
    assert config["jet"]["enabled"] is False
    assert config["map"]["__sj.*"]["backup-count"] == 2
    # A job's maps and exports get the contract's counts, whatever the chart's default.
    counts = {pattern: map_config["backup-count"] for pattern, map_config in config["map"].items()}
    assert counts == {"__sj.*": 2, **member_map_backup_counts()}
    assert {map_config["async-backup-count"] for map_config in config["map"].values()} == {0}
    # The store defends itself: a majority of the 3 members, and the contract's merge policies.
    assert config["split-brain-protection"] == {
        SPLIT_BRAIN_PROTECTION: {
            "enabled": True,
            "minimum-cluster-size": 2,
            "protect-on": "READ_WRITE",
        }
    }
    for pattern, map_config in config["map"].items():
        assert map_config["split-brain-protection-ref"] == SPLIT_BRAIN_PROTECTION, pattern
        assert map_config["merge-policy"]["class-name"] == member_map_merge_policy(pattern)
    assert member_map_merge_policy("__sj.export.*") == "DiscardMergePolicy"
    five = yaml.safe_load(
        by_kind(render("hazelcast.replicas=5"), "ConfigMap")[0]["data"]["hazelcast.yaml"]
    )["hazelcast"]
    assert five["split-brain-protection"][SPLIT_BRAIN_PROTECTION]["minimum-cluster-size"] == 3
    unprotected = yaml.safe_load(
        by_kind(render("hazelcast.splitBrainProtection.enabled=false"), "ConfigMap")[0]["data"][
            "hazelcast.yaml"
        ]
    )["hazelcast"]
    assert "split-brain-protection" not in unprotected
    assert all("split-brain-protection-ref" not in m for m in unprotected["map"].values())
    network = config["network"]
    assert network["rest-api"]["endpoint-groups"]["HEALTH_CHECK"]["enabled"] is True
    assert network["join"]["multicast"]["enabled"] is False
    kubernetes = network["join"]["kubernetes"]
    assert kubernetes["enabled"] is True
    assert kubernetes["service-dns"] == (
        f"{service['metadata']['name']}.{NAMESPACE}.svc.cluster.local"
    )
    properties = config["properties"]
    assert properties["hazelcast.operation.backup.timeout.millis"] == 5000
    assert properties["hazelcast.shutdownhook.policy"] == "GRACEFUL"
    env = env_of(by_kind(objects, "Deployment")[0])
    assert env["SJ_OPERATOR_STORE_CLUSTER_NAME"] == "store-1"


def test_without_peering_the_operator_runs_standalone() -> None:
    objects = render("peering.enabled=false", "operator.replicas=1")
    container = by_kind(objects, "Deployment")[0]["spec"]["template"]["spec"]["containers"][0]
    assert "--standalone" in container["args"]
    assert not [obj for obj in objects if obj["apiVersion"] == "kopf.dev/v1"]


def test_the_default_images_are_the_ones_make_builds() -> None:
    """The operator and the test Pod default to the operator image, the members (with the
    image's launcher) to the member image, each tagged with the chart's appVersion, which
    ``make release`` builds; values-local.yaml sets ``dev``, the tag ``make images-app`` builds
    (hack/images/build.sh, the names of hack/images/images.env)."""
    built = images.split_images()
    assert built["operator"] == "snapshotjob/operator:dev"
    assert built["member"] == "snapshotjob/member:dev"
    objects = render()
    operator_pod = operator(objects)["spec"]["template"]["spec"]
    member_pod = by_kind(objects, "StatefulSet")[0]["spec"]["template"]["spec"]
    (test_pod,) = by_kind(objects, "Pod")
    for container, target in (
        (operator_pod["containers"][0], "operator"),
        (member_pod["containers"][0], "member"),
        (test_pod["spec"]["containers"][0], "operator"),
    ):
        assert container["image"] == built[target].replace(":dev", f":{APP_VERSION}")
        assert container["imagePullPolicy"] == "IfNotPresent"
    assert member_pod["containers"][0]["command"] == ["hazelcast-member"]
    assert (REPO / "hack" / "images" / "hazelcast-member").exists()
    assert (
        "COPY bin/hazelcast-member /usr/local/bin/hazelcast-member"
        in (REPO / "hack" / "images" / "member.Dockerfile").read_text()
    )
    # values-local.yaml: the same images, never pulled (they only exist where they were loaded).
    local = render(values=(LOCAL_VALUES,))
    for workload, target in (
        (operator(local), "operator"),
        (by_kind(local, "StatefulSet")[0], "member"),
    ):
        container = workload["spec"]["template"]["spec"]["containers"][0]
        assert (container["image"], container["imagePullPolicy"]) == (built[target], "Never")


def test_hazelcast_members_may_run_another_image_with_its_launcher() -> None:
    official = render(
        "hazelcast.image.repository=hazelcast/hazelcast",
        "hazelcast.image.tag=5.6.0",
        "hazelcast.command=null",
    )
    container = by_kind(official, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "hazelcast/hazelcast:5.6.0"
    assert "command" not in container and "args" not in container
    # By default the members collect with G1 in 1 MiB regions, whichever image runs them.
    assert {e["name"]: e["value"] for e in container["env"]}["JAVA_OPTS"] == (
        "-Dhazelcast.config=/etc/hazelcast/hazelcast.yaml -Xms1g -Xmx1g -XX:+UseG1GC"
        " -XX:G1HeapRegionSize=1m"
    )
    objects = render(
        "hazelcast.image.repository=snapshotjob/member",
        "hazelcast.image.tag=dev",
        "hazelcast.command={hazelcast-member}",
        "hazelcast.args={--verbose}",
        "hazelcast.heap=256m",
        "hazelcast.javaOpts=-XX:+UseSerialGC",
    )
    container = by_kind(objects, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "snapshotjob/member:dev"
    assert container["command"] == ["hazelcast-member"]
    assert container["args"] == ["--verbose"]
    java_opts = {e["name"]: e["value"] for e in container["env"]}["JAVA_OPTS"]
    assert java_opts == (
        "-Dhazelcast.config=/etc/hazelcast/hazelcast.yaml -Xms256m -Xmx256m -XX:+UseSerialGC"
    )


def _store_role(objects: list[dict[str, Any]]) -> dict[str, Any]:
    (role,) = [
        r
        for r in by_kind(objects, "Role")
        if r["metadata"]["name"] == f"{RELEASE}-snapshotjob-operator-store"
    ]
    return role


@pytest.mark.parametrize(
    "sets",
    [(), ("operator.allNamespaces=false", "operator.namespaces={team-a}", "hazelcast.replicas=5")],
)
def test_operator_restarts_the_store_members_with_least_privilege(sets: tuple[str, ...]) -> None:
    objects = render(*sets)
    (statefulset,) = by_kind(objects, "StatefulSet")
    name = statefulset["metadata"]["name"]
    env = env_of(by_kind(objects, "Deployment")[0])
    assert env["SJ_OPERATOR_STORE_STATEFULSET"] == name
    assert env["SJ_OPERATOR_STORE_NAMESPACE"] == NAMESPACE == statefulset["metadata"]["namespace"]

    # Its own Role in the release namespace, watched or not, bound to the operator.
    role = _store_role(objects)
    assert role["metadata"]["namespace"] == NAMESPACE
    rules = {
        (rule["apiGroups"][0], rule["resources"][0], *rule["verbs"]): rule for rule in role["rules"]
    }
    assert rules.keys() == {
        ("apps", "statefulsets", "get"),
        ("", "pods", "list"),
        ("", "pods", "delete"),
        ("events.k8s.io", "events", "create"),
    }
    assert rules[("apps", "statefulsets", "get")]["resourceNames"] == [name]
    replicas = statefulset["spec"]["replicas"]
    assert rules[("", "pods", "delete")]["resourceNames"] == [
        f"{name}-{i}" for i in range(replicas)
    ]
    (binding,) = [
        b
        for b in by_kind(objects, "RoleBinding")
        if b["roleRef"]
        == {
            "apiGroup": "rbac.authorization.k8s.io",
            "kind": "Role",
            "name": role["metadata"]["name"],
        }
    ]
    (account,) = by_kind(objects, "ServiceAccount")
    assert binding["metadata"]["namespace"] == NAMESPACE
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account["metadata"]["name"], "namespace": NAMESPACE}
    ]


def test_without_hazelcast_no_store_restarts() -> None:
    objects = render("hazelcast.enabled=false")
    env = env_of(by_kind(objects, "Deployment")[0])
    assert "SJ_OPERATOR_STORE_STATEFULSET" not in env
    assert not [r for r in by_kind(objects, "Role") if r["metadata"]["name"].endswith("-store")]


def test_the_kind_values_place_the_installation_on_the_control_plane_node() -> None:
    """``examples/kubernetes/values-kind.yaml``, what ``make demo`` and the e2e tests use."""
    values = CHART.parents[1] / "examples" / "kubernetes" / "values-kind.yaml"
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE, "--values", str(values)]
    objects = [doc for doc in yaml.safe_load_all(helm(*args)) if doc]
    placed = by_kind(objects, "Deployment") + by_kind(objects, "StatefulSet")
    assert len(placed) == 2, [obj["metadata"]["name"] for obj in placed]
    for obj in placed:
        pod = obj["spec"]["template"]["spec"]
        assert pod["nodeSelector"] == {"node-role.kubernetes.io/control-plane": ""}, obj
        assert pod["tolerations"][0]["key"] == "node-role.kubernetes.io/control-plane", obj
    members = by_kind(objects, "StatefulSet")[0]
    assert members["spec"]["replicas"] == 3
    assert members["spec"]["template"]["spec"]["containers"][0]["command"] == ["hazelcast-member"]


DURABLE_VALUES = (
    "durableStorage.bucket=snapshots",
    "durableStorage.prefix=prod/jobs",
    "durableStorage.endpoint=http://minio.storage:9000",
    "durableStorage.credentialsSecret=snapshots-s3",
)


def test_the_charts_durable_storage_is_the_operators_default() -> None:
    assert not [name for name in env_of(operator(render())) if "DURABLE" in name]
    env = env_of(operator(render(*DURABLE_VALUES)))
    # The operator reads the Deployment's environment exactly as the chart writes it.
    storage = parse_settings(["--namespace", "jobs"], env).durable_storage
    assert storage is not None
    assert (storage.bucket, storage.prefix, storage.endpoint, storage.region) == (
        "snapshots",
        "prod/jobs",
        "http://minio.storage:9000",
        "us-east-1",
    )
    assert storage.credentials_secret == "snapshots-s3"
    # Disposing of an export's copy: the operator's own credentials, from the same Secret.
    container = operator(render(*DURABLE_VALUES))["spec"]["template"]["spec"]["containers"][0]
    secret_refs = {
        item["name"]: item["valueFrom"]["secretKeyRef"]
        for item in container["env"]
        if "secretKeyRef" in item.get("valueFrom", {})
    }
    assert {name: (ref["name"], ref["key"]) for name, ref in secret_refs.items()} == {
        "AWS_ACCESS_KEY_ID": ("snapshots-s3", "accessKeyId"),
        "AWS_SECRET_ACCESS_KEY": ("snapshots-s3", "secretAccessKey"),
    }


def test_durable_storage_without_a_credentials_secret_gives_the_operator_no_keys() -> None:
    """The AWS SDK's default chain then finds the operator's credentials (e.g. IRSA through
    serviceAccount.annotations)."""
    deployment = operator(render("durableStorage.bucket=x"))
    (container,) = deployment["spec"]["template"]["spec"]["containers"]
    names = {item["name"] for item in container["env"]}
    assert "SJ_OPERATOR_DURABLE_BUCKET" in names
    assert not names & {
        "SJ_OPERATOR_DURABLE_CREDENTIALS_SECRET",
        "AWS_ACCESS_KEY_ID",
        "AWS_SECRET_ACCESS_KEY",
    }


# --- Values schema ---------------------------------------------------------------------------


def test_every_values_the_project_installs_with_meet_the_schema(tmp_path: Path) -> None:
    """What tests/e2e (conftest's install, the lifecycle test's upgrade), ``make demo``
    (examples/demo_cluster.py) and the values files in the repository give the chart."""
    # The test bed's registry as the cluster tier and the demo describe it; only its names
    # reach the values, so none runs here.
    registry = Registry(
        push_host="127.0.0.1:5000",
        pull_host="sj-registry:5000",
        user="snapshotjob",
        password_file=tmp_path / "password",
        ca=tmp_path / "ca.crt",
        secret="sj-registry",
        helm_registry_config=tmp_path / "registry.json",
    )
    service_images = {
        target: f"sj-registry:5000/snapshotjob/{target}@sha256:" + "0" * 64
        for target in ("operator", "member")
    }
    e2e = e2e_release.chart_values(registry, service_images)
    e2e["operator"] |= {"allNamespaces": False, "namespaces": ["sj-e2e-abc123"]}
    e2e_file = _values_file(tmp_path, "e2e", e2e)
    demo_file = _values_file(
        tmp_path,
        "demo",
        demo_cluster.chart_values(
            "snapshotjob-demo", service_images["operator"], service_images["member"], registry
        ),
    )
    for values, sets in (
        ((e2e_file,), ()),
        (
            (e2e_file,),
            (
                "hazelcast.javaOpts=-XX:+UseG1GC -XX:G1HeapRegionSize=1m"
                " -Dsnapshotjob.e2e.rollout=1",
            ),
        ),
        ((demo_file,), ()),
        ((KIND_VALUES,), ()),
        ((LOCAL_VALUES,), ()),
        ((LOCAL_VALUES,), ("operator.replicas=2",)),
        # docs/getting-started/quickstart.md: values-local.yaml, then values-kind.yaml for its
        # placement.
        ((LOCAL_VALUES, KIND_VALUES), ()),
        ((LOCAL_VALUES,), ("operator.image.tag=v2", "hazelcast.image.tag=v2")),
    ):
        objects = render(*sets, values=values)
        assert operator(objects)["spec"]["replicas"] >= 1
    # The e2e install watches its namespace only and pulls its image from the test bed's
    # registry, by digest, with the registry's pull Secret.
    e2e_objects = render(values=(e2e_file,))
    pod = operator(e2e_objects)["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"] == service_images["operator"]
    assert pod["containers"][0]["imagePullPolicy"] == "IfNotPresent"
    members = by_kind(e2e_objects, "StatefulSet")[0]["spec"]["template"]["spec"]
    assert members["containers"][0]["image"] == service_images["member"]
    assert pod["imagePullSecrets"] == [{"name": "sj-registry"}]
    assert env_of(operator(e2e_objects))["SJ_OPERATOR_NAMESPACES"] == "sj-e2e-abc123"


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("operator.replica=2", "replica"),  # a typo
        ("operatr.replicas=2", "operatr"),
        ("hazelcast.resources.request.cpu=1", "request"),
        ("metrics.podMonitor.enable=true", "enable"),
        ("operator.logLevel=TRACE", "logLevel"),
        ("operator.image.pullPolicy=Sometimes", "pullPolicy"),
        ("hazelcast.replicas=0", "replicas"),
        ("hazelcast.backupCount=7", "backupCount"),
        ("metrics.port=70000", "port"),
        ("hazelcast.heap=lots", "heap"),
        ("tests.timeoutSeconds=0", "timeoutSeconds"),
        ("durableStorage.snapshotCopyIntervalSeconds=5", "snapshotCopyIntervalSeconds"),
        ("operator.allNamespaces=yes", "allNamespaces"),
        ("hazelcast.command=[]", "command"),  # a string to --set
        ("hazelcast.command={}", "command"),  # [""]
    ],
)
def test_the_schema_refuses_typos_and_wrong_values(value: str, wrong: str) -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", value)
    assert result.returncode != 0, f"{value} was accepted"
    assert "schema" in result.stderr, result.stderr
    assert wrong in result.stderr, result.stderr


def test_several_replicas_without_peering_are_refused() -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set", "peering.enabled=false")
    assert result.returncode != 0
    assert "operator.replicas must be 1" in result.stderr


def test_two_replicas_with_peering_by_default_spread_over_nodes() -> None:
    """The operator draws a random peering priority per replica (snapshot_operator.__main__),
    so two replicas of one Deployment never tie: one works, the other stands by."""
    objects = render()
    deployment = operator(objects)
    assert deployment["spec"]["replicas"] == 2
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert "--standalone" not in container["args"]
    assert "--priority" not in " ".join(container["args"])
    assert [p["kind"] for p in objects if p["apiVersion"] == "kopf.dev/v1"] == [
        "ClusterKopfPeering"
    ]
    spread = deployment["spec"]["template"]["spec"]["affinity"]["podAntiAffinity"]
    (term,) = spread["preferredDuringSchedulingIgnoredDuringExecution"]
    assert (
        term["podAffinityTerm"]["labelSelector"]["matchLabels"]
        == (deployment["spec"]["selector"]["matchLabels"])
    )


# --- Install notes ---------------------------------------------------------------------------


def notes(tmp_path: Path, *sets: str) -> str:
    """The NOTES.txt an install prints, rendered without a cluster.

    ``helm template`` renders NOTES.txt but prints nothing of it, and an install, even a
    client-side dry run, needs an API server; so a copy of the chart gets one more template:
    a ConfigMap holding NOTES.txt rendered by the same engine, values and release.
    """
    chart = tmp_path / "chart"
    if not chart.exists():
        shutil.copytree(CHART, chart)
        body = (CHART / "templates" / "NOTES.txt").read_text()
        (chart / "templates" / "zz-notes.yaml").write_text(
            '{{- define "sj.test.notes" -}}\n' + body + "\n{{- end -}}\n"
            "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: notes}\n"
            'data: {notes: {{ include "sj.test.notes" . | quote }}}\n'
        )
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE]
    args += ["--show-only", "templates/zz-notes.yaml"]
    for value in sets:
        args += ["--set", value]
    text: str = yaml.safe_load(helm(*args))["data"]["notes"]
    return text


def test_the_install_notes_name_the_releases_objects(tmp_path: Path) -> None:
    text = notes(tmp_path)
    fullname = f"{RELEASE}-snapshotjob-operator"
    for expected in (
        f"kubectl -n {NAMESPACE} rollout status deployment/{fullname}",
        f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=hazelcast",
        f"kubectl -n {NAMESPACE} port-forward pod/{fullname}-hazelcast-0 5701",
        "/hazelcast/health",
        f"helm test {RELEASE} -n {NAMESPACE}",
        "kubectl get clusterkopfpeering snapshotjob-operator",
        "examples/kubernetes/snapshotjob.yaml",
        "examples/kubernetes/postgres.yaml",
        "values-local.yaml",
        f"kind load docker-image snapshotjob/operator:{APP_VERSION} "
        f"snapshotjob/member:{APP_VERSION}",
        "make images-app",
        "docs/reference/operator.md",
        "charts/snapshotjob-operator/README.md",
    ):
        assert expected in text, f"{expected!r} not in the notes:\n{text}"
    namespaced = notes(
        tmp_path, "operator.allNamespaces=false", "operator.namespaces={team-a,team-b}"
    )
    assert "kubectl -n team-a apply -f examples/kubernetes/snapshotjob.yaml" in namespaced
    assert "kopfpeering -n team-a snapshotjob-operator" in namespaced
    assert "It watches SnapshotJobs in team-a, team-b." in namespaced
    elsewhere = notes(
        tmp_path, "operator.image.repository=registry.example/sj", "hazelcast.enabled=false"
    )
    assert "kind load" not in elsewhere
    assert "kind load" not in notes(tmp_path, "global.imageRegistry=registry.example")
    assert "spec.hazelcast.address" in elsewhere


# --- Metrics ---------------------------------------------------------------------------------


def test_the_operator_serves_metrics_on_the_contracts_port() -> None:
    deployment = operator(render())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert f"--metrics-port={OPERATOR_METRICS_PORT}" in container["args"]
    ports = {p["name"]: p["containerPort"] for p in container["ports"]}
    assert ports[METRICS_PORT_NAME] == OPERATOR_METRICS_PORT
    off = operator(render("metrics.enabled=false"))["spec"]["template"]["spec"]["containers"][0]
    assert not [a for a in off["args"] if a.startswith("--metrics-port")]
    assert METRICS_PORT_NAME not in {p["name"] for p in off["ports"]}
    assert not [p for p in render() if p["kind"] in ("PodMonitor", "PrometheusRule")]


def test_the_operator_reads_its_metrics_port_and_log_format_as_the_chart_writes_them() -> None:
    for sets, port, log_format in (
        ((), OPERATOR_METRICS_PORT, LogFormat.TEXT),
        (("metrics.port=9500", "operator.logFormat=json"), 9500, LogFormat.JSON),
        (("metrics.enabled=false",), None, LogFormat.TEXT),
    ):
        deployment = operator(render(*sets))
        args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        settings = parse_settings(args, env_of(deployment))
        assert (settings.metrics_port, settings.log_format) == (port, log_format), sets
    # The schema knows the operator's formats, and no other.
    assert {f.value for f in LogFormat} == set(
        json.loads((CHART / "values.schema.json").read_text())["properties"]["operator"][
            "properties"
        ]["logFormat"]["enum"]
    )


MONITORING = (
    "metrics.podMonitor.enabled=true",
    "metrics.prometheusRule.enabled=true",
    "metrics.dashboard.enabled=true",
)

_METRIC = re.compile(r"\bsnapshotjob_[a-z0-9_]+")


def known_metric_names() -> set[str]:
    """Every series name the operator and the driver serve, with a histogram's suffixes."""
    names = set()
    for metric in (*OPERATOR_METRICS, *DRIVER_METRICS):
        names.add(metric.name)
        if metric.type == MetricType.HISTOGRAM:
            names |= {metric.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    return names


def dashboard_queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL query of a Grafana dashboard: panel targets and template variables."""
    queries = []
    panels = list(dashboard["panels"])
    while panels:
        panel = panels.pop()
        panels += panel.get("panels", [])
        queries += [target["expr"] for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            queries.append(query["query"])
    return queries


def test_pod_monitors_select_the_operator_and_the_drivers_by_the_contracts_labels() -> None:
    objects = render(*MONITORING)
    fullname = f"{RELEASE}-snapshotjob-operator"
    operator_monitor = named(objects, "PodMonitor", f"{fullname}-operator")
    assert operator_monitor["apiVersion"] == "monitoring.coreos.com/v1"
    pod_labels = operator(objects)["spec"]["template"]["metadata"]["labels"]
    selector = operator_monitor["spec"]["selector"]["matchLabels"]
    assert selector.items() <= pod_labels.items()
    assert operator_monitor["spec"]["namespaceSelector"] == {"matchNames": [NAMESPACE]}
    (endpoint,) = operator_monitor["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (METRICS_PORT_NAME, METRICS_PATH)

    drivers = named(objects, "PodMonitor", f"{fullname}-drivers")
    # The labels the operator puts on every driver Pod (snapshotjob_contract.pods).
    assert drivers["spec"]["selector"]["matchLabels"] == {
        LABEL_COMPONENT: "driver",
        LABEL_MANAGED_BY: MANAGED_BY,
    }
    assert drivers["spec"]["namespaceSelector"] == {"any": True}
    (endpoint,) = drivers["spec"]["podMetricsEndpoints"]
    assert (endpoint["port"], endpoint["path"]) == (METRICS_PORT_NAME, METRICS_PATH)
    relabeled = {r["targetLabel"]: r["sourceLabels"] for r in endpoint["relabelings"]}
    job_label = "__meta_kubernetes_pod_label_" + re.sub(r"[^A-Za-z0-9_]", "_", LABEL_JOB)
    assert relabeled["snapshotjob"] == [job_label]
    assert relabeled["namespace"] == ["__meta_kubernetes_namespace"]

    namespaced = render(*MONITORING, "operator.allNamespaces=false", "operator.namespaces={a,b}")
    drivers = named(namespaced, "PodMonitor", f"{fullname}-drivers")
    assert drivers["spec"]["namespaceSelector"] == {"matchNames": ["a", "b"]}
    labelled = render(*MONITORING, "metrics.podMonitor.labels.release=kube-prometheus-stack")
    for monitor in by_kind(labelled, "PodMonitor"):
        assert monitor["metadata"]["labels"]["release"] == "kube-prometheus-stack"


def test_alerts_and_dashboard_use_only_the_metrics_the_programs_serve() -> None:
    objects = render(
        *MONITORING,
        "metrics.prometheusRule.snapshotAgeIntervals=4",
        "metrics.prometheusRule.restartsIn15Minutes=6",
    )
    known = known_metric_names()

    (rule,) = by_kind(objects, "PrometheusRule")
    assert rule["apiVersion"] == "monitoring.coreos.com/v1"
    rules = {r["alert"]: r for group in rule["spec"]["groups"] for r in group["rules"]}
    assert rules.keys() == {
        "SnapshotJobSnapshotTooOld",
        "SnapshotJobFailed",
        "SnapshotJobSourceFallingBehind",
        "SnapshotJobRestartLoop",
        "SnapshotJobStoreNotClusterSafe",
        "SnapshotJobStoreFillingUp",
    }
    for name, alert in rules.items():
        used = set(_METRIC.findall(alert["expr"]))
        assert used, name
        assert used <= known, f"{name} uses unknown metrics {used - known}"
    too_old = rules["SnapshotJobSnapshotTooOld"]["expr"]
    # The restore point's age across executions: the operator's series, not a driver's.
    assert (
        "4 * max by (namespace, snapshotjob) (snapshotjob_operator_job_snapshot_interval_seconds)"
        in too_old
    )
    assert "snapshotjob_operator_job_last_snapshot_timestamp_seconds" in too_old
    assert 'snapshotjob_operator_job_phase{phase="FAILED"}' in rules["SnapshotJobFailed"]["expr"]
    assert (
        "increase(snapshotjob_operator_restarts_total[15m])"
        in (rules["SnapshotJobRestartLoop"]["expr"])
    )
    assert rules["SnapshotJobRestartLoop"]["expr"].endswith("> 6")
    assert rules["SnapshotJobStoreNotClusterSafe"]["expr"] == (
        "snapshotjob_operator_store_cluster_safe == 0"
    )
    assert rules["SnapshotJobStoreNotClusterSafe"]["for"] == "5m"

    (config_map,) = [
        c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-dashboard")
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    (raw,) = config_map["data"].values()
    dashboard = json.loads(raw)
    assert dashboard == json.loads((CHART / "dashboards" / "snapshotjob.json").read_text())
    queries = dashboard_queries(dashboard)
    used = {name for query in queries for name in _METRIC.findall(query)}
    assert used <= known, f"the dashboard uses unknown metrics {used - known}"
    # The panels the dashboard promises, by the metric each one draws.
    for wanted in (
        "snapshotjob_operator_jobs",
        "snapshotjob_operator_reconcile_duration_seconds_bucket",
        "snapshotjob_operator_reconcile_errors_total",
        "snapshotjob_operator_restarts_total",
        "snapshotjob_driver_snapshot_duration_seconds_bucket",
        "snapshotjob_driver_snapshot_size_bytes",
        "snapshotjob_driver_last_successful_snapshot_timestamp_seconds",
        "snapshotjob_driver_snapshot_interval_seconds",
        "snapshotjob_driver_rows_in_total",
        "snapshotjob_driver_rows_out_total",
        "snapshotjob_driver_epoch_duration_seconds_bucket",
        "snapshotjob_operator_store_members_reachable",
        "snapshotjob_operator_store_cluster_safe",
        "snapshotjob_operator_job_phase",
        "snapshotjob_operator_job_last_snapshot_timestamp_seconds",
        "snapshotjob_operator_job_snapshot_size_bytes",
        "snapshotjob_driver_source_records_behind",
    ):
        assert wanted in used, f"no panel draws {wanted}"
    # Driver series are told apart by the label the drivers' PodMonitor writes.
    assert any('snapshotjob=~"$snapshotjob"' in query for query in queries)
    elsewhere = render("metrics.dashboard.enabled=true", "metrics.dashboard.namespace=grafana")
    (moved,) = [c for c in by_kind(elsewhere, "ConfigMap") if "-dashboard" in c["metadata"]["name"]]
    assert moved["metadata"]["namespace"] == "grafana"


# --- helm test -------------------------------------------------------------------------------


def helm_test_pod(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The ``helm test`` hook Pod."""
    (pod,) = [
        p for p in by_kind(objects, "Pod") if p["metadata"]["annotations"]["helm.sh/hook"] == "test"
    ]
    return pod


def test_the_helm_test_pod_checks_the_releases_operator_and_store() -> None:
    objects = render()
    pod = helm_test_pod(objects)
    assert pod["metadata"]["name"] == f"{RELEASE}-snapshotjob-operator-test-health"
    assert "before-hook-creation" in pod["metadata"]["annotations"]["helm.sh/hook-delete-policy"]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["automountServiceAccountToken"] is False
    (container,) = pod["spec"]["containers"]
    deployment = operator(objects)
    operator_container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == operator_container["image"]
    env = {e["name"]: e["value"] for e in container["env"]}
    # The store members the operator is given, and the operator Pods' headless Service.
    assert env["SJ_TEST_STORE_MEMBERS"] == env_of(deployment)["SJ_OPERATOR_STORE_MEMBERS"]
    assert env["SJ_TEST_STORE_SIZE"] == "3"
    service = named(objects, "Service", f"{RELEASE}-snapshotjob-operator")
    assert env["SJ_TEST_OPERATOR_SERVICE"] == f"{service['metadata']['name']}.{NAMESPACE}.svc"
    assert service["spec"]["clusterIP"] == "None"
    assert service["spec"]["selector"].items() <= (
        deployment["spec"]["template"]["metadata"]["labels"].items()
    )
    ports = {p["name"]: p["containerPort"] for p in operator_container["ports"]}
    assert int(env["SJ_TEST_LIVENESS_PORT"]) == ports["liveness"]
    assert int(env["SJ_TEST_METRICS_PORT"]) == ports[METRICS_PORT_NAME]
    assert operator_container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    without_store = helm_test_pod(render("hazelcast.enabled=false", "metrics.enabled=false"))
    env = {e["name"]: e["value"] for e in without_store["spec"]["containers"][0]["env"]}
    assert env["SJ_TEST_STORE_MEMBERS"] == env["SJ_TEST_METRICS_PORT"] == ""
    assert not by_kind(render("tests.enabled=false"), "Pod")


class _Fake(BaseHTTPRequestHandler):
    """An operator's /healthz and /metrics, and a member's /hazelcast/health."""

    health: ClassVar[dict[str, Any]] = {}

    def do_GET(self) -> None:
        if self.path in ("/healthz", "/metrics"):
            body = b"{}"
        elif self.path == "/hazelcast/health":
            body = json.dumps(type(self).health).encode()
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


@contextmanager
def _fake_server() -> Iterator[int]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


def _run_test_pod(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """Runs the test Pod's script here, with the project's code, as the Pod would."""
    container = helm_test_pod(render())["spec"]["containers"][0]
    command = container["command"]
    assert command[:2] == ["python", "-c"]
    return subprocess.run(
        [sys.executable, "-c", command[2]],
        env={"PYTHONPATH": f"{REPO / 'operator'}:{REPO}", "PATH": "/usr/bin:/bin", **env},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_the_helm_test_script_passes_on_a_healthy_installation_and_names_each_problem() -> None:
    healthy = {
        "nodeState": "ACTIVE",
        "clusterState": "ACTIVE",
        "clusterSafe": True,
        "migrationQueueSize": 0,
        "clusterSize": 3,
    }
    with _fake_server() as port:
        env = {
            "SJ_TEST_OPERATOR_SERVICE": "127.0.0.1",
            "SJ_TEST_LIVENESS_PORT": str(port),
            "SJ_TEST_METRICS_PORT": str(port),
            "SJ_TEST_STORE_MEMBERS": ",".join([f"127.0.0.1:{port}"] * 3),
            "SJ_TEST_STORE_SIZE": "3",
            "SJ_TEST_TIMEOUT_SECONDS": "0",
        }
        _Fake.health = healthy
        passed = _run_test_pod(env)
        assert passed.returncode == 0, passed.stdout + passed.stderr
        assert passed.stdout.startswith("OK: operator Pods 127.0.0.1 healthy; store: 3 members")

        _Fake.health = healthy | {"clusterSafe": False}
        unsafe = _run_test_pod(env)
        assert unsafe.returncode == 1
        assert "FAILED: store member 127.0.0.1" in unsafe.stdout
        assert "not ACTIVE and cluster-safe" in unsafe.stdout

        _Fake.health = healthy | {"clusterSize": 2}
        small = _run_test_pod(env)
        assert small.returncode == 1
        assert "sees 2 members, not 3" in small.stdout

        # No store of the release's own (hazelcast.enabled=false): the operator alone.
        operator_only = _run_test_pod(env | {"SJ_TEST_STORE_MEMBERS": ""})
        assert operator_only.returncode == 0, operator_only.stdout + operator_only.stderr
        assert "store: not installed by this release" in operator_only.stdout

        with _fake_server() as closed:
            pass  # a port nothing listens on any more
        down = _run_test_pod(env | {"SJ_TEST_LIVENESS_PORT": str(closed)})
        assert down.returncode == 1
        assert f"operator Pod 127.0.0.1: /healthz on port {closed}: no answer" in down.stdout


# --- Knobs for real clusters -----------------------------------------------------------------

FULLNAME = f"{RELEASE}-snapshotjob-operator"


def test_the_new_knobs_leave_the_default_rendering_as_it_was() -> None:
    """Unset, the knobs add nothing to the Pods and keep the security contexts the chart
    always had; the operator's ServiceAccount keeps its name in every binding."""
    objects = render()
    for template in pod_specs(objects).values():
        for key in ("imagePullSecrets", "priorityClassName", "topologySpreadConstraints"):
            assert key not in template["spec"]
    templates = pod_specs(objects)
    assert "annotations" not in templates["operator"]["metadata"]
    assert list(templates["hazelcast"]["metadata"]["annotations"]) == ["checksum/config"]
    assert templates["operator"]["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert templates["operator"]["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    assert templates["hazelcast"]["spec"]["securityContext"] == {
        "runAsNonRoot": True,
        "runAsUser": 10001,
        "fsGroup": 10001,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    assert templates["hazelcast"]["spec"]["containers"][0]["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "readOnlyRootFilesystem": True,
        "capabilities": {"drop": ["ALL"]},
    }
    # Least privilege: no API token in a member, /tmp its only writable directory.
    member_spec = templates["hazelcast"]["spec"]
    assert member_spec["automountServiceAccountToken"] is False
    assert {"name": "tmp", "mountPath": "/tmp"} in member_spec["containers"][0]["volumeMounts"]
    assert {"name": "tmp", "emptyDir": {}} in member_spec["volumes"]
    assert set(templates["hazelcast"]["metadata"]["labels"]) == {
        "app.kubernetes.io/name",
        "app.kubernetes.io/instance",
        "app.kubernetes.io/component",
        "app.kubernetes.io/managed-by",
    }
    (account,) = by_kind(objects, "ServiceAccount")
    assert account["metadata"]["name"] == FULLNAME
    assert "annotations" not in account["metadata"]
    assert templates["operator"]["spec"]["serviceAccountName"] == FULLNAME
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        assert [s["name"] for s in binding["subjects"]] == [FULLNAME]


def test_image_pull_secrets_reach_the_operator_the_members_and_the_test_pod(
    tmp_path: Path,
) -> None:
    secrets = [{"name": "registry-a"}, {"name": "registry-b"}]
    objects = render(values=(_values_file(tmp_path, "pull", {"imagePullSecrets": secrets}),))
    for template in pod_specs(objects).values():
        assert template["spec"]["imagePullSecrets"] == secrets
    # helm test's Pod runs the operator's image, on a node that may not hold it yet.
    (test_pod,) = by_kind(objects, "Pod")
    assert test_pod["spec"]["imagePullSecrets"] == secrets
    assert "imagePullSecrets" not in by_kind(render(), "Pod")[0]["spec"]


@pytest.mark.parametrize("component", ["operator", "hazelcast"])
def test_pod_annotations_and_labels_are_added_to_the_chart_s_own(
    tmp_path: Path, component: str
) -> None:
    before = pod_specs(render())[component]["metadata"]
    values = {
        component: {
            "podAnnotations": {"example.com/team": "data", "sidecar.io/inject": "false"},
            "podLabels": {"team": "data", "example.com/cost-centre": "42"},
        }
    }
    objects = render(values=(_values_file(tmp_path, "pod-meta", values),))
    metadata = pod_specs(objects)[component]["metadata"]
    assert metadata["labels"] == before["labels"] | {
        "team": "data",
        "example.com/cost-centre": "42",
    }
    assert metadata["annotations"] == before.get("annotations", {}) | {
        "example.com/team": "data",
        "sidecar.io/inject": "false",
    }


@pytest.mark.parametrize("component", ["operator", "hazelcast"])
def test_pod_labels_may_not_touch_the_chart_s_labels(component: str) -> None:
    result = run_helm(
        "template",
        RELEASE,
        str(CHART),
        "--set",
        f"{component}.podLabels.app\\.kubernetes\\.io/name=x",
    )
    assert result.returncode != 0, "a reserved label was accepted"
    assert (
        f"{component}.podLabels: the label app.kubernetes.io/name is reserved" in result.stderr
    ), result.stderr


@pytest.mark.parametrize("component", ["operator", "hazelcast"])
def test_priority_class_and_topology_spread_constraints(tmp_path: Path, component: str) -> None:
    spread = [
        {
            "maxSkew": 1,
            "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app.kubernetes.io/component": component}},
        }
    ]
    values = {component: {"priorityClassName": "critical", "topologySpreadConstraints": spread}}
    objects = render(values=(_values_file(tmp_path, "placement", values),))
    templates = pod_specs(objects)
    assert templates[component]["spec"]["priorityClassName"] == "critical"
    assert templates[component]["spec"]["topologySpreadConstraints"] == spread
    (other,) = {"operator", "hazelcast"} - {component}
    assert "priorityClassName" not in templates[other]["spec"]
    assert "topologySpreadConstraints" not in templates[other]["spec"]


@pytest.mark.parametrize("component", ["operator", "hazelcast"])
def test_security_contexts_allow_arbitrary_uids(component: str) -> None:
    """OpenShift's restricted SCC assigns the UID: runAsUser (and fsGroup) null drop them."""
    default = pod_specs(render())[component]["spec"]
    dropped = ["runAsUser", "fsGroup"] if component == "hazelcast" else ["runAsUser"]
    objects = render(
        *(f"{component}.podSecurityContext.{key}=null" for key in dropped),
        f"{component}.containerSecurityContext.runAsNonRoot=true",
    )
    spec = pod_specs(objects)[component]["spec"]
    expected = {k: v for k, v in default["securityContext"].items() if k not in dropped}
    assert spec["securityContext"] == expected
    assert spec["containers"][0]["securityContext"] == default["containers"][0][
        "securityContext"
    ] | {"runAsNonRoot": True}


def test_the_service_account_may_be_named_and_annotated(tmp_path: Path) -> None:
    annotations = {"iam.gke.io/gcp-service-account": "sj@project.iam.gserviceaccount.com"}
    values = {"serviceAccount": {"name": "sj-operator", "annotations": annotations}}
    for sets in ((), ("operator.allNamespaces=false", "operator.namespaces={a,b}")):
        objects = render(*sets, values=(_values_file(tmp_path, "account", values),))
        (account,) = by_kind(objects, "ServiceAccount")
        assert account["metadata"]["name"] == "sj-operator"
        assert account["metadata"]["annotations"] == annotations
        assert operator(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "sj-operator"
        bindings = by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding")
        assert len(bindings) >= 3
        for binding in bindings:
            assert binding["subjects"] == [
                {"kind": "ServiceAccount", "name": "sj-operator", "namespace": NAMESPACE}
            ]


def test_an_existing_service_account_is_used_and_must_be_named() -> None:
    objects = render("serviceAccount.create=false", "serviceAccount.name=provided")
    assert by_kind(objects, "ServiceAccount") == []
    assert operator(objects)["spec"]["template"]["spec"]["serviceAccountName"] == "provided"
    for binding in by_kind(objects, "ClusterRoleBinding") + by_kind(objects, "RoleBinding"):
        assert [s["name"] for s in binding["subjects"]] == ["provided"]
    result = run_helm("template", RELEASE, str(CHART), "--set", "serviceAccount.create=false")
    assert result.returncode != 0
    assert "serviceAccount.name must name an existing ServiceAccount" in result.stderr


@pytest.mark.parametrize("replicas", [0, 1, 2, 3])
def test_the_operator_pdb_keeps_a_stand_by_and_never_blocks_a_lone_replica(
    replicas: int,
) -> None:
    sets = ("peering.enabled=false",) if replicas <= 1 else ()
    objects = render(f"operator.replicas={replicas}", *sets)
    budgets = [
        pdb
        for pdb in by_kind(objects, "PodDisruptionBudget")
        if pdb["metadata"]["name"] == FULLNAME
    ]
    if replicas <= 1:
        assert budgets == []
        return
    (pdb,) = budgets
    assert pdb["apiVersion"] == "policy/v1"
    assert pdb["spec"] == {
        "maxUnavailable": 1,
        "selector": {"matchLabels": operator(objects)["spec"]["selector"]["matchLabels"]},
    }


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("imagePullSecrets[0].nam=x", "nam"),
        ("serviceAccount.crate=false", "crate"),
        ("operator.priorityClass=x", "priorityClass"),
        ("hazelcast.podLabel.a=b", "podLabel"),
        ("operator.topologySpreadConstraints=x", "topologySpreadConstraints"),
    ],
)
def test_the_schema_refuses_typos_in_the_new_knobs(value: str, wrong: str) -> None:
    assert_schema_refuses(value, wrong)
