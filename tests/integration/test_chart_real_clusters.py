"""The chart's knobs for clusters that pull from a registry and place the store on real nodes.

Rendered with the real ``helm``: a global registry and digests in every image the chart
renders, the pull Secrets handed to the jobs as the operator reads them, ``kubeVersion``, and
the members' anti-affinity, zone spread and partition groups. That the partition-group config
the chart renders keeps a node's loss from losing data on real members is
``test_partition_group.py``'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from snapshot_operator.settings import parse_settings
from tests.integration.chart_render import (
    CHART,
    RELEASE,
    assert_schema_refuses,
    by_kind,
    member_config,
    member_env,
    operator,
    pod_specs,
    render,
    run_helm,
    values_file,
)

pytestmark = pytest.mark.helm

APP_VERSION = yaml.safe_load((CHART / "Chart.yaml").read_text())["appVersion"]
DIGEST = "sha256:" + "0123456789abcdef" * 4
SELECTOR = {
    "app.kubernetes.io/name": "snapshotjob-operator",
    "app.kubernetes.io/instance": RELEASE,
    "app.kubernetes.io/component": "hazelcast",
}


def images(objects: list[dict[str, Any]]) -> dict[str, str]:
    """The image of the operator, of the members and of the ``helm test`` Pod."""
    (test_pod,) = by_kind(objects, "Pod")
    specs = pod_specs(objects)
    return {
        "operator": specs["operator"]["spec"]["containers"][0]["image"],
        "hazelcast": specs["hazelcast"]["spec"]["containers"][0]["image"],
        "test": test_pod["spec"]["containers"][0]["image"],
    }


def operator_env(objects: list[dict[str, Any]]) -> dict[str, str]:
    container = operator(objects)["spec"]["template"]["spec"]["containers"][0]
    return {item["name"]: item["value"] for item in container["env"] if "value" in item}


# --- Images ----------------------------------------------------------------------------------


def test_an_empty_tag_is_the_app_version_and_the_registry_prefixes_every_image() -> None:
    operator_image = f"snapshotjob/operator:{APP_VERSION}"
    member_image = f"snapshotjob/member:{APP_VERSION}"
    assert images(render()) == {
        "operator": operator_image,
        "hazelcast": member_image,
        "test": operator_image,
    }
    for registry in ("registry.example.com:5000/mirror", "registry.example.com:5000/mirror/"):
        mirror = "registry.example.com:5000/mirror"
        assert images(render(f"global.imageRegistry={registry}")) == {
            "operator": f"{mirror}/{operator_image}",
            "hazelcast": f"{mirror}/{member_image}",
            "test": f"{mirror}/{operator_image}",
        }


def test_a_digest_replaces_the_tag(tmp_path: Path) -> None:
    values = {
        "global": {"imageRegistry": "registry.example.com"},
        "operator": {"image": {"tag": "1.0.0", "digest": DIGEST}},
        "hazelcast": {"image": {"repository": "hazelcast/hazelcast", "tag": "5.6.0"}},
    }
    objects = render(values=(values_file(tmp_path, "digest", values),))
    assert images(objects) == {
        "operator": f"registry.example.com/snapshotjob/operator@{DIGEST}",
        "hazelcast": "registry.example.com/hazelcast/hazelcast:5.6.0",
        "test": f"registry.example.com/snapshotjob/operator@{DIGEST}",
    }
    members = render(f"hazelcast.image.digest={DIGEST}")
    assert images(members)["hazelcast"] == f"snapshotjob/member@{DIGEST}"


# --- Pull Secrets for the jobs ---------------------------------------------------------------


def test_the_jobs_pull_secrets_reach_the_operator_s_settings(tmp_path: Path) -> None:
    assert "SJ_OPERATOR_JOB_IMAGE_PULL_SECRETS" not in operator_env(render())
    assert parse_settings(["-A"], operator_env(render())).job_image_pull_secrets == ()
    values = {"jobs": {"imagePullSecrets": [{"name": "registry-a"}, {"name": "registry-b"}]}}
    objects = render(values=(values_file(tmp_path, "jobs", values),))
    env = operator_env(objects)
    assert env["SJ_OPERATOR_JOB_IMAGE_PULL_SECRETS"] == "registry-a,registry-b"
    assert parse_settings([], env).job_image_pull_secrets == ("registry-a", "registry-b")
    # The operator's and members' own Secrets are another value.
    for template in pod_specs(objects).values():
        assert "imagePullSecrets" not in template["spec"]


# --- kubeVersion -----------------------------------------------------------------------------


def test_helm_refuses_a_kubernetes_older_than_the_chart_s_kube_version() -> None:
    kube_version = yaml.safe_load((CHART / "Chart.yaml").read_text())["kubeVersion"]
    assert kube_version == ">=1.29.0-0"
    old = run_helm("template", RELEASE, str(CHART), "--kube-version", "1.28.9")
    assert old.returncode != 0, "a 1.28 cluster was accepted"
    assert "kubeVersion" in old.stderr, old.stderr
    for version in ("1.29.0", "1.34.10"):
        result = run_helm("template", RELEASE, str(CHART), "--kube-version", version)
        assert result.returncode == 0, result.stderr


# --- Member placement ------------------------------------------------------------------------


def test_member_anti_affinity_is_preferred_unless_required() -> None:
    term = {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": SELECTOR}}
    preferred = pod_specs(render())["hazelcast"]["spec"]["affinity"]["podAntiAffinity"]
    assert preferred == {
        "preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 100, "podAffinityTerm": term}
        ]
    }
    objects = render("hazelcast.antiAffinity=required")
    required = pod_specs(objects)["hazelcast"]["spec"]["affinity"]["podAntiAffinity"]
    assert required == {"requiredDuringSchedulingIgnoredDuringExecution": [term]}


def test_members_spread_over_zones_on_request(tmp_path: Path) -> None:
    assert "topologySpreadConstraints" not in pod_specs(render())["hazelcast"]["spec"]
    for when in ("ScheduleAnyway", "DoNotSchedule"):
        spec = pod_specs(render(f"hazelcast.zoneSpread={when}"))["hazelcast"]["spec"]
        assert spec["topologySpreadConstraints"] == [
            {
                "maxSkew": 1,
                "topologyKey": "topology.kubernetes.io/zone",
                "whenUnsatisfiable": when,
                "labelSelector": {"matchLabels": SELECTOR},
            }
        ]
    own = [{"maxSkew": 2, "topologyKey": "example.com/rack", "whenUnsatisfiable": "DoNotSchedule"}]
    values = {"hazelcast": {"zoneSpread": "ScheduleAnyway", "topologySpreadConstraints": own}}
    objects = render(values=(values_file(tmp_path, "spread", values),))
    assert pod_specs(objects)["hazelcast"]["spec"]["topologySpreadConstraints"] == own


def test_node_aware_partition_groups_name_each_member_s_node() -> None:
    """NODE_AWARE reads the member attribute hazelcast.partition.group.node. The chart sets it
    from the Pod's spec.nodeName, and joins by TCP/IP over the Pods' DNS names: Hazelcast's
    Kubernetes discovery in DNS mode would overwrite the attribute with "unknown"."""
    default = render()
    assert "partition-group" not in member_config(default)["hazelcast"]
    assert "SJ_NODE_NAME" not in member_env(default)
    assert "kubernetes" in member_config(default)["hazelcast"]["network"]["join"]

    objects = render("hazelcast.partitionGroup.enabled=true")
    config = member_config(objects)["hazelcast"]
    assert config["partition-group"] == {"enabled": True, "group-type": "NODE_AWARE"}
    join = config["network"]["join"]
    assert "kubernetes" not in join
    store_members = operator_env(objects)["SJ_OPERATOR_STORE_MEMBERS"].split(",")
    assert join["tcp-ip"] == {"enabled": True, "member-list": store_members}
    assert len(store_members) == 3
    env = member_env(objects)
    assert env["SJ_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    # Kubernetes expands $(SJ_NODE_NAME) only from a variable defined before it.
    names = list(env)
    assert names.index("SJ_NODE_NAME") < names.index("JAVA_OPTS")
    assert env["JAVA_OPTS"].endswith(
        " -Dhazelcast.member.attribute.hazelcast.partition.group.node=$(SJ_NODE_NAME)"
    )
    # A new config is a new member template: the operator restarts the members one by one.
    annotation = "checksum/config"
    before = pod_specs(default)["hazelcast"]["metadata"]["annotations"][annotation]
    assert pod_specs(objects)["hazelcast"]["metadata"]["annotations"][annotation] != before


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("jobs.imagePullSecret[0].name=x", "imagePullSecret"),
        ("jobs.imagePullSecrets[0].nme=x", "nme"),
        ("operator.image.digst=x", "digst"),
        ("operator.image.digest=latest", "digest"),
        ("global.imageRegistry=https://registry.example.com", "imageRegistry"),
        ("hazelcast.antiAffinity=always", "antiAffinity"),
        ("hazelcast.zoneSpread=Sometimes", "zoneSpread"),
        ("hazelcast.partitionGroup.enable=true", "enable"),
        ("hazelcast.partitionGroup.type=HOST_AWARE", "type"),
    ],
)
def test_the_schema_refuses_typos_in_these_knobs(value: str, wrong: str) -> None:
    assert_schema_refuses(value, wrong)
