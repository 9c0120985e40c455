"""The Helm chart: it lints, renders, and grants and configures what the operator relies on.

Rendering with the real ``helm`` (built by ``hack/kube/build.sh`` with the rest of the
Kubernetes binaries) checks the templates as users will run them; the assertions then tie the
rendered objects to the code: the operator's permissions cover the driver Role it grants
(Kubernetes refuses to grant more than the granter holds), the store members the operator is
given are the StatefulSet's Pods, and the member config holds the protocol's settings.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from snapshot_operator.manifests import build_role
from snapshot_operator.reconcile import JobRef
from snapshot_operator.settings import parse_settings
from snapshotjob_contract import (
    SPLIT_BRAIN_PROTECTION,
    member_map_backup_counts,
    member_map_merge_policy,
)
from tests.fixtures.kube import binary

pytestmark = pytest.mark.helm

CHART = Path(__file__).resolve().parents[2] / "charts" / "snapshotjob-operator"
RELEASE = "sj"
NAMESPACE = "snapshots"


def helm(*args: str) -> str:
    """Runs the built helm binary; fails the test with helm's message if it fails."""
    result = subprocess.run(
        [str(binary("helm")), *args], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def render(*sets: str) -> list[dict[str, Any]]:
    """Renders the chart's templates with ``--set`` values."""
    args = ["template", RELEASE, str(CHART), "--namespace", NAMESPACE]
    for value in sets:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The rendered objects of one kind."""
    return [obj for obj in objects if obj["kind"] == kind]


def covers(rules: list[dict[str, Any]], wanted: dict[str, Any]) -> bool:
    """Whether some rule grants every verb of ``wanted`` on each of its resources."""
    for resource in wanted["resources"]:
        for verb in wanted["verbs"]:
            if not any(
                set(wanted["apiGroups"]) <= set(rule["apiGroups"])
                and resource in rule["resources"]
                and verb in rule["verbs"]
                and "resourceNames" not in rule
                for rule in rules
            ):
                return False
    return True


def env_of(deployment: dict[str, Any]) -> dict[str, str]:
    """The operator container's plain environment variables."""
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


def test_chart_lints() -> None:
    assert "0 chart(s) failed" in helm("lint", str(CHART), "--strict")


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
    (service,) = by_kind(objects, "Service")
    assert statefulset["spec"]["updateStrategy"] == {"type": "OnDelete"}
    assert statefulset["spec"]["replicas"] == replicas
    assert service["spec"]["clusterIP"] == "None"
    assert statefulset["spec"]["serviceName"] == service["metadata"]["name"]
    name = statefulset["metadata"]["name"]
    members = env_of(by_kind(objects, "Deployment")[0])["SJ_OPERATOR_STORE_MEMBERS"].split(",")
    assert members == [f"{name}-{i}.{name}.{NAMESPACE}.svc:5701" for i in range(replicas)]
    (pdb,) = by_kind(objects, "PodDisruptionBudget")
    assert pdb["spec"]["maxUnavailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == statefulset["spec"]["selector"]["matchLabels"]


def test_hazelcast_member_config() -> None:
    objects = render("hazelcast.backupCount=2", "hazelcast.clusterName=store-1")
    (config_map,) = by_kind(objects, "ConfigMap")
    config = yaml.safe_load(config_map["data"]["hazelcast.yaml"])["hazelcast"]
    (service,) = by_kind(objects, "Service")
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


def test_hazelcast_members_may_run_another_image_with_its_launcher() -> None:
    (default,) = by_kind(render(), "StatefulSet")
    container = default["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "hazelcast/hazelcast:5.6.0"
    assert "command" not in container and "args" not in container
    objects = render(
        "hazelcast.image.repository=snapshotjob/runtime",
        "hazelcast.image.tag=dev",
        "hazelcast.command={hazelcast-member}",
        "hazelcast.args={--verbose}",
        "hazelcast.heap=256m",
        "hazelcast.javaOpts=-XX:+UseSerialGC",
    )
    container = by_kind(objects, "StatefulSet")[0]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "snapshotjob/runtime:dev"
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


def test_durable_storage_without_its_credentials_secret_is_refused() -> None:
    result = subprocess.run(
        [str(binary("helm")), "template", RELEASE, str(CHART), "--set", "durableStorage.bucket=x"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode != 0
    assert "durableStorage.credentialsSecret names the Secret" in result.stderr


def operator(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator's Deployment."""
    [deployment] = by_kind(objects, "Deployment")
    return deployment
