"""The Argo CD health check (docs/argocd/health.lua) run in a real Lua on the operator's statuses.

Every status the check reads here is the one the operator writes: an observation built with
the decision tests' builders (``decide_helpers.py``, ``world.py``), decided by
:func:`decide`, and the status patches applied as the API server would (:func:`status_after`).
The Lua runs in lupa's Lua 5.1, the dialect of Argo CD's gopher-lua, and in Lua 5.4, each time
in a fresh runtime without ``io``, ``os`` or module loading, as Argo CD runs it: ``obj`` is the
object, the value the chunk returns is the health (``argocd_lua.py`` runs it). The argocd-cm
snippet is checked to embed the same bytes.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings

from snapshot_operator.reconcile import (
    DriverPod,
    InvalidSpec,
    Observation,
    PodPhase,
    StoreHealth,
    decide,
)
from snapshotjob_contract import (
    ConditionStatus,
    ConditionType,
    Phase,
    SnapshotJobSpec,
    SnapshotJobStatus,
    TerminationMode,
)
from snapshotjob_contract.resource import API_VERSION, GROUP, KIND
from tests.script_modules import load_script
from tests.unit.operator.argocd_lua import (
    LUA_PATH,
    argo_health,
)
from tests.unit.operator.decide_helpers import (
    HEALTHY,
    a_snapshot,
    graceful,
    running_job,
    snapshot_at,
    spec_of,
)
from tests.unit.operator.world import JOB, NOW, ago, observations, status_after

pytestmark = pytest.mark.filterwarnings("error")

ROOT = Path(__file__).resolve().parents[3]
CONFIG_MAP_PATH = ROOT / "docs" / "argocd" / "argocd-cm.yaml"
RENDER_SCRIPT = ROOT / "hack" / "render_argocd_cm.py"
DIALECTS = ("lua51", "lua54")
"""lupa's Lua 5.1 (what Argo CD's gopher-lua implements) and a current Lua."""


def _render_module() -> ModuleType:
    return load_script("render_argocd_cm", RENDER_SCRIPT)


def job_object(
    observation: Observation,
    status: SnapshotJobStatus | None,
    *,
    generation: int | None = None,
    spec: SnapshotJobSpec | None = None,
    deleting: bool = False,
) -> dict[str, Any]:
    """The SnapshotJob as Argo CD reads it from the API server (status as the operator wrote it)."""
    metadata: dict[str, Any] = {
        "name": JOB.name,
        "namespace": JOB.namespace,
        "uid": JOB.uid,
        "generation": generation if generation is not None else observation.generation,
        "finalizers": ["snapshotjob.io/finalizer"],
    }
    if deleting:
        metadata["deletionTimestamp"] = NOW.strftime("%Y-%m-%dT%H:%M:%SZ")
    job_spec = spec if spec is not None else observation.spec
    job: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": job_spec.to_json() if isinstance(job_spec, SnapshotJobSpec) else {},
    }
    if status is not None:
        job["status"] = status.to_json()
    return job


def decided(observation: Observation) -> SnapshotJobStatus:
    """The status once the operator's decision on the observation is written."""
    return status_after(observation.status, decide(observation))


def then_driver_exits(observation: Observation, code: int) -> Observation:
    """The next look: the status the last decision wrote, the current driver exited."""
    status = decided(observation)
    assert status.execution is not None
    pod = DriverPod(status.execution.driver_pod, status.execution.id, PodPhase.FAILED, code)
    return replace(observation, status=status, pods=(pod,))


# What each case is: the object Argo CD reads, the health, and what its message must name.


def _new_job() -> Observation:
    return Observation(JOB, 1, spec_of(), SnapshotJobStatus(), NOW, (), HEALTHY)


def starting() -> dict[str, Any]:
    observation = _new_job()
    return decided_in(observation, Phase.STARTING)


def waiting_for_pipeline() -> dict[str, Any]:
    observation = running_job(spec_of(), phase=Phase.STARTING, pipeline_started=False)
    return job_object(observation, decided(observation))


def store_not_ready() -> dict[str, Any]:
    observation = replace(_new_job(), store=StoreHealth(cluster_safe=False, member_count=1))
    return decided_in(observation, Phase.NOT_RUNNING)


def running() -> dict[str, Any]:
    observation = running_job(spec_of(), record=a_snapshot())
    return decided_in(observation, Phase.RUNNING)


def running_with_a_stale_snapshot() -> dict[str, Any]:
    observation = running_job(spec_of(), record=snapshot_at(ago(10 * 3 + 61)))
    return job_object(observation, decided(observation))


def _suspend_requested() -> Observation:
    return running_job(spec_of({"suspend": True}), record=a_snapshot())


def suspending() -> dict[str, Any]:
    observation = _suspend_requested()
    return decided_in(observation, Phase.COMPLETING)


def suspended() -> dict[str, Any]:
    # Asked to suspend, the driver took its terminal snapshot and exited TERMINATED (64).
    observation = then_driver_exits(_suspend_requested(), 64)
    return decided_in(observation, Phase.SUSPENDED)


def decided_in(observation: Observation, phase: Phase) -> dict[str, Any]:
    """The job as the decision leaves it, which must be in ``phase``."""
    status = decided(observation)
    assert status.phase is phase
    return job_object(observation, status)


def snapshot_corrupted() -> dict[str, Any]:
    observation = running_job(
        spec_of(), pod_phase=PodPhase.FAILED, exit_code=65, record=a_snapshot()
    )
    return decided_in(observation, Phase.FAILED)


def bad_input() -> dict[str, Any]:
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=2)
    return decided_in(observation, Phase.FAILED)


def failed_without_a_recorded_failure() -> dict[str, Any]:
    # FAILED with no status.lastFailure (written so by an older release): Degraded is False.
    observation = replace(_new_job(), status=SnapshotJobStatus(phase=Phase.FAILED))
    status = decided(observation)
    assert status.phase is Phase.FAILED and status.last_failure is None
    return job_object(observation, status)


def restarting_after_failure() -> dict[str, Any]:
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=1)
    return decided_in(observation, Phase.RESTARTING)


def suspended_on_failure() -> dict[str, Any]:
    spec = spec_of({"suspendOnFailure": True})
    observation = running_job(spec, pod_phase=PodPhase.FAILED, exit_code=1)
    return decided_in(observation, Phase.SUSPENDED)


def invalid_spec() -> dict[str, Any]:
    message = "restartPolicy: maxBackoffSeconds must be at least backoffSeconds"
    observation = replace(_new_job(), spec=InvalidSpec(message))
    return job_object(observation, decided(observation))


def cancelled() -> dict[str, Any]:
    observation = running_job(
        spec_of(),
        phase=Phase.COMPLETING,
        termination=graceful(TerminationMode.CANCEL_GRACEFUL),
        pod_phase=PodPhase.FAILED,
        exit_code=64,
    )
    return decided_in(observation, Phase.FAILED)


def completed() -> dict[str, Any]:
    observation = running_job(spec_of(), pod_phase=PodPhase.SUCCEEDED, exit_code=0)
    return decided_in(observation, Phase.COMPLETED)


def generation_lags() -> dict[str, Any]:
    # RUNNING and Ready for generation 1; the user has just changed the image (generation 2).
    observation = running_job(spec_of())
    status = decided(observation)
    assert status.observed_generation == 1
    changed = spec_of({"image": "snapshotjob/runtime:2"})
    return job_object(observation, status, generation=2, spec=changed)


def failed_then_fixed() -> dict[str, Any]:
    # FAILED (BadInput) for generation 1; the fix (generation 2) is not seen yet: no Degraded.
    observation = running_job(spec_of(), pod_phase=PodPhase.FAILED, exit_code=2)
    status = decided(observation)
    return job_object(observation, status, generation=2, spec=spec_of({"image": "fixed"}))


def being_deleted() -> dict[str, Any]:
    observation = replace(running_job(spec_of()), deleting=True)
    return job_object(observation, decided(observation), deleting=True)


def no_status() -> dict[str, Any]:
    return job_object(_new_job(), None)


CASES: dict[str, tuple[Callable[[], dict[str, Any]], str, tuple[str, ...]]] = {
    "starting": (starting, "Progressing", ("Starting",)),
    "waiting-for-pipeline": (waiting_for_pipeline, "Progressing", ("WaitingForPipeline",)),
    "store-not-ready": (store_not_ready, "Progressing", ("NotClusterSafe", "members=1")),
    "running": (running, "Healthy", ("Running", "executionId=")),
    "running-stale-snapshot": (running_with_a_stale_snapshot, "Healthy", ("SnapshotStale",)),
    "suspending": (suspending, "Progressing", ("Completing",)),
    "suspended": (suspended, "Suspended", ("Suspended", "as requested")),
    "snapshot-corrupted": (snapshot_corrupted, "Degraded", ("SnapshotCorrupted", "snapshotId=0")),
    "bad-input": (bad_input, "Degraded", ("BadInput", "exitCode=2")),
    "failed-unrecorded": (failed_without_a_recorded_failure, "Degraded", ("Failed", "FAILED")),
    "restarting-after-failure": (
        restarting_after_failure,
        "Degraded",
        ("RestartingAfterFailure", "exitCode=1"),
    ),
    "suspended-on-failure": (suspended_on_failure, "Degraded", ("SuspendedOnFailure",)),
    "invalid-spec": (invalid_spec, "Degraded", ("InvalidSpec", "maxBackoffSeconds")),
    "cancelled": (cancelled, "Suspended", ("Cancelled",)),
    "completed": (completed, "Healthy", ("Completed",)),
    "generation-lags": (generation_lags, "Progressing", ("has not yet seen generation 2",)),
    "failed-then-fixed": (failed_then_fixed, "Progressing", ("has not yet seen generation 2",)),
    "being-deleted": (being_deleted, "Progressing", ("Being deleted",)),
    "no-status": (no_status, "Progressing", ("Waiting for the operator",)),
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("case", list(CASES))
def test_the_health_of_what_the_operator_writes(case: str, dialect: str) -> None:
    build, expected, named = CASES[case]

    health = argo_health(build(), dialect)

    assert health.status == expected, health
    for words in named:
        assert words in health.message, health


def test_the_message_is_the_condition_that_explains_the_health() -> None:
    job = snapshot_corrupted()
    degraded = next(c for c in job["status"]["conditions"] if c["type"] == "Degraded")

    health = argo_health(job)

    assert health.message == f"{degraded['reason']}: {degraded['message']}"


@settings(max_examples=150, suppress_health_check=[HealthCheck.too_slow])
@given(observations())
def test_every_status_the_operator_writes_has_a_health_that_agrees_with_its_conditions(
    observation: Observation,
) -> None:
    status = decided(observation)

    health = argo_health(job_object(observation, status))

    conditions = {c.type: c for c in status.conditions}
    ready, degraded = conditions[ConditionType.READY], conditions[ConditionType.DEGRADED]
    cancelled_job = status.phase is Phase.FAILED and ready.reason == "Cancelled"
    problem = degraded.status is ConditionStatus.TRUE
    assert health.status != "Unknown", "every phase has a health"
    assert (health.status == "Degraded") == (
        problem or (status.phase is Phase.FAILED and not cancelled_job)
    ), health
    if health.status == "Healthy":
        assert status.phase in (Phase.RUNNING, Phase.COMPLETED)
        assert ready.status is ConditionStatus.TRUE
    if health.status == "Suspended":
        assert cancelled_job or (
            status.phase is Phase.SUSPENDED and ready.status is ConditionStatus.TRUE
        )


def test_a_status_older_than_one_generation_is_never_read_as_healthy() -> None:
    job = running()
    job["metadata"]["generation"] = 3
    job["status"]["observedGeneration"] = 2

    health = argo_health(job)

    assert health.status == "Progressing"
    assert "generation 3" in health.message and "observedGeneration 2" in health.message


def test_a_status_without_observed_generation_waits_for_the_operator() -> None:
    job = running()
    del job["status"]["observedGeneration"]

    assert argo_health(job).status == "Progressing"


def test_a_status_from_a_newer_operator_with_an_unknown_phase_is_unknown() -> None:
    job = running()
    job["status"]["phase"] = "HIBERNATING"

    health = argo_health(job)

    assert (health.status, health.message) == ("Unknown", "Unknown phase HIBERNATING")


def test_no_global_but_obj_is_needed_and_none_leaks_between_runs() -> None:
    # Argo CD may run the check in a runtime where another check already ran.
    lupa: Any = importlib.import_module("lupa.lua51")
    runtime = lupa.LuaRuntime()
    script = LUA_PATH.read_text(encoding="utf-8")
    runtime.globals().obj = runtime.table_from(completed(), recursive=True)
    first = runtime.execute(script)["status"]
    runtime.globals().obj = runtime.table_from(no_status(), recursive=True)
    second = runtime.execute(script)["status"]

    assert (first, second) == ("Healthy", "Progressing")
    assert runtime.eval("hs") is None, "the check keeps its table local"


# The argocd-cm snippet: one source, health.lua.


def test_the_configmap_embeds_health_lua_byte_for_byte() -> None:
    config_map = yaml.safe_load(CONFIG_MAP_PATH.read_bytes())
    key = f"resource.customizations.health.{GROUP}_{KIND}"

    embedded = config_map["data"][key]

    assert (config_map["apiVersion"], config_map["kind"]) == ("v1", "ConfigMap")
    assert config_map["metadata"]["name"] == "argocd-cm"
    assert "namespace" not in config_map["metadata"], "patched into any Argo CD namespace"
    assert embedded.encode("utf-8") == LUA_PATH.read_bytes()


def test_the_configmap_is_rendered_from_health_lua() -> None:
    render = _render_module()

    rendered = render.render(LUA_PATH.read_bytes().decode("utf-8"))

    assert f"resource.customizations.health.{GROUP}_{KIND}" == render.KEY
    assert CONFIG_MAP_PATH.read_bytes().decode("utf-8") == rendered, (
        "docs/argocd/argocd-cm.yaml drifted from health.lua: run hack/render_argocd_cm.py"
    )


@pytest.mark.parametrize(
    "lua",
    ["return 1", "return 1\n\n", "return 1 \n", "\treturn 1\n", "  return 1\n", "return 1\r\n"],
)
def test_the_renderer_refuses_lua_that_yaml_would_not_keep(lua: str) -> None:
    render = _render_module()

    with pytest.raises(render.UnembeddableLuaError):
        render.render(lua)


def test_a_rendered_snippet_gives_back_the_lua_with_blank_lines() -> None:
    render = _render_module()
    lua = 'local hs = {}\n\nhs.status = "Healthy"\n  -- indented\nreturn hs\n'

    parsed = yaml.safe_load(render.render(lua))

    assert parsed["data"][render.KEY] == lua
