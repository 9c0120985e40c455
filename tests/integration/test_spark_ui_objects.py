"""The Spark UI's Service and Ingress, made by the real operator on a real API server.

As in ``test_operator.py``, the operator runs as ``python -m snapshot_operator`` against the
control-plane test bed, whose API server has no kubelet: the test plays the kubelet and the
driver with :mod:`testbed.operator_harness`. The UI objects are read back from the API
server, which also checks them (a Service's selector and ports, an Ingress's rules).
"""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client

from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.pods import LABEL_JOB_UID
from testbed.operator_harness import OperatorHarness
from testbed.processes import wait_until
from tests.integration.operator_fixtures import (
    crd,
    harness,
    namespace,
    operator,
    operator_args,
    operator_env,
)

pytestmark = [pytest.mark.integration, pytest.mark.kube]

__all__ = ["crd", "harness", "namespace", "operator", "operator_args", "operator_env"]

SPARK_UI = {
    "enabled": True,
    "servicePort": 80,
    "serviceAnnotations": {"example.com/team": "a"},
    "ingress": {"host": "{name}.{namespace}.ui.example.com", "tls": [{"secretName": "cert"}]},
}


def _ui(harness: OperatorHarness) -> tuple[list[Any], list[Any]]:
    services = client.CoreV1Api(harness.api).list_namespaced_service(harness.namespace).items
    ingresses = client.NetworkingV1Api(harness.api).list_namespaced_ingress(harness.namespace).items
    return services, ingresses


def test_the_ui_follows_the_execution_and_goes_with_it(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("ui", sparkUi=SPARK_UI)
    execution = running["execution"]
    pod = harness.pods(uid)[0]
    ports = {port.name: port.container_port for port in pod.spec.containers[0].ports}
    assert ports["spark-ui"] == 4040
    assert "--conf=spark.ui.enabled=true" in pod.spec.containers[0].args

    status = harness.wait_status("ui", lambda s: "sparkUi" in s, "status.sparkUi")
    assert status["sparkUi"] == {
        "serviceName": "ui-ui",
        "url": f"http://ui-ui.{harness.namespace}.svc:80",
        "executionId": execution["id"],
        "ingressUrl": f"https://ui.{harness.namespace}.ui.example.com/",
    }
    services, ingresses = _ui(harness)
    assert [service.metadata.name for service in services] == ["ui-ui"]
    service = services[0]
    assert service.spec.selector == {LABEL_JOB_UID: uid, LABEL_EXECUTION_ID: execution["id"]}
    assert [(p.port, p.target_port) for p in service.spec.ports] == [(80, "spark-ui")]
    assert service.spec.type == "ClusterIP" and service.spec.cluster_ip
    assert service.metadata.annotations["example.com/team"] == "a"
    assert [(o.kind, o.uid) for o in service.metadata.owner_references] == [("SnapshotJob", uid)]
    rule = ingresses[0].spec.rules[0]
    assert rule.host == f"ui.{harness.namespace}.ui.example.com"
    assert rule.http.paths[0].backend.service.name == "ui-ui"

    harness.patch_spec("ui", suspend=True)
    harness.wait_status(
        "ui", lambda s: (s.get("termination") or {}).get("mode") == "SUSPEND_GRACEFUL", "suspend"
    )
    harness.exit_pod(execution["driverPod"], DriverExit.TERMINATED)
    suspended = harness.wait_phase("ui", "SUSPENDED")
    wait_until(lambda: _ui(harness) == ([], []), timeout=30, what="the UI objects deleted")
    assert "sparkUi" not in (harness.status("ui") or suspended)
