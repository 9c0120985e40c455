"""The store restart planner: safety as properties over arbitrary StatefulSet states.

Each property draws a StatefulSet (replicas, revisions), its member Pods (present or not,
outdated or not, Ready or not, terminating or not, left-over ordinals) and every member's
health, plans once and checks the step. The readers are tested on raw API objects.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from snapshot_operator.reconcile import StoreHealth
from snapshot_operator.rollout import (
    MemberPod,
    NoRestartNeeded,
    RestartMember,
    StoreStatefulSet,
    WaitForHealthyStore,
    confirms,
    parse_member_pod,
    parse_statefulset,
    plan,
)
from snapshot_operator.settings import parse_settings

OLD = "store-old"
NEW = "store-new"


def _statefulset(replicas: int = 3, *, observed: bool = True) -> StoreStatefulSet:
    return StoreStatefulSet(
        namespace="ns",
        name="store",
        uid="sts-uid",
        replicas=replicas,
        update_revision=NEW,
        current_revision=OLD,
        observed=observed,
    )


def _pod(
    ordinal: int,
    revision: str | None = NEW,
    *,
    ready: bool = True,
    terminating: bool = False,
) -> MemberPod:
    return MemberPod(
        name=f"store-{ordinal}",
        uid=f"uid-{ordinal}",
        resource_version=str(100 + ordinal),
        ordinal=ordinal,
        revision=revision,
        phase="Running" if ready else "Pending",
        ready=ready,
        terminating=terminating,
    )


def _safe(members: int = 3) -> list[StoreHealth | None]:
    return [StoreHealth(cluster_safe=True, member_count=members)] * members


@st.composite
def worlds(
    draw: st.DrawFn,
) -> tuple[StoreStatefulSet, list[MemberPod], list[StoreHealth | None]]:
    """An arbitrary StatefulSet, its Pods and its members' health."""
    replicas = draw(st.integers(min_value=1, max_value=5))
    ordinals = draw(st.sets(st.integers(min_value=0, max_value=replicas + 1)))
    pods = [
        _pod(
            ordinal,
            draw(st.sampled_from([OLD, NEW, None])),
            ready=draw(st.booleans()),
            terminating=draw(st.booleans()),
        )
        for ordinal in sorted(ordinals)
    ]
    health = st.none() | st.builds(
        StoreHealth,
        cluster_safe=st.booleans(),
        member_count=st.integers(min_value=0, max_value=replicas + 1),
    )
    store = draw(st.lists(health, max_size=replicas + 1))
    return _statefulset(replicas, observed=draw(st.booleans())), pods, store


def _whole(
    statefulset: StoreStatefulSet, pods: list[MemberPod], store: list[StoreHealth | None]
) -> bool:
    """Every member Pod there, Ready, not terminating, none extra; every member safe."""
    ordinals = sorted(pod.ordinal for pod in pods)
    return (
        ordinals == list(range(statefulset.replicas))
        and all(pod.ready and not pod.terminating for pod in pods)
        and bool(store)
        and all(
            health is not None
            and health.cluster_safe
            and health.member_count == statefulset.replicas
            for health in store
        )
    )


@given(worlds())
def test_never_deletes_unless_the_store_is_whole(
    world: tuple[StoreStatefulSet, list[MemberPod], list[StoreHealth | None]],
) -> None:
    statefulset, pods, store = world
    step = plan(statefulset, pods, store)
    if isinstance(step, RestartMember):
        assert statefulset.observed
        assert _whole(statefulset, pods, store)


@given(worlds())
def test_never_deletes_while_not_cluster_safe(
    world: tuple[StoreStatefulSet, list[MemberPod], list[StoreHealth | None]],
) -> None:
    statefulset, pods, store = world
    assume(not store or any(health is None or not health.cluster_safe for health in store))
    assert not isinstance(plan(statefulset, pods, store), RestartMember)


@given(worlds())
def test_never_deletes_a_second_pod_while_one_is_not_ready(
    world: tuple[StoreStatefulSet, list[MemberPod], list[StoreHealth | None]],
) -> None:
    statefulset, pods, store = world
    assume(any(not pod.ready or pod.terminating for pod in pods))
    assert not isinstance(plan(statefulset, pods, store), RestartMember)


@given(worlds())
def test_deletes_the_highest_outdated_ordinal_first(
    world: tuple[StoreStatefulSet, list[MemberPod], list[StoreHealth | None]],
) -> None:
    statefulset, pods, store = world
    step = plan(statefulset, pods, store)
    outdated = [pod for pod in pods if pod.revision != NEW]
    if isinstance(step, RestartMember):
        assert step.pod == max(outdated, key=lambda pod: pod.ordinal)
        assert step.update_revision == NEW
    elif statefulset.observed and outdated and _whole(statefulset, pods, store):
        raise AssertionError(f"a whole store with outdated Pods must restart one, got {step}")


def test_a_deletion_needs_the_same_plan_twice_in_a_row() -> None:
    pods = [_pod(0, OLD), _pod(1, OLD), _pod(2, OLD)]
    first = plan(_statefulset(), pods, _safe())
    assert isinstance(first, RestartMember)
    assert not confirms(first, None)
    assert not confirms(first, WaitForHealthyStore("store not cluster-safe"))
    assert confirms(plan(_statefulset(), pods, _safe()), first)
    # The same Pod changed in between (e.g. was unready for a moment): start over.
    changed = [*pods[:2], MemberPod(**{**vars(pods[2]), "resource_version": "999"})]
    again = plan(_statefulset(), changed, _safe())
    assert isinstance(again, RestartMember)
    assert not confirms(again, first)


@given(worlds())
def test_nothing_to_do_when_all_are_updated(
    world: tuple[StoreStatefulSet, list[MemberPod], list[StoreHealth | None]],
) -> None:
    statefulset, pods, store = world
    assume(statefulset.observed)
    step = plan(statefulset, pods, store)
    assert isinstance(step, NoRestartNeeded) == all(pod.revision == NEW for pod in pods)


@given(st.integers(min_value=1, max_value=5), st.data())
def test_a_rollout_restarts_every_member_once_top_down(replicas: int, data: st.DataObject) -> None:
    """Playing the StatefulSet controller and kubelet: each deletion heals before the next."""
    statefulset = _statefulset(replicas)
    pods = {i: _pod(i, OLD) for i in range(replicas)}
    deleted: list[int] = []
    for _ in range(3 * replicas + 3):
        step = plan(statefulset, list(pods.values()), _safe(replicas))
        if isinstance(step, NoRestartNeeded):
            break
        assert isinstance(step, RestartMember), step
        deleted.append(step.pod.ordinal)
        # Recreated from the new template; not Ready yet, so the next plan waits (or, with
        # that one the last, has nothing left to do).
        pods[step.pod.ordinal] = _pod(step.pod.ordinal, NEW, ready=False)
        left = any(pod.revision == OLD for pod in pods.values())
        expected = WaitForHealthyStore if left else NoRestartNeeded
        assert isinstance(plan(statefulset, list(pods.values()), _safe(replicas)), expected)
        # A member down is also what the store reports while the replacement joins.
        unsafe = data.draw(st.booleans())
        if unsafe:
            pods[step.pod.ordinal] = _pod(step.pod.ordinal, NEW)
            store: list[StoreHealth | None] = [
                StoreHealth(cluster_safe=False, member_count=replicas)
            ] * replicas
            assert isinstance(plan(statefulset, list(pods.values()), store), expected)
        pods[step.pod.ordinal] = _pod(step.pod.ordinal, NEW)
    assert deleted == list(reversed(range(replicas)))


def test_waits_for_each_reason() -> None:
    statefulset = _statefulset()
    outdated = [_pod(0, OLD), _pod(1, OLD), _pod(2, OLD)]
    reasons = {
        "status": plan(_statefulset(observed=False), outdated, _safe()),
        "missing": plan(statefulset, outdated[:2], _safe()),
        "terminating": plan(statefulset, [*outdated[:2], _pod(2, OLD, terminating=True)], _safe()),
        "not ready": plan(statefulset, [*outdated[:2], _pod(2, NEW, ready=False)], _safe()),
        "extra": plan(statefulset, [*outdated, _pod(3, OLD)], _safe()),
        "no members": plan(statefulset, outdated, []),
        "unreachable": plan(statefulset, outdated, [*_safe()[:2], None]),
        "unsafe": plan(statefulset, outdated, [StoreHealth(cluster_safe=False, member_count=3)]),
        "count": plan(statefulset, outdated, _safe(2)),
    }
    for case, step in reasons.items():
        assert isinstance(step, WaitForHealthyStore), (case, step)
    assert "store-2" in reasons["terminating"].reason  # type: ignore[union-attr]
    assert "member=2" in reasons["unreachable"].reason  # type: ignore[union-attr]
    assert plan(statefulset, outdated, _safe()) == RestartMember(
        pod=outdated[2], update_revision=NEW
    )


def test_reads_raw_objects() -> None:
    raw_statefulset: dict[str, Any] = {
        "metadata": {"namespace": "ns", "name": "store", "uid": "u", "generation": 4},
        "spec": {"replicas": 3},
        "status": {"observedGeneration": 3, "updateRevision": NEW, "currentRevision": OLD},
    }
    read = parse_statefulset(raw_statefulset)
    assert (read.replicas, read.update_revision, read.current_revision) == (3, NEW, OLD)
    assert not read.observed
    raw_statefulset["status"]["observedGeneration"] = 4
    assert parse_statefulset(raw_statefulset).observed

    raw_pod: dict[str, Any] = {
        "metadata": {
            "name": "store-12",
            "uid": "p",
            "resourceVersion": "7",
            "labels": {"controller-revision-hash": OLD},
            "deletionTimestamp": "2026-01-01T00:00:00Z",
        },
        "status": {
            "phase": "Running",
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Ready", "status": "True"},
            ],
        },
    }
    pod = parse_member_pod(raw_pod, "store")
    assert pod == MemberPod("store-12", "p", "7", 12, OLD, "Running", True, True)
    raw_pod["status"]["conditions"][1]["status"] = "False"
    assert parse_member_pod(raw_pod, "store").ready is False  # type: ignore[union-attr]
    assert parse_member_pod(raw_pod, "other") is None
    raw_pod["metadata"]["name"] = "store-canary"
    assert parse_member_pod(raw_pod, "store") is None


def test_store_restarts_are_configured_by_flag_or_environment() -> None:
    base = ["--namespace", "ns", "--store-members", "hz-0:5701"]
    assert parse_settings(base, {}).store_statefulset is None, "off unless asked for"
    flags = parse_settings([*base, "--store-statefulset", "hz", "--store-namespace", "sj"], {})
    env = {"SJ_OPERATOR_STORE_STATEFULSET": "hz", "SJ_OPERATOR_STORE_NAMESPACE": "sj"}
    from_env = parse_settings(base, env)
    assert (flags.store_statefulset, flags.store_namespace) == ("hz", "sj")
    assert (from_env.store_statefulset, from_env.store_namespace) == ("hz", "sj")
    with pytest.raises(SystemExit):
        parse_settings([*base, "--store-statefulset", "hz"], {})
    with pytest.raises(SystemExit):
        parse_settings(["--namespace", "ns"], env)
