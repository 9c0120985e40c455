"""The store's NetworkPolicy, enforced on kind: only the store's own Pods reach the members.

The test bed's clusters enforce NetworkPolicy (kube-network-policies beside flannel,
hack/kube/network-policies/), so the chart's policies (templates/networkpolicy.yaml, on by
default) apply to every cluster test: the jobs of the whole tier run with them. This test shows
the other half: two Pods of the same image in the release's namespace try a TCP connection to
every member; the one without the store's label (``snapshotjob.io/store``, which the operator
gives a job's driver and executors) is refused on every member, the one with it connects to
every member. ``tests/e2e/test_executors_kind.py`` checks that a running job's driver and
executors carry the label; ``tests/integration/test_chart_network_policy.py`` what is rendered.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from snapshotjob_contract.pods import LABEL_STORE, restricted_container_security_context
from tests.e2e.release import Release, Step, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

PROBE = """
import socket, sys
for address in sys.argv[1:]:
    try:
        socket.create_connection((address, 5701), timeout=4).close()
        print(address, "connected")
    except OSError as error:
        print(address, "refused", type(error).__name__)
"""
"""Connects to each member's port in turn and prints one line per member."""


def _probe_pod(release: Release, name: str, labels: dict[str, str], members: list[str]) -> Any:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": release.namespace, "labels": labels},
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [
                {
                    "name": "probe",
                    "image": release.image,
                    "command": ["python", "-c", PROBE, *members],
                    "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}},
                    "securityContext": restricted_container_security_context(),
                }
            ],
        },
    }


def test_only_pods_with_the_stores_label_reach_the_members(release: Release) -> None:
    members = [
        pod["status"]["podIP"] for pod in release.pods("app.kubernetes.io/component=hazelcast")
    ]
    assert len(members) == 3, members
    label = release.store_label()
    probes = {
        "np-unlabelled": {"app": "np-probe"},
        "np-labelled": {"app": "np-probe", LABEL_STORE: label},
    }
    try:
        with Step("network-policy-probes"):
            for name, labels in probes.items():
                release.apply(json.dumps(_probe_pod(release, name, labels, members)))

            def finished(name: str) -> dict[str, Any] | None:
                got = json.loads(release.kubectl("get", "pod", name, "-o", "json"))
                return got if got["status"].get("phase") in {"Succeeded", "Failed"} else None

            results = {}
            for name in probes:
                done = wait_for(release, f"{name} finished", lambda n=name: finished(n), 180)
                log = release.kubectl("logs", name)
                assert done["status"]["phase"] == "Succeeded", (done["status"], log)
                results[name] = {
                    line.split()[0]: line.split()[1] for line in log.splitlines() if line.strip()
                }
        assert results["np-labelled"] == dict.fromkeys(members, "connected"), results
        assert results["np-unlabelled"] == dict.fromkeys(members, "refused"), results
    finally:
        for name in probes:
            release.kubectl("delete", "pod", name, "--ignore-not-found", "--wait=false")
