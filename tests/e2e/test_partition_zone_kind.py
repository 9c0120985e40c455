"""The chart's ZONE_AWARE zone lookup in a real Pod: the member learns its node's zone.

Why this test: the downward API cannot give a Pod its node's labels, so with
``hazelcast.partitionGroup.type=ZONE_AWARE`` each member Pod's ``zone`` init container reads its
Node through the API server, with the members' own ServiceAccount (``get`` on nodes, nothing
else) and a token only that container mounts. ``tests/integration/test_partition_group.py``
runs the script against a bare API server and the partition groups on real members; this
test runs what the chart renders (the account, its ClusterRole and binding, the init
container with its projected token and the cluster's CA, the operator's image) in a Pod on
kind, with the member image reading the file it writes, next to the session's release.
Reinstalling the release with ZONE_AWARE would restart its store for every other test, so
the Pod runs the rendered init container and the member image's shell alone, not a member.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from testbed.registry import Registry
from tests.e2e.release import CHART, Release, Step, chart_values, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(600)]

ZONE = "e2e-zone-a"
ZONE_LABEL = "topology.kubernetes.io/zone"
NODE = "snapshotjob-worker"
"""A worker of the kind cluster (hack/kube/cluster.sh), given the zone label for the test."""
NAME = "zone"
"""The release name of the rendered objects: unlike the session's release, so its
ServiceAccount, ClusterRole and binding are apart from the session's."""


def _rendered(release: Release, values: dict[str, Any], folder: Path) -> list[dict[str, Any]]:
    """The chart as the session's release installs it (its values), with ZONE_AWARE groups."""
    values_file = folder / "values.yaml"
    values_file.write_text(yaml.safe_dump(values))
    args = ["template", NAME, str(CHART), "--namespace", release.namespace]
    args += ["--values", str(values_file), "--set", "hazelcast.partitionGroup.enabled=true"]
    args += ["--set", "hazelcast.partitionGroup.type=ZONE_AWARE"]
    return [doc for doc in yaml.safe_load_all(release.cluster.helm(*args)) if doc]


def test_a_zone_aware_member_pod_reads_its_node_s_zone(
    release: Release, image_registry: Registry, service_images: dict[str, str], tmp_path: Path
) -> None:
    objects = _rendered(release, chart_values(image_registry, service_images), tmp_path)
    rbac = [
        o for o in objects if o["kind"] in {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    ]
    assert {o["kind"] for o in rbac} == {"ServiceAccount", "ClusterRole", "ClusterRoleBinding"}
    (statefulset,) = [o for o in objects if o["kind"] == "StatefulSet"]
    template = statefulset["spec"]["template"]["spec"]
    (member,) = template["containers"]
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{NAME}-member-0", "namespace": release.namespace},
        "spec": {
            key: template[key]
            for key in (
                "serviceAccountName",
                "automountServiceAccountToken",
                "imagePullSecrets",
                "initContainers",
                "volumes",
                "securityContext",
            )
            if key in template
        }
        | {
            "restartPolicy": "Never",
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "containers": [
                member
                | {
                    "command": ["sh", "-c", 'cat "$SJ_JAVA_OPTS_FILE"'],
                    "args": [],
                    "readinessProbe": None,
                    "livenessProbe": None,
                    "startupProbe": None,
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                }
            ],
        },
    }
    pod["spec"]["containers"][0] = {
        k: v for k, v in pod["spec"]["containers"][0].items() if v is not None
    }
    # The zone's volumes only: the member config's ConfigMap belongs to a release never installed.
    (zone,) = pod["spec"]["initContainers"]
    needed = {mount["name"] for mount in zone.get("volumeMounts", [])}
    pod["spec"]["volumes"] = [v for v in pod["spec"]["volumes"] if v["name"] in needed]
    shown = pod["spec"]["containers"][0]
    shown["volumeMounts"] = [m for m in shown.get("volumeMounts", []) if m["name"] in needed]
    pod["spec"]["initContainers"][0]["resources"] = {"requests": {"cpu": "10m", "memory": "64Mi"}}
    try:
        with Step("zone-aware-pod"):
            release.cluster.kubectl("label", "node", NODE, f"{ZONE_LABEL}={ZONE}", "--overwrite")
            release.apply(yaml.safe_dump_all([*rbac, pod]))

            def finished() -> dict[str, Any] | None:
                got = json.loads(
                    release.kubectl("get", "pod", pod["metadata"]["name"], "-o", "json")
                )
                phase = got["status"].get("phase")
                return got if phase in {"Succeeded", "Failed"} else None

            done = wait_for(release, "the zone-aware Pod finished", finished, timeout=180)
        log = release.kubectl("logs", pod["metadata"]["name"], "-c", member["name"])
        init_log = release.kubectl("logs", pod["metadata"]["name"], "-c", "zone")
        assert done["status"]["phase"] == "Succeeded", (done["status"], init_log, log)
        assert log.strip() == f"-Dhazelcast.member.attribute.hazelcast.partition.group.zone={ZONE}"
        # The token is the init container's alone: the member's container mounts none.
        mounts = {m["mountPath"] for m in done["spec"]["containers"][0].get("volumeMounts", [])}
        assert "/var/run/secrets/kubernetes.io/serviceaccount" not in mounts, mounts
    finally:
        release.kubectl(
            "delete", "pod", pod["metadata"]["name"], "--ignore-not-found", "--wait=false"
        )
        for obj in rbac:
            release.cluster.kubectl(
                "delete", obj["kind"].lower(), obj["metadata"]["name"], "--ignore-not-found",
                *(["-n", release.namespace] if obj["kind"] == "ServiceAccount" else []),
            )  # fmt: skip
        release.cluster.kubectl("label", "node", NODE, f"{ZONE_LABEL}-")
