"""The operator restarts the store's members one at a time, and only when that is safe.

A StatefulSet with ``updateStrategy: OnDelete`` and three replicas stands for the chart's
Hazelcast StatefulSet; the control-plane testbed's StatefulSet controller creates its Pods and
recreates a deleted one from the new template. There is no kubelet, so the test plays it: it
marks the Pods Running and Ready through the status subresource. The store health the
operator gates on is the session's real 3-member Hazelcast cluster; pausing one member makes
it unsafe. The operator runs as in production, ``python -m snapshot_operator``.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from snapshot_operator.store_restarts import EVENT_REASON
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.operator_harness import OperatorProcess
from testbed.processes import ManagedProcess, wait_until
from testbed.snapshotjob_crd import delete_test_namespace

pytestmark = [pytest.mark.integration, pytest.mark.kube]

STATEFULSET = "store"
REPLICAS = 3
LABELS = {"app.kubernetes.io/name": "rollout-store"}
WAIT = 30.0
QUIET = 5.0
"""How long the test watches for a deletion that must not happen (the operator looks every
second, ``--store-retry 1``)."""


STORE_HELD = "reason=Store "
"""How the operator's debug log names a wait on the store's health."""


def _statefulset() -> dict[str, Any]:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": STATEFULSET, "labels": LABELS},
        "spec": {
            "serviceName": STATEFULSET,
            "replicas": REPLICAS,
            "podManagementPolicy": "Parallel",
            "updateStrategy": {"type": "OnDelete"},
            "selector": {"matchLabels": LABELS},
            "template": {
                "metadata": {"labels": LABELS, "annotations": {"checksum/config": "one"}},
                "spec": {"containers": [{"name": "hazelcast", "image": "hazelcast:unused"}]},
            },
        },
    }


class Store:
    """Plays user and kubelet for the store's StatefulSet in one namespace."""

    def __init__(self, kube: KubeAPI, namespace: str) -> None:
        self.api = kube.api_client()
        self.namespace = namespace
        self.apps = client.AppsV1Api(self.api)
        self.core = client.CoreV1Api(self.api)

    def pods(self) -> dict[str, client.V1Pod]:
        """The member Pods by name (terminating ones included)."""
        listed = self.core.list_namespaced_pod(
            self.namespace, label_selector=",".join(f"{k}={v}" for k, v in LABELS.items())
        )
        return {pod.metadata.name: pod for pod in listed.items}

    def uids(self) -> dict[str, str]:
        """The member Pods' uids by name."""
        return {name: pod.metadata.uid for name, pod in self.pods().items()}

    def update_revision(self) -> str:
        """The StatefulSet's update revision, once the controller has seen its latest spec."""
        revision = ""

        def current() -> bool:
            nonlocal revision
            statefulset = self.apps.read_namespaced_stateful_set(STATEFULSET, self.namespace)
            status = statefulset.status
            revision = status.update_revision or ""
            return bool(revision) and (status.observed_generation or 0) >= (
                statefulset.metadata.generation or 0
            )

        wait_until(current, WAIT, "the StatefulSet's update revision")
        return revision

    def wait_members(self) -> dict[str, str]:
        """Waits until all member Pods exist; returns their uids by name."""
        names = {f"{STATEFULSET}-{i}" for i in range(REPLICAS)}
        wait_until(lambda: set(self.uids()) == names, WAIT, f"member pods {sorted(names)}")
        return self.uids()

    def mark_ready(self, name: str) -> None:
        """Plays the kubelet: the Pod runs and passes its readiness probe."""
        now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.core.patch_namespaced_pod_status(
            name,
            self.namespace,
            {
                "status": {
                    "phase": "Running",
                    "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": now}],
                }
            },
        )

    def change_template(self, value: str) -> None:
        """Changes the pod template, as a chart upgrade with a new member config does."""
        self.apps.patch_namespaced_stateful_set(
            STATEFULSET,
            self.namespace,
            {"spec": {"template": {"metadata": {"annotations": {"checksum/config": value}}}}},
        )

    def restarted_events(self) -> list[str]:
        """The notes of the StoreMemberRestarted Events regarding the StatefulSet."""
        # Raw: the controller's own Events (core API, no eventTime) fail the client's models.
        events: Any = client.EventsV1Api(self.api)
        response = events.list_namespaced_event(
            self.namespace,
            field_selector=f"regarding.name={STATEFULSET}",
            _preload_content=False,
        )
        items = json.loads(response.data)["items"]
        return [str(item.get("note")) for item in items if item.get("reason") == EVENT_REASON]


@pytest.fixture
def namespace(kube_api: KubeAPI) -> Iterator[str]:
    """A fresh namespace for the test."""
    name = f"rollout-{uuid.uuid4().hex[:8]}"
    api = kube_api.api_client()
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    yield name
    delete_test_namespace(api, name)


@pytest.fixture
def operator(
    kube_api: KubeAPI, namespace: str, healthy_hazelcast: HazelcastCluster, tmp_path: Path
) -> Iterator[ManagedProcess]:
    """The operator, restarting the StatefulSet's members, with the session's cluster."""
    running = OperatorProcess(
        kube_api,
        namespace,
        healthy_hazelcast,
        tmp_path / "operator.log",
        "--store-statefulset",
        STATEFULSET,
        "--store-namespace",
        namespace,
        "--resync",
        "1",
        "--log-level",
        "DEBUG",
    )
    running.start()
    yield running.process
    running.stop()


def _wait_deleted(store: Store, name: str, uid: str, operator: ManagedProcess) -> str:
    """Waits until the Pod ``name`` with ``uid`` is gone and recreated; returns the new uid."""
    try:
        wait_until(lambda: store.uids().get(name, uid) != uid, WAIT, f"{name} to be restarted")
    except TimeoutError as error:
        raise AssertionError(f"{error}\noperator log:\n{operator.log_tail(40)}") from error
    new = ""

    def recreated() -> bool:
        nonlocal new
        new = store.uids().get(name, "")
        return bool(new)

    wait_until(recreated, WAIT, f"{name} to be recreated")
    return new


def _assert_kept(store: Store, uids: dict[str, str], seconds: float, why: str) -> None:
    """Asserts that for ``seconds`` no Pod of ``uids`` is deleted or replaced."""
    deadline = time.monotonic() + seconds
    while True:
        pods = store.pods()
        for name, uid in uids.items():
            pod = pods.get(name)
            kept = pod is not None and pod.metadata.uid == uid
            assert kept and pod.metadata.deletion_timestamp is None, f"{name} restarted {why}"
        if time.monotonic() >= deadline:
            return
        time.sleep(0.2)


def test_members_restart_one_at_a_time_and_only_when_safe(
    kube_api: KubeAPI,
    namespace: str,
    healthy_hazelcast: HazelcastCluster,
    operator: ManagedProcess,
) -> None:
    store = Store(kube_api, namespace)
    store.apps.create_namespaced_stateful_set(namespace, _statefulset())
    first = store.wait_members()
    for name in first:
        store.mark_ready(name)
    old = store.update_revision()
    _assert_kept(store, first, 2.0, "although all are on the update revision")

    store.change_template("two")
    new = store.update_revision()
    assert new != old

    # The highest ordinal first, and only that one while its replacement is not Ready.
    uid2 = _wait_deleted(store, "store-2", first["store-2"], operator)
    pods = store.pods()
    assert pods["store-2"].metadata.labels["controller-revision-hash"] == new
    _assert_kept(
        store,
        {"store-0": first["store-0"], "store-1": first["store-1"]},
        QUIET,
        "while store-2 is not Ready",
    )
    store.mark_ready("store-2")
    uid1 = _wait_deleted(store, "store-1", first["store-1"], operator)
    _assert_kept(store, {"store-0": first["store-0"], "store-2": uid2}, QUIET, "early")

    # A store that is not cluster-safe holds the next restart back, all Pods Ready or not.
    paused = 2
    healthy_hazelcast.pause(paused)
    try:
        # The live members go on reporting the cluster safe until the paused one's
        # heartbeat times out; the operator asks every member, and this one is silent.
        wait_until(
            lambda: healthy_hazelcast.health(paused, timeout=1.0) is None,
            WAIT,
            f"member {paused} to stop answering",
        )
        held = operator.log_path.read_text().count(STORE_HELD)
        store.mark_ready("store-1")
        # Held back by the store, not by a Pod: the operator says so, and keeps holding.
        kept = {"store-0": first["store-0"], "store-1": uid1, "store-2": uid2}
        try:
            wait_until(
                lambda: operator.log_path.read_text().count(STORE_HELD) > held + 1,
                WAIT,
                "the operator to wait for the store with every Pod Ready",
            )
        except TimeoutError as error:
            _assert_kept(store, kept, 0.0, "while the store was not cluster-safe")
            raise AssertionError(f"{error}\noperator log:\n{operator.log_tail(20)}") from error
        # A replaced Pod keeps its new uid: this also covers the wait above.
        _assert_kept(store, kept, QUIET, "while the store was not cluster-safe")
    finally:
        healthy_hazelcast.resume(paused)
    healthy_hazelcast.wait_cluster_safe(expected_size=REPLICAS)

    uid0 = _wait_deleted(store, "store-0", first["store-0"], operator)
    store.mark_ready("store-0")
    revisions = {
        name: pod.metadata.labels["controller-revision-hash"] for name, pod in store.pods().items()
    }
    assert revisions == {f"store-{i}": new for i in range(REPLICAS)}
    _assert_kept(
        store, {"store-0": uid0, "store-1": uid1, "store-2": uid2}, 2.0, "after the rollout"
    )
    notes = store.restarted_events()
    assert sorted(notes) == sorted(
        f"Restarted store member pod=store-{i} revision={old} updateRevision={new}"
        for i in range(REPLICAS)
    ), notes
    log = operator.log_path.read_text()
    assert log.count("Restarting store member pod=") == REPLICAS
