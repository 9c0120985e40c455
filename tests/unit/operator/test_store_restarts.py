"""The store restart step: what it reads, when it deletes, and what it announces.

The planner's safety is property-tested in ``test_rollout.py``; these tests pin the step
around it against in-memory gateways (:mod:`tests.unit.operator.fake_gateways`): a deletion
only on the second plan of the same unchanged Pod, preconditioned on that Pod's uid and
resourceVersion, one ``StoreMemberRestarted`` Event on the StatefulSet only when a Pod was
deleted, and every member's health asked on its own.
"""

from __future__ import annotations

from typing import Any

import pytest

from snapshot_operator.rollout import (
    REVISION_LABEL,
    NoRestartNeeded,
    RestartMember,
    RolloutStep,
    WaitForHealthyStore,
)
from snapshot_operator.store_restarts import EVENT_REASON, restart_step
from tests.unit.operator.fake_gateways import FakeKubernetes, FakeStore

OLD = "store-old"
NEW = "store-new"
MEMBERS = ("store-0.hz:5701", "store-1.hz:5701", "store-2.hz:5701")


def _statefulset() -> dict[str, Any]:
    return {
        "metadata": {"namespace": "hz", "name": "store", "uid": "sts-uid", "generation": 2},
        "spec": {"replicas": 3, "selector": {"matchLabels": {"app": "store"}}},
        "status": {"observedGeneration": 2, "updateRevision": NEW, "currentRevision": OLD},
    }


def _member(ordinal: int, revision: str) -> dict[str, Any]:
    return {
        "metadata": {
            "namespace": "hz",
            "name": f"store-{ordinal}",
            "uid": f"uid-{ordinal}",
            "resourceVersion": str(100 + ordinal),
            "labels": {"app": "store", REVISION_LABEL: revision},
        },
        "status": {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]},
    }


class _ChangesBeforeTheDelete(FakeKubernetes):
    """A member Pod that another writer changes between the step's read and its delete."""

    def delete_pod_if_unchanged(
        self, namespace: str, name: str, *, uid: str, resource_version: str
    ) -> bool:
        self.member_pods[name]["metadata"]["resourceVersion"] = "999"
        return super().delete_pod_if_unchanged(
            namespace, name, uid=uid, resource_version=resource_version
        )


def _outdated_store(kube: FakeKubernetes) -> FakeKubernetes:
    kube.statefulset = _statefulset()
    kube.member_pods = {f"store-{n}": _member(n, OLD) for n in range(3)}
    return kube


@pytest.fixture
def kube() -> FakeKubernetes:
    return _outdated_store(FakeKubernetes())


def _step(kube: FakeKubernetes, store: FakeStore, previous: RolloutStep | None) -> RolloutStep:
    step = restart_step(kube, store, "hz", "store", MEMBERS, 1.0, previous)
    assert step is not None
    return step


def test_a_member_is_deleted_on_the_second_plan_and_announced_once(kube: FakeKubernetes) -> None:
    store = FakeStore()
    first = _step(kube, store, None)
    assert isinstance(first, RestartMember) and first.pod.name == "store-2"
    assert kube.log == [], "one safe reading is not enough"

    second = _step(kube, store, first)

    assert second == first
    assert kube.log == [
        ("delete member", "store-2"),
        ("event", (EVENT_REASON, "StatefulSet", "store")),
    ]
    assert "store-2" not in kube.member_pods


def test_a_member_that_changed_since_it_was_read_is_left_alone() -> None:
    kube, store = _outdated_store(_ChangesBeforeTheDelete()), FakeStore()
    first = _step(kube, store, None)
    assert _step(kube, store, first) == first
    assert kube.log == [("precondition failed", "store-2")], "no deletion, no Event"
    assert "store-2" in kube.member_pods


def test_one_unreachable_member_holds_the_restart_back(kube: FakeKubernetes) -> None:
    store = FakeStore()
    store.unreachable = {MEMBERS[1]}
    first = _step(kube, store, None)
    assert isinstance(first, WaitForHealthyStore)
    assert "unreachable member=1" in first.reason
    assert isinstance(_step(kube, store, first), WaitForHealthyStore)
    assert kube.log == []


def test_an_updated_store_needs_nothing_and_a_missing_one_plans_nothing(
    kube: FakeKubernetes,
) -> None:
    store = FakeStore()
    kube.member_pods = {f"store-{n}": _member(n, NEW) for n in range(3)}
    assert isinstance(_step(kube, store, None), NoRestartNeeded)
    kube.statefulset = None
    assert restart_step(kube, store, "hz", "store", MEMBERS, 1.0) is None
    assert kube.log == []
