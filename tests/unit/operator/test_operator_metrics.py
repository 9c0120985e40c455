"""The operator's metrics: what each reconcile reports, read back from the registry.

The reconciles run on the in-memory gateways of :mod:`tests.unit.operator.fake_gateways`
(they play the API server and the store); the metrics endpoint of a real operator is scraped
over HTTP by ``tests/integration/test_operator_metrics_scrape.py``.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from snapshot_operator.executing import Services, reconcile_once
from snapshot_operator.kubernetes_gateway import ClientKubernetesGateway
from snapshot_operator.metrics import (
    RESTART_REASONS,
    OperatorMetrics,
    phase_after,
    restart_reason,
)
from snapshot_operator.reconcile import EmitEvent, EventReason, PatchStatus, StoreHealth
from snapshot_operator.settings import OperatorSettings
from snapshotjob_contract import Phase
from snapshotjob_contract.observability import (
    OPERATOR_EXECUTIONS_STARTED,
    OPERATOR_JOBS,
    OPERATOR_KUBERNETES_API_ERRORS,
    OPERATOR_METRICS,
    OPERATOR_RECONCILE_DURATION,
    OPERATOR_RECONCILE_ERRORS,
    OPERATOR_RESTARTS,
    OPERATOR_STORE_CLUSTER_SAFE,
    OPERATOR_STORE_MEMBERS_REACHABLE,
)
from tests.unit.operator.fake_gateways import FakeKubernetes, FakeStore
from tests.unit.operator.specs import VALID_SPEC

pytestmark = pytest.mark.unit


@pytest.fixture
def kube() -> FakeKubernetes:
    return FakeKubernetes(VALID_SPEC)


@pytest.fixture
def services(kube: FakeKubernetes) -> Services:
    settings = OperatorSettings(
        namespaces=("default",), store_members=("hz-0:5701",), store_cluster_name="store"
    )
    return Services(kube=kube, store=FakeStore(), settings=settings)


def value(metrics: OperatorMetrics, name: str, **labels: str) -> float:
    sample = metrics.registry.get_sample_value(name, labels)
    return 0.0 if sample is None else sample


def run(services: Services) -> None:
    reconcile_once(services, "default", "wordcount")


def test_every_defined_metric_is_served() -> None:
    metrics = OperatorMetrics()
    served = {family.name for family in metrics.registry.collect()}
    # prometheus_client names a counter's family without its _total suffix.
    assert served == {metric.name.removesuffix("_total") for metric in OPERATOR_METRICS}


def test_a_started_execution_is_counted_and_the_job_shown_in_its_phase(
    kube: FakeKubernetes, services: Services
) -> None:
    metrics = services.metrics
    run(services)
    assert value(metrics, OPERATOR_EXECUTIONS_STARTED.name) == 1
    assert value(metrics, OPERATOR_JOBS.name, phase="STARTING") == 1
    assert value(metrics, OPERATOR_JOBS.name, phase="RUNNING") == 0
    assert value(metrics, f"{OPERATOR_RECONCILE_DURATION.name}_count") == 1
    assert value(metrics, OPERATOR_STORE_MEMBERS_REACHABLE.name, cluster="store") == 3
    assert value(metrics, OPERATOR_STORE_CLUSTER_SAFE.name, cluster="store") == 1

    run(services)  # The Pod exists: no second start.
    assert value(metrics, OPERATOR_EXECUTIONS_STARTED.name) == 1
    assert value(metrics, f"{OPERATOR_RECONCILE_DURATION.name}_count") == 2


def test_a_failed_driver_is_a_restart_with_the_events_reason(
    kube: FakeKubernetes, services: Services
) -> None:
    metrics = services.metrics
    run(services)
    (pod,) = kube.pods
    kube.set_pod(pod, "Failed", exit_code=1)
    run(services)
    assert kube.status["phase"] == "RESTARTING"
    assert value(metrics, OPERATOR_RESTARTS.name + "", reason="ExecutionFailed") == 1
    assert value(metrics, OPERATOR_JOBS.name, phase="RESTARTING") == 1
    assert value(metrics, OPERATOR_JOBS.name, phase="STARTING") == 0

    run(services)  # Still RESTARTING (backoff): not a second restart.
    total = sum(
        sample.value
        for family in metrics.registry.collect()
        if family.name == OPERATOR_RESTARTS.name.removesuffix("_total")
        for sample in family.samples
        if sample.name.endswith("_total")
    )
    assert total == 1


def test_a_deleted_job_leaves_the_phase_gauge(kube: FakeKubernetes, services: Services) -> None:
    run(services)
    kube.job = None
    run(services)
    assert all(value(services.metrics, OPERATOR_JOBS.name, phase=p.value) == 0 for p in Phase)


def test_a_failed_reconcile_is_counted(kube: FakeKubernetes, services: Services) -> None:
    def broken(namespace: str, name: str) -> None:
        raise RuntimeError("API server unreachable")

    kube.read_job = broken  # type: ignore[method-assign]
    with pytest.raises(RuntimeError):
        run(services)
    assert value(services.metrics, OPERATOR_RECONCILE_ERRORS.name) == 1
    assert value(services.metrics, f"{OPERATOR_RECONCILE_DURATION.name}_count") == 1


def test_an_unreachable_store_shows_no_member_and_not_safe() -> None:
    metrics = OperatorMetrics()
    metrics.store_health("store", StoreHealth(cluster_safe=True, member_count=3))
    metrics.store_health("store", None)
    assert value(metrics, OPERATOR_STORE_MEMBERS_REACHABLE.name, cluster="store") == 0
    assert value(metrics, OPERATOR_STORE_CLUSTER_SAFE.name, cluster="store") == 0


def test_the_gateway_reports_api_errors_and_raises_them_on() -> None:
    metrics = OperatorMetrics()
    gateway = ClientKubernetesGateway(
        client.ApiClient(), instance="test", on_api_error=metrics.api_error
    )

    def forbidden(api: client.ApiClient, namespace: str) -> None:
        raise client.ApiException(status=403, reason="Forbidden")

    def refused(api: client.ApiClient, namespace: str) -> None:
        raise ConnectionRefusedError("no API server")

    with pytest.raises(client.ApiException):
        gateway._call("list_jobs", forbidden, "default")
    with pytest.raises(ConnectionRefusedError):
        gateway._call("list_jobs", refused, "default")
    assert gateway._call("list_jobs", lambda api, namespace: [namespace], "a") == ["a"]
    name = OPERATOR_KUBERNETES_API_ERRORS.name
    assert value(metrics, name, operation="list_jobs", code="403") == 1
    assert value(metrics, name, operation="list_jobs", code="0") == 1


def test_a_restart_is_a_move_into_restarting_named_by_its_event() -> None:
    into = PatchStatus({"phase": "RESTARTING"})
    event = EmitEvent(EventReason.DRIVER_NODE_LOST, "Driver node lost")
    assert restart_reason("RUNNING", [into, event]) == "DriverNodeLost"
    assert restart_reason("RUNNING", [into]) == "Unknown"
    rejected = EmitEvent(EventReason.EXPORT_REJECTED, "Export rejected")
    assert restart_reason("RUNNING", [into, rejected, event]) == "DriverNodeLost", (
        "the restart's own Event names it, not another emitted with it"
    )
    assert restart_reason("RUNNING", [into, rejected]) == "ExportRejected"
    assert restart_reason("RESTARTING", [into, event]) is None, "already restarting"
    assert restart_reason("RUNNING", [event]) is None, "no move into RESTARTING"
    assert phase_after("RUNNING", [PatchStatus({"observedGeneration": 2})]) == "RUNNING"
    assert phase_after(None, [into, PatchStatus({"phase": "STARTING"})]) == "STARTING"


def test_every_restart_reason_is_served_at_zero_before_its_first_restart() -> None:
    """``increase()`` cannot count a counter's first sample: a series born at 1 hides a restart.

    ``tests/integration/alert_rules_test.yaml`` shows what that did to the restart-loop alert.
    """
    metrics = OperatorMetrics()
    for reason in RESTART_REASONS:
        # Served, not only zero: value() reads a missing series as 0 too.
        sample = metrics.registry.get_sample_value(OPERATOR_RESTARTS.name, {"reason": reason})
        assert sample == 0, f"reason={reason} sample={sample}"
    assert {"ExecutionFailed", "DriverNodeLost", "Unknown"} <= set(RESTART_REASONS)
