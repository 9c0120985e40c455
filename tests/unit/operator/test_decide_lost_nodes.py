"""Driver Pods on nodes that stopped reporting (lost_nodes.py): deleted at once, in every phase.

Found on a multi-node cluster (issue 13): the Pod of a lost node stays Running in the API, and
once evicted stays Terminating until the node confirms, which a lost node never does, so the
job waited for ever. The operator now deletes such a Pod without a grace period once it has
been not Ready for ``driver_lost_seconds`` (since the time :func:`parse_node_lost_since`
reads), and the next decision starts a new execution (a failure, with backoff); fencing keeps
the old driver from committing if its node returns.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    EventReason,
    RemoveFinalizer,
    Requeue,
    decide,
)
from snapshot_operator.reconcile.observe import parse_node_lost_since
from snapshotjob_contract import Phase
from tests.unit.operator.decide_helpers import SETTINGS, of_type, reasons, running_job, spec_of
from tests.unit.operator.world import NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")


def test_a_driver_not_ready_for_less_than_the_limit_is_left_to_run() -> None:
    observation = running_job(spec_of())
    (pod,) = observation.pods
    lost = replace(pod, node_lost_since=ago(SETTINGS.driver_lost_seconds - 5))
    actions = decide(replace(observation, pods=(lost,)), SETTINGS)
    assert not of_type(actions, DeleteDriverPod)
    assert EventReason.DRIVER_NODE_LOST not in reasons(actions)
    (requeue,) = of_type(actions, Requeue)
    assert requeue.after_seconds <= 6


def test_a_driver_lost_for_the_limit_is_deleted_at_once_and_the_next_look_restarts() -> None:
    observation = running_job(spec_of())
    (pod,) = observation.pods
    lost = replace(pod, node_lost_since=ago(SETTINGS.driver_lost_seconds))
    actions = decide(replace(observation, pods=(lost,)), SETTINGS)

    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]
    assert EventReason.DRIVER_NODE_LOST in reasons(actions)

    # The API forgot the Pod: the execution failed, a new one starts after the backoff.
    status = status_after(observation.status, actions)
    gone = decide(replace(observation, status=status, pods=()), SETTINGS)
    after = status_after(status, gone)
    assert after.phase is Phase.RESTARTING
    assert after.restarts == observation.status.restarts + 1


def test_a_lost_driver_already_evicted_is_still_deleted_at_once() -> None:
    observation = running_job(spec_of())
    (pod,) = observation.pods
    evicted = replace(pod, deleting=True, node_lost_since=ago(SETTINGS.driver_lost_seconds + 300))
    actions = decide(replace(observation, pods=(evicted,)), SETTINGS)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]


def test_a_job_being_deleted_deletes_a_driver_on_a_lost_node_at_once_then_ends() -> None:
    # Its graceful deletion would never end, and the job would keep its finalizer for ever.
    observation = running_job(spec_of())
    (pod,) = observation.pods
    lost = replace(pod, deleting=True, node_lost_since=ago(SETTINGS.driver_lost_seconds))
    actions = decide(replace(observation, pods=(lost,), deleting=True), SETTINGS)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]
    assert EventReason.DRIVER_NODE_LOST in reasons(actions)
    assert not of_type(actions, RemoveFinalizer)

    gone = decide(replace(observation, pods=(), deleting=True), SETTINGS)
    assert of_type(gone, RemoveFinalizer)


@pytest.mark.parametrize("phase", [Phase.FAILED, Phase.RESTARTING, Phase.SUSPENDED])
def test_a_driver_on_a_lost_node_is_deleted_at_once_between_executions(phase: Phase) -> None:
    # A Pod being deleted when the job ended or paused, whose node then stopped reporting:
    # it may run as far as the API knows, so no new execution could ever start.
    observation = running_job(spec_of())
    (pod,) = observation.pods
    status = observation.status.model_copy(update={"phase": phase})
    lost = replace(pod, deleting=True, node_lost_since=ago(SETTINGS.driver_lost_seconds + 1))
    actions = decide(replace(observation, status=status, pods=(lost,)), SETTINGS)
    assert of_type(actions, DeleteDriverPod) == [DeleteDriverPod(pod.name, at_once=True)]
    assert EventReason.DRIVER_NODE_LOST in reasons(actions)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ([{"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-23T01:00:00Z"}], None),
        (
            [{"type": "Ready", "status": "False", "lastTransitionTime": "2026-11-23T01:00:00Z"}],
            "2026-11-23T01:00:00+00:00",
        ),
        ([{"type": "Ready", "status": "False"}], None),
        ([], None),
    ],
)
def test_parse_node_lost_since(conditions: list[dict[str, str]], expected: str | None) -> None:
    since = parse_node_lost_since({"conditions": conditions})
    assert (since.isoformat() if since else None) == expected
    assert NOW.tzinfo is not None
