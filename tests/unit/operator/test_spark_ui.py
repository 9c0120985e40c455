"""The Spark UI: the planner's actions, the Service and Ingress built, the driver's part."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.reconcile import CreateDriverPod, InvalidSpec, PatchStatus
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshot_operator.reconcile.phases import LIVE_PHASES
from snapshot_operator.reconcile.spark_ui import (
    INGRESS,
    SERVICE,
    ApplySparkUi,
    DeleteSparkUi,
    SparkUiAction,
    parse_ui_object,
    plan_spark_ui,
    spark_ui_service_name,
)
from snapshot_operator.spark_ui import build_spark_ui_object
from snapshotjob_contract import Phase, SnapshotJobSpec, SnapshotJobStatus
from snapshotjob_contract.pods import LABEL_JOB_UID
from tests.unit.operator.specs import VALID_SPEC
from tests.unit.operator.world import JOB

pytestmark = pytest.mark.unit

STARTED = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
INGRESS_SPEC = {
    "host": "{name}.{namespace}.ui.example.com",
    "ingressClassName": "nginx",
    "annotations": {"a": "b"},
    "tls": [{"secretName": "ui-cert"}],
}


def spec(**spark_ui: Any) -> SnapshotJobSpec:
    return SnapshotJobSpec.model_validate({**VALID_SPEC, "sparkUi": spark_ui})


def status(phase: Phase, execution: str | None, spark_ui: Any = None) -> SnapshotJobStatus:
    raw: dict[str, Any] = {"phase": phase.value}
    if execution is not None:
        raw["execution"] = {
            "id": execution,
            "driverPod": f"pod-{execution}",
            "startedAt": STARTED.isoformat(),
            "attempt": 1,
            "specHash": "h",
        }
    if spark_ui is not None:
        raw["sparkUi"] = spark_ui
    return SnapshotJobStatus.model_validate(raw)


class World:
    """The UI objects that exist, as the API server holds them after the actions."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str], dict[str, Any]] = {}
        self.status_ui: dict[str, Any] | None = None

    def perform(self, actions: tuple[SparkUiAction, ...]) -> None:
        for action in actions:
            match action:
                case ApplySparkUi(kind=kind, target=target):
                    self.objects[(kind, target.name)] = build_spark_ui_object(kind, target)
                case DeleteSparkUi(kind=kind, name=name):
                    self.objects.pop((kind, name), None)
                case PatchStatus(patch=patch):
                    self.status_ui = patch["sparkUi"]

    def listed(self) -> list[Any]:
        return [parse_ui_object(raw) for raw in self.objects.values()]


def reconcile(
    world: World, job_spec: SnapshotJobSpec, phase: Phase, execution: str | None
) -> tuple[SparkUiAction, ...]:
    actions = plan_spark_ui(
        JOB, job_spec, status(phase, execution, world.status_ui), world.listed()
    )
    world.perform(actions)
    return actions


def test_a_running_execution_gets_its_service_then_a_settled_job_writes_nothing() -> None:
    world = World()
    job_spec = spec(enabled=True, ingress=INGRESS_SPEC)
    reconcile(world, job_spec, Phase.RUNNING, "e1")
    service = world.objects[(SERVICE, "wordcount-ui")]
    assert service["spec"]["selector"] == {LABEL_JOB_UID: JOB.uid, LABEL_EXECUTION_ID: "e1"}
    assert service["spec"]["ports"][0]["targetPort"] == "spark-ui"
    assert service["metadata"]["ownerReferences"][0]["uid"] == JOB.uid
    ingress = world.objects[(INGRESS, "wordcount-ui")]
    rule = ingress["spec"]["rules"][0]
    assert rule["host"] == "wordcount.default.ui.example.com"
    assert rule["http"]["paths"][0]["backend"]["service"]["name"] == "wordcount-ui"
    assert ingress["spec"]["tls"] == [
        {"hosts": ["wordcount.default.ui.example.com"], "secretName": "ui-cert"}
    ]
    assert world.status_ui == {
        "serviceName": "wordcount-ui",
        "url": "http://wordcount-ui.default.svc:4040",
        "executionId": "e1",
        "ingressUrl": "https://wordcount.default.ui.example.com/",
    }
    assert reconcile(world, job_spec, Phase.RUNNING, "e1") == ()


def test_a_restart_selects_the_new_driver_and_the_end_removes_everything() -> None:
    world = World()
    job_spec = spec(enabled=True, ingress=INGRESS_SPEC)
    reconcile(world, job_spec, Phase.RUNNING, "e1")
    reconcile(world, job_spec, Phase.STARTING, "e2")
    selector = world.objects[(SERVICE, "wordcount-ui")]["spec"]["selector"]
    assert selector[LABEL_EXECUTION_ID] == "e2"
    actions = reconcile(world, job_spec, Phase.SUSPENDED, "e2")
    assert world.objects == {}
    assert world.status_ui is None
    assert isinstance(actions[-1], PatchStatus), "the status follows the deletions"


def test_turning_the_ui_off_or_the_ingress_away_deletes_them() -> None:
    world = World()
    reconcile(world, spec(enabled=True, ingress=INGRESS_SPEC), Phase.RUNNING, "e1")
    reconcile(world, spec(enabled=True), Phase.RUNNING, "e1")
    assert set(world.objects) == {(SERVICE, "wordcount-ui")}
    assert world.status_ui is not None and "ingressUrl" not in world.status_ui
    reconcile(world, spec(enabled=False), Phase.RUNNING, "e1")
    assert world.objects == {} and world.status_ui is None


def test_an_invalid_spec_changes_nothing_and_deletion_removes_the_ui() -> None:
    world = World()
    reconcile(world, spec(enabled=True), Phase.RUNNING, "e1")
    listed = world.listed()
    job_status = status(Phase.RUNNING, "e1", world.status_ui)
    assert plan_spark_ui(JOB, InvalidSpec("bad"), job_status, listed) == ()
    deleting = plan_spark_ui(JOB, InvalidSpec("bad"), job_status, listed, deleting=True)
    assert DeleteSparkUi(SERVICE, "wordcount-ui") in deleting


def test_service_names_are_dns_labels() -> None:
    assert spark_ui_service_name("wordcount") == "wordcount-ui"
    for name in ("1job", "a.b.c", "x" * 63):
        built = spark_ui_service_name(name)
        assert len(built) <= 63 and built[0].isalpha() and "." not in built
    assert spark_ui_service_name("x" * 63) != spark_ui_service_name("x" * 62 + "y")


def test_the_driver_serves_its_ui_only_when_asked() -> None:
    create = CreateDriverPod("wordcount-driver-1", "e1", 1, None)
    with_ui = build_driver_pod(JOB, spec(enabled=True), create)
    container = with_ui["spec"]["containers"][0]
    assert {"name": "spark-ui", "containerPort": 4040, "protocol": "TCP"} in container["ports"]
    assert "--conf=spark.ui.enabled=true" in container["args"]
    assert "--conf=spark.ui.port=4040" in container["args"]
    without = build_driver_pod(JOB, spec(enabled=False), create)["spec"]["containers"][0]
    assert all(port["name"] != "spark-ui" for port in without["ports"])
    assert not any("spark.ui" in arg for arg in without["args"])


def test_enabling_the_ui_rolls_out_but_service_settings_do_not() -> None:
    plain = spec().execution_fingerprint()
    assert SnapshotJobSpec.model_validate(VALID_SPEC).execution_fingerprint() == plain
    assert spec(enabled=True).execution_fingerprint() != plain
    assert (
        spec(enabled=True, servicePort=80).execution_fingerprint()
        == spec(enabled=True).execution_fingerprint()
    )


PHASES = list(Phase)


class SparkUiMachine(RuleBasedStateMachine):
    """Executions start, restart and end, users toggle the UI and its Ingress; after every
    reconcile the UI objects exist exactly while an execution may run with the UI enabled,
    and they serve the current execution alone."""

    def __init__(self) -> None:
        super().__init__()
        self.world = World()
        self.phase = Phase.NOT_RUNNING
        self.execution: str | None = None
        self.attempt = 0
        self.enabled = False
        self.ingress = False

    def _spec(self) -> SnapshotJobSpec:
        return spec(enabled=self.enabled, **({"ingress": INGRESS_SPEC} if self.ingress else {}))

    @rule(phase=st.sampled_from(PHASES), new_execution=st.booleans())
    def move(self, phase: Phase, new_execution: bool) -> None:
        self.phase = phase
        if new_execution:
            self.attempt += 1
            self.execution = f"e{self.attempt}"

    @rule(enabled=st.booleans(), ingress=st.booleans())
    def edit(self, enabled: bool, ingress: bool) -> None:
        self.enabled, self.ingress = enabled, ingress

    @rule()
    def reconcile(self) -> None:
        reconcile(self.world, self._spec(), self.phase, self.execution)
        wanted = self.enabled and self.phase in LIVE_PHASES and self.execution is not None
        kinds = {kind for kind, _ in self.world.objects}
        assert kinds == (
            {SERVICE, INGRESS} if wanted and self.ingress else {SERVICE} if wanted else set()
        )
        assert (self.world.status_ui is not None) == wanted
        if wanted:
            service = self.world.objects[(SERVICE, "wordcount-ui")]
            assert service["spec"]["selector"][LABEL_EXECUTION_ID] == self.execution
            assert self.world.status_ui is not None
            assert self.world.status_ui["executionId"] == self.execution

    @invariant()
    def status_names_only_what_exists(self) -> None:
        if self.world.status_ui is not None:
            assert (SERVICE, self.world.status_ui["serviceName"]) in self.world.objects


TestSparkUiMachine = SparkUiMachine.TestCase
TestSparkUiMachine.settings = settings(max_examples=60, stateful_step_count=30, deadline=None)
