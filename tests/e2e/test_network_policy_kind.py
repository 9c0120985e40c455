"""The store's NetworkPolicy, enforced on kind: only the store's own Pods reach the members.

The test bed's clusters enforce NetworkPolicy (kube-network-policies beside flannel,
hack/kube/network-policies/), so the chart's policies (templates/networkpolicy.yaml, on by
default) apply to every cluster test: the jobs of the whole tier run with them. This test shows
the other half: two Pods of the same image in the release's namespace try a TCP connection to
every member; the one without the store's label (``snapshotjob.io/store``, which the operator
gives a job's driver and executors) is refused on every member, the one with it connects to
every member. ``tests/e2e/test_executors_kind.py`` checks that a running job's driver and
executors carry the label; ``tests/integration/test_chart_network_policy.py`` what is rendered.

Then a policy of the namespace's own that keeps a job's executors from the members (egress
only to the other Pods of the namespace and to DNS): the driver, which reaches the store,
finds before its restore that the executors do not, and the job says so in a condition and an
Event naming the executors and the members; once the policy is gone, the next execution,
after the restart policy's backoff, runs.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from snapshotjob_contract.pods import (
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_STORE,
    restricted_container_security_context,
)
from tests.e2e.release import Release, Step, wait_for, wait_snapshot

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(300)]

BLOCKED_JOB = "np-blocked-executors"
UNREACHED = "The executors cannot reach the snapshot store, though the driver does"
"""How the driver's message starts (``spark_runtime.executor_reach.unreached_message``)."""

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


def _executors_without_the_store(release: Release, job: str) -> dict[str, Any]:
    """A NetworkPolicy that lets the job's executors reach every Pod of the namespace but the
    store's members, and DNS."""
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": {"name": f"{job}-no-store", "namespace": release.namespace},
        "spec": {
            "podSelector": {"matchLabels": {"spark-role": "executor", LABEL_JOB: job}},
            "policyTypes": ["Egress"],
            "egress": [
                {
                    "to": [
                        {
                            "podSelector": {
                                "matchExpressions": [
                                    {
                                        "key": LABEL_COMPONENT,
                                        "operator": "NotIn",
                                        "values": ["hazelcast"],
                                    }
                                ]
                            }
                        }
                    ]
                },
                {
                    "to": [{"namespaceSelector": {}}],
                    "ports": [{"protocol": "UDP", "port": 53}, {"protocol": "TCP", "port": 53}],
                },
            ],
        },
    }


def _refused(release: Release, job: str) -> dict[str, Any] | None:
    """The job's status once its last failure and a condition carry the driver's message about
    its executors (the condition while the restart waits for its backoff)."""
    status = (release.job(job) or {}).get("status") or {}
    failure = status.get("lastFailure") or {}
    if failure.get("reason") != "TransientFailure" or UNREACHED not in failure.get("message", ""):
        return None
    for found in status.get("conditions") or ():
        if found.get("reason") == "RestartingAfterFailure" and UNREACHED in found["message"]:
            return dict(status)
    return None


@pytest.mark.timeout(600)
def test_a_policy_that_keeps_a_jobs_executors_from_the_store_is_named_then_healed(
    release: Release,
) -> None:
    job = BLOCKED_JOB
    policy = _executors_without_the_store(release, job)
    release.apply(json.dumps(policy))
    try:
        with Step("np-executors-refused"):
            release.apply_job(job, {"map": job, "keys": 4, "end": 1_000_000, "rows_per_second": 50})
            status = wait_for(
                release, f"job={job} names its executors", lambda: _refused(release, job), 300
            )
            message = status["lastFailure"]["message"]
            print(f"E2E executors without the store: lastFailure={message!r}")
            assert ":5701" in message and "NetworkPolicy" in message, message
            events = json.loads(
                release.kubectl(
                    "get", "events", "--field-selector", f"involvedObject.name={job}", "-o", "json"
                )
            )["items"]
            assert any(UNREACHED in e.get("message", "") for e in events), [
                (e.get("reason"), e.get("message", "")[:120]) for e in events
            ]
    finally:
        release.kubectl("delete", "networkpolicy", policy["metadata"]["name"], "--wait=false")
    with Step("np-executors-healed"):
        running = wait_snapshot(release, job, 0, timeout=300)
        assert int(running["status"].get("restarts", 0)) >= 1, running["status"]
    release.destroy_job(job)
