"""The chart's partition groups on real members: losing a node (or a zone) loses no entry.

Three members of the test bed run the ``partition-group`` section the chart renders with
``hazelcast.partitionGroup.enabled`` and the member attribute its group type reads:

* ``NODE_AWARE``: the node attribute the StatefulSet sets (the ``-Dhazelcast.member.attribute``
  option of JAVA_OPTS, with the node name Kubernetes would substitute);
* ``ZONE_AWARE``: the zone attribute the zone init container writes into ``SJ_JAVA_OPTS_FILE``
  and the member launcher (``hack/images/hazelcast-member``) adds to JAVA_OPTS.

Two members are in group ``a``, one in group ``b``. Killing both members of ``a`` at once
(SIGKILL, no migration in between) keeps every entry of a map with one backup: each
partition's backup is in the other group than its owner. Without the groups, the same kill
loses the partitions whose owner and backup were both in ``a`` (about a third;
``test_backup_count.py`` shows that loss for four members).

The zone init container's program runs here against the control-plane test bed's real API
server, with a ServiceAccount token bound by the chart's ClusterRole: it writes the zone of a
labelled Node and refuses a Node without the label. The launcher runs with a stand-in
``java`` that prints its arguments.

The members join by TCP/IP on loopback, as the test bed's always do, rather than by the Pods'
DNS names; the chart's placement of members on real nodes of a multi-node cluster, and the
init container in a real Pod, are not tested here (nor on kind).
"""

from __future__ import annotations

import os
import ssl
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hazelcast.proxy.map import BlockingMap

from snapshotjob_contract import snapshot_map_name
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from tests.integration.chart_render import (
    CHART,
    REPO,
    by_kind,
    helm,
    member_config,
    member_env,
    pod_specs,
    render,
    run_helm,
)

pytestmark = [pytest.mark.helm, pytest.mark.timeout(300)]

GROUPS = ("a", "a", "b")
ENTRIES = 2000
ZONE_LABEL = "topology.kubernetes.io/zone"
ZONE_OPTION = "-Dhazelcast.member.attribute.hazelcast.partition.group.zone="
"""What Hazelcast's ZONE_AWARE group reads (PartitionGroupMetaData.PARTITION_GROUP_ZONE)."""
ZONE_AWARE = ("hazelcast.partitionGroup.enabled=true", "hazelcast.partitionGroup.type=ZONE_AWARE")
LAUNCHER = REPO / "hack" / "images" / "hazelcast-member"


def chart_partition_group(group_type: str) -> tuple[dict[str, object], Callable[[str], str]]:
    """The rendered ``partition-group`` section, and the JVM option that puts a member in a
    group, as the chart gives it to a member of that group type."""
    objects = render(
        "hazelcast.partitionGroup.enabled=true", f"hazelcast.partitionGroup.type={group_type}"
    )
    section = member_config(objects)["hazelcast"]["partition-group"]
    env = member_env(objects)
    attributes = [
        part
        for part in env["JAVA_OPTS"].split()
        if part.startswith("-Dhazelcast.member.attribute.")
    ]
    if group_type == "NODE_AWARE":
        [option] = attributes
        assert option.endswith("=$(SJ_NODE_NAME)"), option
        return section, lambda node: option.replace("$(SJ_NODE_NAME)", node)
    # ZONE_AWARE: no attribute in JAVA_OPTS; the zone comes from the init container's file
    # (test_the_zone_script_writes_a_labelled_node_s_zone_and_refuses_an_unlabelled_one
    # checks what it writes).
    assert attributes == [], attributes
    assert "SJ_JAVA_OPTS_FILE" in env
    return section, lambda zone: ZONE_OPTION + zone


@pytest.fixture(params=["NODE_AWARE", "ZONE_AWARE"])
def members_in_two_groups(
    request: pytest.FixtureRequest, tmp_path: Path
) -> Iterator[HazelcastCluster]:
    section, option = chart_partition_group(request.param)
    assert section == {"enabled": True, "group-type": request.param}
    (tmp_path / "hazelcast").mkdir()
    cluster = HazelcastCluster(
        tmp_path / "hazelcast",
        size=len(GROUPS),
        heap="256m",
        extra_config={"partition-group": section},
        member_options=[[option(group)] for group in GROUPS],
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_losing_every_member_of_one_group_loses_no_entry(
    members_in_two_groups: HazelcastCluster,
) -> None:
    cluster = members_in_two_groups
    client = cluster.client()
    name = snapshot_map_name(uuid.uuid4().hex[:8], 0, 1)
    entries: BlockingMap[int, bytes] = client.get_map(name).blocking()
    for key in range(ENTRIES):
        entries.set(key, b"x")
    cluster.wait_cluster_safe(expected_size=len(GROUPS))

    for index, group in enumerate(GROUPS):
        if group == "a":
            cluster.kill(index)
    cluster.wait_cluster_safe(expected_size=GROUPS.count("b"))

    assert client.get_map(name).blocking().size() == ENTRIES


# ------------------------------------------------------------------------------------------
# ZONE_AWARE: the members' account, its read access to nodes, the zone init container
# ------------------------------------------------------------------------------------------


def zone_objects(objects: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """What the chart renders for the members' zones: their ServiceAccount, the ClusterRole
    and its binding, and the member Pod's init containers."""
    member_pod = pod_specs(objects)["hazelcast"]["spec"]
    return {
        "accounts": [
            obj
            for obj in by_kind(objects, "ServiceAccount")
            if obj["metadata"]["labels"].get("app.kubernetes.io/component") == "hazelcast"
        ],
        "roles": [
            obj
            for obj in by_kind(objects, "ClusterRole")
            if "-hazelcast" in obj["metadata"]["name"]
        ],
        "bindings": [
            obj
            for obj in by_kind(objects, "ClusterRoleBinding")
            if "-hazelcast" in obj["metadata"]["name"]
        ],
        "init": member_pod.get("initContainers", []),
    }


def test_zone_aware_renders_the_members_account_a_node_reader_and_the_zone_init_container() -> None:
    objects = render(*ZONE_AWARE)
    found = zone_objects(objects)
    [account] = found["accounts"]
    [role] = found["roles"]
    [binding] = found["bindings"]
    [init] = found["init"]
    name = account["metadata"]["name"]
    assert name == "sj-snapshotjob-operator-hazelcast"
    assert account["metadata"]["namespace"] == "snapshots"
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get"]}]
    assert role["metadata"]["name"].startswith("sj-snapshotjob-operator-")
    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "ClusterRole",
        "name": role["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": name, "namespace": "snapshots"}
    ]

    member_pod = pod_specs(objects)["hazelcast"]["spec"]
    assert member_pod["serviceAccountName"] == name
    # The token is the init container's alone: the member container mounts no API access.
    assert member_pod["automountServiceAccountToken"] is False
    [member] = member_pod["containers"]
    token_volumes = {
        volume["name"]
        for volume in member_pod["volumes"]
        if any(
            "serviceAccountToken" in source
            for source in volume.get("projected", {}).get("sources", [])
        )
    }
    assert token_volumes
    assert {mount["name"] for mount in init["volumeMounts"]} & token_volumes
    assert not {mount["name"] for mount in member["volumeMounts"]} & token_volumes

    # The operator's image (it has Python; the member image has none) writes the file the
    # member's launcher reads, on a volume both mount.
    assert init["image"] == pod_specs(objects)["operator"]["spec"]["containers"][0]["image"]
    assert init["command"][:2] == ["python", "-c"]
    init_env = {item["name"]: item.get("value", item.get("valueFrom")) for item in init["env"]}
    assert init_env["SJ_NODE_NAME"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    java_opts_file = member_env(objects)["SJ_JAVA_OPTS_FILE"]
    assert init_env["SJ_JAVA_OPTS_FILE"] == java_opts_file
    assert member["command"] == ["hazelcast-member"]
    shared = {
        m["name"] for m in init["volumeMounts"] if java_opts_file.startswith(m["mountPath"] + "/")
    }
    assert shared
    assert shared == {
        m["name"] for m in member["volumeMounts"] if java_opts_file.startswith(m["mountPath"] + "/")
    }
    # Same join as NODE_AWARE: the Pods' DNS names, not Hazelcast's Kubernetes discovery.
    config = member_config(objects)["hazelcast"]
    assert config["partition-group"] == {"enabled": True, "group-type": "ZONE_AWARE"}
    assert "kubernetes" not in config["network"]["join"]
    assert config["network"]["join"]["tcp-ip"]["enabled"] is True


@pytest.mark.parametrize(
    "sets",
    [(), ("hazelcast.partitionGroup.enabled=true",), ("hazelcast.partitionGroup.type=ZONE_AWARE",)],
    ids=["disabled", "NODE_AWARE", "ZONE_AWARE-disabled"],
)
def test_without_zone_aware_groups_nothing_reads_nodes(sets: tuple[str, ...]) -> None:
    objects = render(*sets)
    assert zone_objects(objects) == {"accounts": [], "roles": [], "bindings": [], "init": []}
    member_pod = pod_specs(objects)["hazelcast"]["spec"]
    assert "serviceAccountName" not in member_pod
    assert "SJ_JAVA_OPTS_FILE" not in member_env(objects)


def test_zone_aware_without_the_launcher_is_refused() -> None:
    result = run_helm(
        "template",
        "sj",
        str(CHART),
        "--set",
        ",".join(ZONE_AWARE),
        "--set",
        "hazelcast.command=null",
    )
    assert result.returncode != 0
    assert "ZONE_AWARE needs the member image's launcher" in result.stderr, result.stderr


def test_the_launcher_adds_the_java_opts_file_to_java_opts(tmp_path: Path) -> None:
    """hazelcast-member with a ``java`` that prints its arguments, one a line."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "java").write_text('#!/bin/sh\nprintf "%s\\n" "$@"\n')
    (bin_dir / "java").chmod(0o755)
    opts = tmp_path / "java-opts"
    opts.write_text(ZONE_OPTION + "zone-b\n")

    def java_args(**env: str) -> list[str]:
        result = subprocess.run(
            ["/bin/sh", str(LAUNCHER)],
            env={"PATH": f"{bin_dir}:/usr/bin:/bin", "JAVA_OPTS": "-Xmx1g -Dx=y", **env},
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        )
        return result.stdout.splitlines()

    with_file = java_args(SJ_JAVA_OPTS_FILE=str(opts))
    assert [
        arg for arg in with_file if arg in ("-Xmx1g", "-Dx=y") or arg.startswith(ZONE_OPTION)
    ] == ["-Xmx1g", "-Dx=y", ZONE_OPTION + "zone-b"]
    assert with_file[-1] == "com.hazelcast.core.server.HazelcastMemberStarter"
    for env in ({}, {"SJ_JAVA_OPTS_FILE": str(tmp_path / "missing")}):
        args = java_args(**env)
        assert "-Xmx1g" in args
        assert not [arg for arg in args if arg.startswith(ZONE_OPTION)]


# ------------------------------------------------------------------------------------------
# The zone init container's program against a real API server
# ------------------------------------------------------------------------------------------


@pytest.fixture
def zone_reader(kube_api: KubeAPI, tmp_path: Path) -> Iterator[dict[str, Any]]:
    """The chart's ZONE_AWARE account, ClusterRole and binding applied to the control plane
    (a release and namespace of their own), a token of that account, and the init container."""
    suffix = uuid.uuid4().hex[:6]
    release, namespace = f"zone-{suffix}", f"zone-{suffix}"
    rendered = helm(
        "template", release, str(CHART), "--namespace", namespace, "--set", ",".join(ZONE_AWARE)
    )
    objects = [doc for doc in yaml.safe_load_all(rendered) if doc]
    found = zone_objects(objects)
    rbac = [*found["accounts"], *found["roles"], *found["bindings"]]
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(rbac))
    kube_api.kubectl("create", "namespace", namespace)
    try:
        kube_api.kubectl("apply", "-f", str(manifest))
        account = found["accounts"][0]["metadata"]["name"]
        token = tmp_path / "token"
        token.write_text(kube_api.kubectl("create", "token", account, "--namespace", namespace))
        [init] = found["init"]
        yield {"init": init, "token": token, "suffix": suffix}
    finally:
        kube_api.kubectl("delete", "--ignore-not-found", "--wait=false", "-f", str(manifest))
        kube_api.kubectl("delete", "namespace", namespace, "--wait=false")


def create_node(kube_api: KubeAPI, tmp_path: Path, name: str, labels: dict[str, str]) -> None:
    path = tmp_path / f"{name}.yaml"
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}
    path.write_text(yaml.safe_dump(node))
    kube_api.kubectl("create", "-f", str(path))


def run_zone_script(
    kube_api: KubeAPI, init: dict[str, Any], token: Path, node: str, java_opts: Path
) -> subprocess.CompletedProcess[str]:
    """The init container's command (python -c <program>), with its env, pointed at the test
    bed's API server instead of the in-cluster one."""
    assert init["command"][:2] == ["python", "-c"]
    env = {item["name"]: item.get("value") for item in init["env"]}
    env.update(
        SJ_NODE_NAME=node,
        SJ_JAVA_OPTS_FILE=str(java_opts),
        SJ_KUBE_API=kube_api.server,
        SJ_KUBE_TOKEN_FILE=str(token),
        SJ_KUBE_CA_FILE=str(kube_api.state_dir / "pki" / "ca.crt"),
        PATH=os.environ.get("PATH", "/usr/bin:/bin"),
    )
    return subprocess.run(
        [sys.executable, *init["command"][1:]],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.kube
def test_the_zone_script_writes_a_labelled_node_s_zone_and_refuses_an_unlabelled_one(
    kube_api: KubeAPI, zone_reader: dict[str, Any], tmp_path: Path
) -> None:
    suffix = zone_reader["suffix"]
    zoned, bare = f"zoned-{suffix}", f"bare-{suffix}"
    create_node(kube_api, tmp_path, zoned, {ZONE_LABEL: "zone-b", "kubernetes.io/hostname": zoned})
    create_node(kube_api, tmp_path, bare, {"kubernetes.io/hostname": bare})
    try:
        java_opts = tmp_path / "java-opts"
        result = run_zone_script(
            kube_api, zone_reader["init"], zone_reader["token"], zoned, java_opts
        )
        assert result.returncode == 0, result.stderr
        assert java_opts.read_text() == ZONE_OPTION + "zone-b\n"

        missing = tmp_path / "java-opts-bare"
        result = run_zone_script(kube_api, zone_reader["init"], zone_reader["token"], bare, missing)
        assert result.returncode != 0
        assert result.stderr.strip() == (
            f"node {bare} has no topology.kubernetes.io/zone label: "
            "ZONE_AWARE needs every member's node labelled"
        )
        assert not missing.exists()

        # The account may get a node, and only that: listing nodes is forbidden.
        context = ssl.create_default_context(cafile=str(kube_api.state_dir / "pki" / "ca.crt"))
        bearer = {"Authorization": "Bearer " + zone_reader["token"].read_text().strip()}
        request = urllib.request.Request(kube_api.server + "/api/v1/nodes", headers=bearer)
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(request, context=context, timeout=30)
        assert refused.value.code == 403
    finally:
        kube_api.kubectl("delete", "node", zoned, bare, "--ignore-not-found", "--wait=false")
