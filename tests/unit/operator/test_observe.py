"""Reading raw API objects into observations: safe readings of Pods, specs and store health."""

from __future__ import annotations

from typing import Any

import pytest

from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.reconcile import (
    CreateDriverPod,
    InvalidSpec,
    JobRef,
    PodPhase,
    StoreHealth,
    decide,
    observe,
    parse_driver_pod,
    parse_spec,
    parse_store_health,
)
from snapshot_operator.reconcile.observe import MAX_TERMINATION_MESSAGE, parse_termination_message
from snapshotjob_contract import Phase, SnapshotJobSpec
from snapshotjob_contract.resource import MAX_NAME_LENGTH, NAME_RULE
from tests.unit.operator.specs import VALID_SPEC
from tests.unit.operator.world import NOW

JOB = JobRef(namespace="default", name="wordcount", uid="4d2a")
CREATE = CreateDriverPod("wordcount-driver-2", "4d2a-2-19", 2, None)
HEALTH = {
    "nodeState": "ACTIVE",
    "clusterState": "ACTIVE",
    "clusterSafe": True,
    "migrationQueueSize": 0,
    "clusterSize": 3,
}


def driver_pod(**status: Any) -> dict[str, Any]:
    pod = build_driver_pod(JOB, SnapshotJobSpec.model_validate(VALID_SPEC), CREATE)
    return {**pod, "status": status}


def terminated(code: int) -> dict[str, Any]:
    return {
        "phase": "Failed",
        "containerStatuses": [{"name": "driver", "state": {"terminated": {"exitCode": code}}}],
    }


def test_a_new_driver_pod_reads_as_pending_with_its_execution() -> None:
    pod = parse_driver_pod(driver_pod())

    assert pod is not None
    assert (pod.name, pod.execution_id) == (CREATE.pod_name, CREATE.execution_id)
    assert (pod.phase, pod.exit_code, pod.deleting) == (PodPhase.PENDING, None, False)


def test_a_terminated_driver_reads_with_its_exit_code() -> None:
    pod = parse_driver_pod(driver_pod(**terminated(75)))

    assert pod is not None
    assert (pod.phase, pod.exit_code) == (PodPhase.FAILED, 75)


def test_a_pod_of_unknown_state_may_still_run() -> None:
    pod = parse_driver_pod(driver_pod(phase="Unknown"))

    assert pod is not None and pod.may_run


def test_a_deleted_pod_reads_as_deleting() -> None:
    raw = driver_pod(phase="Running")
    raw["metadata"] = {**raw["metadata"], "deletionTimestamp": "2026-11-21T12:00:00Z"}

    pod = parse_driver_pod(raw)

    assert pod is not None and pod.deleting and pod.may_run


def test_a_pod_without_an_execution_label_is_not_a_driver() -> None:
    assert parse_driver_pod({"metadata": {"name": "wordcount-exec-1", "labels": {}}}) is None


def test_an_invalid_spec_names_the_fields_in_camel_case() -> None:
    spec = parse_spec({**VALID_SPEC, "restartPolicy": {"backoffSeconds": 0}})

    assert isinstance(spec, InvalidSpec)
    assert "restartPolicy.backoffSeconds" in spec.message


def test_a_cross_field_violation_is_reported_with_the_rules_message() -> None:
    spec = parse_spec({**VALID_SPEC, "exportSnapshot": {"cancelJob": True}})

    assert isinstance(spec, InvalidSpec)
    assert "exportSnapshot.cancelJob needs exportSnapshot.name" in spec.message


@pytest.mark.parametrize(
    ("document", "health"),
    [
        (HEALTH, StoreHealth(cluster_safe=True, member_count=3)),
        ({**HEALTH, "clusterSafe": False}, StoreHealth(cluster_safe=False, member_count=3)),
        ({**HEALTH, "nodeState": "SHUTTING_DOWN"}, StoreHealth(False, 3)),
        ({**HEALTH, "clusterState": "PASSIVE"}, StoreHealth(False, 3)),
        ({"nodeState": "ACTIVE"}, None),
        (None, None),
    ],
)
def test_store_health_is_safe_only_when_everything_says_so(
    document: dict[str, Any] | None, health: StoreHealth | None
) -> None:
    assert parse_store_health(document) == health


def test_an_observation_is_read_from_the_job_its_pods_and_the_store() -> None:
    job = {
        "metadata": {"namespace": "default", "name": "wordcount", "uid": "4d2a", "generation": 4},
        "spec": VALID_SPEC,
        "status": {"phase": "RUNNING", "restarts": 2},
    }
    executor = {"metadata": {"name": "wordcount-exec-1", "labels": {}}}

    observation = observe(job, [driver_pod(phase="Running"), executor], HEALTH, NOW)

    assert observation.job == JOB
    assert observation.generation == 4
    assert isinstance(observation.spec, SnapshotJobSpec)
    assert (observation.status.phase, observation.status.restarts) == (Phase.RUNNING, 2)
    assert [pod.name for pod in observation.pods] == [CREATE.pod_name]
    assert observation.store == StoreHealth(cluster_safe=True, member_count=3)
    assert not observation.deleting


def test_a_job_admitted_before_the_name_rule_reads_as_an_invalid_spec() -> None:
    name = "a" * (MAX_NAME_LENGTH + 1)
    job = {
        "metadata": {"namespace": "default", "name": name, "uid": "4d2a"},
        "spec": VALID_SPEC,
    }

    observation = observe(job, [], HEALTH, NOW)
    longest = observe({**job, "metadata": {**job["metadata"], "name": name[1:]}}, [], HEALTH, NOW)

    assert observation.spec == InvalidSpec(NAME_RULE.message)
    assert isinstance(longest.spec, SnapshotJobSpec)
    actions = decide(observation)
    assert not [action for action in actions if isinstance(action, CreateDriverPod)]


def test_the_drivers_termination_message_is_read_on_one_line_and_cut() -> None:
    line = "Snapshot 12 in map '__sj.snapshot.4d2a.0' is corrupted: chunk '12/counts/3/0' missing"
    status = terminated(65)
    status["containerStatuses"][0]["state"]["terminated"]["message"] = line + "\n"
    long = terminated(65)
    long["containerStatuses"][0]["state"]["terminated"]["message"] = "x\n  y " * 1000

    pod = parse_driver_pod(driver_pod(**status))
    cut = parse_driver_pod(driver_pod(**long))
    silent = parse_driver_pod(driver_pod(**terminated(65)))

    assert pod is not None and pod.termination_message == line
    assert cut is not None and cut.termination_message is not None
    assert len(cut.termination_message) == MAX_TERMINATION_MESSAGE
    # The end is kept: the last log lines name the error.
    assert cut.termination_message.startswith("...") and cut.termination_message.endswith("x y")
    assert "\n" not in cut.termination_message
    assert silent is not None and silent.termination_message is None
    assert parse_termination_message("  \n ") is None
