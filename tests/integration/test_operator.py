"""The operator against a real API server and a real 3-member Hazelcast cluster.

The operator runs as it does in production, ``python -m snapshot_operator``, in a subprocess
watching one namespace of the control-plane testbed; restarting it is killing the process.
The testbed has no kubelet, so the tests play the kubelet and the driver (with
:mod:`testbed.operator_harness`): they set the driver Pod's phase and its container's exit
code, and write the execution record and snapshot data a driver would write, and its report
that the pipeline runs (``status.pipelineStarted``: without it the job stays STARTING).
Everything the operator does is then read back from the API server (status, Pods, Events) and
from Hazelcast (snapshot and export maps).
"""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from snapshot_operator.manifests import driver_service_account_name
from snapshot_operator.reconcile import JobRef
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshot_protocol.chunks import ChunkKey, validate_snapshot
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshotjob_contract import export_map_name, snapshot_map_name
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.operator_harness import WAIT, OperatorHarness, OperatorProcess
from testbed.processes import wait_until
from testbed.snapshotjob_crd import delete_test_namespace
from tests.integration.operator_fixtures import (
    crd,
    harness,
    namespace,
    operator,
    operator_args,
    operator_env,
    store,
    write_snapshot,
)
from tests.unit.operator.specs import VALID_SPEC

pytestmark = [pytest.mark.integration, pytest.mark.kube]

__all__ = ["crd", "harness", "namespace", "operator", "operator_args", "operator_env", "store"]


# --- the core loop ----------------------------------------------------------------------------


def test_create_run_suspend_resume(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("wordcount")
    first = running["execution"]
    assert first["attempt"] == 1
    assert first["id"].startswith(uid)
    pod = harness.pods(uid)[0]
    assert pod.metadata.labels[LABEL_EXECUTION_ID] == first["id"]
    assert pod.spec.service_account_name == driver_service_account_name(
        JobRef(harness.namespace, "wordcount", uid)
    )
    conditions = {c["type"]: c for c in running["conditions"]}
    assert conditions["Ready"]["status"] == "True"
    assert conditions["StoreReady"]["reason"] == "ClusterSafe"

    harness.patch_spec("wordcount", suspend=True)
    completing = harness.wait_status(
        "wordcount",
        lambda s: (s.get("termination") or {}).get("mode") == "SUSPEND_GRACEFUL",
        "a SUSPEND_GRACEFUL request",
    )
    assert completing["phase"] == "COMPLETING"
    harness.exit_pod(first["driverPod"], DriverExit.TERMINATED)
    suspended = harness.wait_phase("wordcount", "SUSPENDED")
    assert "termination" not in suspended
    assert harness.pod_names(uid) == [first["driverPod"]], "the stopped Pod is kept for its log"

    harness.patch_spec("wordcount", suspend=False)
    resumed = harness.wait_phase("wordcount", "STARTING")
    second = resumed["execution"]
    assert second["attempt"] == 2
    assert second["id"] != first["id"]
    harness.wait_pods(uid, [second["driverPod"]])
    for reason in ("ExecutionStarted", "TerminationRequested", "Suspended"):
        harness.wait_event("wordcount", reason)


def test_failures_back_off_then_fail(harness: OperatorHarness) -> None:
    policy = {"maxRestarts": 1, "backoffSeconds": 1, "maxBackoffSeconds": 1}
    uid, running = harness.start_running("flaky", restartPolicy=policy)
    harness.exit_pod(running["execution"]["driverPod"], 1)
    restarted = harness.wait_status(
        "flaky",
        lambda s: s.get("restarts") == 1 and s.get("execution", {}).get("attempt") == 2,
        "a restart after the backoff",
    )
    assert restarted["lastFailure"]["reason"] == "DriverFailed"
    first = running["execution"]["driverPod"]
    assert restarted["lastFailure"]["driverPod"] == first
    second = restarted["execution"]["driverPod"]
    # The failed driver Pod stays for its log while the next one runs.
    harness.wait_pods(uid, [first, second])
    harness.run_pod(second)
    time.sleep(2)
    assert harness.status("flaky")["phase"] == "STARTING", "a running Pod is not a pipeline"
    harness.report_pipeline("flaky")
    harness.wait_phase("flaky", "RUNNING")
    harness.exit_pod(second, 1)
    failed = harness.wait_phase("flaky", "FAILED")
    assert failed["lastFailure"]["reason"] == "DriverFailed"
    assert "exitCode=1" in failed["lastFailure"]["message"]
    # Only the most recent failed driver Pod is kept.
    assert failed["lastFailure"]["driverPod"] == second
    harness.wait_pods(uid, [second])
    harness.wait_event("flaky", "RestartLimitReached")
    time.sleep(2)
    assert harness.status("flaky")["execution"]["attempt"] == 2, "FAILED must not restart"


def test_suspend_on_failure(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("fragile", suspendOnFailure=True)
    harness.exit_pod(running["execution"]["driverPod"], 3)
    suspended = harness.wait_phase("fragile", "SUSPENDED")
    assert suspended["termination"]["mode"] == "SUSPEND_FORCEFUL"
    assert suspended["lastFailure"]["reason"] == "DriverFailed"
    harness.wait_event("fragile", "SuspendedOnFailure")
    time.sleep(2)
    assert harness.status("fragile")["execution"]["attempt"] == 1, "held until the spec changes"
    harness.patch_spec("fragile", snapshotIntervalSeconds=20)
    assert harness.wait_phase("fragile", "STARTING")["execution"]["attempt"] == 2
    del uid


def test_delete_cancels_and_destroys_snapshot_maps(
    harness: OperatorHarness, store: HazelcastSnapshotStore
) -> None:
    """``deletionPolicy: Destroy``: a job with a restore point goes without keeping it.

    The default, ``Export``, keeps it as an export first (``tests/integration/test_exports.py``,
    ``test_deleting_a_job_deletes_its_periodic_durable_copies`` and the end of
    ``test_user_export_lifecycle_and_deletion_protected_while_in_use``).
    """
    uid, running = harness.start_running("doomed", deletionPolicy="Destroy")
    own = snapshot_map_name(uid, 0, 1)
    export = export_map_name(harness.namespace, f"keep-{uid[:8]}")
    write_snapshot(store, own, uid, 1)
    write_snapshot(store, export, uid, 1)
    harness.write_status(
        "doomed",
        executionRecord={
            "snapshotId": 1,
            "dataMapIndex": 0,
            "dataMapBackupCount": 1,
            "ongoingSnapshotId": 1,
        },
    )
    assert harness.job("doomed")["metadata"]["finalizers"] == ["snapshotjob.io/finalizer"]

    harness.delete_job("doomed")
    deadline = time.monotonic() + WAIT
    while harness.job("doomed") is not None:
        assert time.monotonic() < deadline, harness.operator.process.log_tail(40)
        time.sleep(0.1)
    harness.wait_pods(uid, [])
    names = {obj.name for obj in store._client.get_distributed_objects()}
    assert own not in names
    assert validate_snapshot(store, export, 1).snapshot_id == 1, "exports are kept"
    # Destroy keeps nothing of the job's own state: no export of it, no object.
    objects = client.CustomObjectsApi(harness.api)
    listed: Any = objects.list_namespaced_custom_object(
        GROUP, VERSION, harness.namespace, EXPORT_PLURAL
    )
    assert listed["items"] == []
    assert not any(
        name.startswith("__sj.export." + harness.namespace + ".doomed-") for name in names
    )
    applied = harness.event_messages("doomed", "DeletionPolicyApplied")
    assert applied and all("deletionPolicy=Destroy" in m for m in applied), applied
    store.destroy(export)
    del running


def test_operator_restart_during_suspend_starts_no_second_driver(
    harness: OperatorHarness,
) -> None:
    uid, running = harness.start_running("steady")
    driver = running["execution"]["driverPod"]
    harness.patch_spec("steady", suspend=True)
    harness.wait_status("steady", lambda s: "termination" in s, "the termination request")
    harness.operator.kill()
    request = harness.status("steady")["termination"]
    harness.operator.start()
    time.sleep(3)
    after = harness.status("steady")
    assert after["termination"] == request, "a restart must not re-request or drop the request"
    assert after["execution"] == running["execution"]
    assert harness.pod_names(uid) == [driver]

    harness.operator.kill()
    harness.exit_pod(driver, DriverExit.TERMINATED)
    harness.operator.start()
    harness.wait_phase("steady", "SUSPENDED")
    time.sleep(2)
    assert harness.pod_names(uid) == [driver]
    assert harness.status("steady")["execution"]["attempt"] == 1


# --- exports -----------------------------------------------------------------------------------


def test_export_while_running_asks_the_driver(harness: OperatorHarness) -> None:
    harness.start_running("exporter")
    harness.patch_spec("exporter", exportSnapshot={"name": "nightly"})
    requested = harness.wait_status(
        "exporter", lambda s: "exportRequest" in s, "an export-only snapshot request"
    )
    assert requested["exportRequest"]["name"] == "nightly"
    assert requested["phase"] == "RUNNING"
    assert "termination" not in requested, "an export-only snapshot keeps the job running"
    harness.wait_event("exporter", "ExportRequested")

    exported = {
        "name": "nightly",
        "snapshotId": 7,
        "numBytes": 1024,
        "createdAt": "2026-01-01T00:00:00Z",
        "terminal": False,
    }
    harness.write_status("exporter", exportedSnapshots=[exported])
    done = harness.wait_status(
        "exporter", lambda s: "exportRequest" not in s, "the export request cleared"
    )
    assert done["exportedSnapshots"] == [exported]
    harness.wait_event("exporter", "SnapshotExported")


def test_export_with_cancel_job_cancels_gracefully(harness: OperatorHarness) -> None:
    _, running = harness.start_running("finale")
    harness.patch_spec("finale", exportSnapshot={"name": "last", "cancelJob": True})
    completing = harness.wait_status(
        "finale", lambda s: "termination" in s, "a CANCEL_GRACEFUL request"
    )
    assert completing["termination"]["mode"] == "CANCEL_GRACEFUL"
    assert completing["termination"]["exportName"] == "last"
    harness.exit_pod(running["execution"]["driverPod"], DriverExit.TERMINATED)
    failed = harness.wait_phase("finale", "FAILED")
    assert failed["lastFailure"]["reason"] == "Cancelled"
    harness.wait_event("finale", "Cancelled")


def test_export_while_suspended_copies_and_validates(
    harness: OperatorHarness, store: HazelcastSnapshotStore
) -> None:
    uid, running = harness.start_running("archive")
    # The restore point's map is the one the record names, with the count it was written with.
    source = snapshot_map_name(uid, 0, 2)
    write_snapshot(store, source, uid, 3)
    harness.write_status(
        "archive",
        executionRecord={
            "snapshotId": 3,
            "dataMapIndex": 0,
            "dataMapBackupCount": 2,
            "ongoingSnapshotId": 3,
        },
    )
    harness.patch_spec("archive", suspend=True)
    harness.wait_status("archive", lambda s: "termination" in s, "the suspend request")
    harness.exit_pod(running["execution"]["driverPod"], DriverExit.TERMINATED)
    harness.wait_phase("archive", "SUSPENDED")

    recorder = harness.record_phases("archive")
    harness.patch_spec("archive", exportSnapshot={"name": "cold"})
    suspended = harness.wait_status(
        "archive",
        lambda s: s.get("phase") == "SUSPENDED" and bool(s.get("exportedSnapshots")),
        "the export listed and the job suspended again",
    )
    time.sleep(0.5)
    phases = recorder.stop()
    # The watch may start with the job still SUSPENDED before the copy.
    assert phases[phases.index("SUSPENDED_EXPORTING_SNAPSHOT") :] == [
        "SUSPENDED_EXPORTING_SNAPSHOT",
        "SUSPENDED",
    ]
    (export,) = suspended["exportedSnapshots"]
    assert (export["name"], export["snapshotId"], export["terminal"]) == ("cold", 3, False)
    assert export["numBytes"] == 400
    target = export_map_name(harness.namespace, "cold")
    assert validate_snapshot(store, target, 3).num_bytes == 400
    for reason in ("ExportCopyStarted", "SnapshotExported"):
        harness.wait_event("archive", reason)
    store.destroy(target)
    store.destroy(source)


# --- upgrades ----------------------------------------------------------------------------------


def test_upgrade_with_snapshot_restarts_gracefully(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("rolling")
    harness.patch_spec("rolling", snapshotIntervalSeconds=30)
    completing = harness.wait_status(
        "rolling", lambda s: "termination" in s, "a RESTART_GRACEFUL request"
    )
    assert completing["termination"]["mode"] == "RESTART_GRACEFUL"
    assert completing["termination"]["reason"] == "SpecChanged"
    harness.exit_pod(running["execution"]["driverPod"], DriverExit.TERMINATED)
    started = harness.wait_status(
        "rolling", lambda s: s["execution"]["attempt"] == 2, "the upgraded execution"
    )
    assert started["execution"]["specHash"] != running["execution"]["specHash"]
    harness.wait_pods(uid, [started["execution"]["driverPod"]])
    harness.wait_event("rolling", "Upgrading")


@pytest.mark.parametrize("mode", ["last-snapshot", "stateless"])
def test_upgrade_forceful_modes_replace_the_driver(harness: OperatorHarness, mode: str) -> None:
    uid, running = harness.start_running("swift", upgradeMode=mode)
    harness.write_status(
        "swift", executionRecord={"snapshotId": 5, "dataMapIndex": 1, "ongoingSnapshotId": 5}
    )
    if mode == "last-snapshot":
        # The state carries over: the new image checks the restore point first. A refusal
        # leaves the running execution alone; the next spec is checked again.
        harness.patch_spec("swift", image="snapshotjob/runtime:broken")
        differs = "Snapshot 5 was written by another pipeline: operators sums != totals"
        harness.answer_upgrade_check("swift", DriverExit.SNAPSHOT_INCOMPATIBLE, differs)
        refused = harness.wait_status(
            "swift",
            lambda s: _condition(s, "Degraded")["reason"] == "UpgradeRefused",
            "the rollout refused",
        )
        assert differs in _condition(refused, "Degraded")["message"]
        assert refused["execution"]["attempt"] == 1 and refused["phase"] == "RUNNING", refused
        harness.wait_event("swift", "UpgradeRefused")
        harness.wait_pods(uid, [running["execution"]["driverPod"]])
    harness.patch_spec("swift", image="snapshotjob/runtime:v2")
    if mode == "last-snapshot":
        harness.answer_upgrade_check("swift", 0)
    started = harness.wait_status(
        "swift", lambda s: s["execution"]["attempt"] == 2, "the upgraded execution"
    )
    assert "termination" not in started, "forceful modes need no request to the driver"
    harness.wait_pods(uid, [started["execution"]["driverPod"]])
    (pod,) = harness.pods(uid)
    assert pod.spec.containers[0].image == "snapshotjob/runtime:v2"
    record = started["executionRecord"]
    if mode == "stateless":
        assert record["snapshotId"] == -1, "stateless drops the job's state"
        assert record["ongoingSnapshotId"] == 5, "snapshot ids are never reused"
    else:
        assert record["snapshotId"] == 5, "last-snapshot restores the last snapshot"
    del running


def _condition(status: dict[str, Any], kind: str) -> dict[str, Any]:
    """The status's condition of that type (an empty one if it has none)."""
    return next((c for c in status.get("conditions", ()) if c["type"] == kind), {"reason": ""})


# --- deadlines and invalid input ---------------------------------------------------------------


@pytest.mark.parametrize("operator_args", [("--graceful-timeout", "2")])
def test_graceful_request_not_served_escalates(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("stuck")
    harness.patch_spec("stuck", suspend=True)
    harness.wait_status("stuck", lambda s: "termination" in s, "the suspend request")
    suspended = harness.wait_phase("stuck", "SUSPENDED", timeout=15)
    assert "termination" not in suspended
    harness.wait_pods(uid, [])
    harness.wait_event("stuck", "TerminationEscalated")
    del running


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"exportSnapshot": {"cancelJob": True}}, "exportSnapshot.cancelJob needs"),
        ({"snapshotIntervalSeconds": 0}, "spec.snapshotIntervalSeconds"),
        ({"processingGuarantee": "NONE"}, "upgradeMode"),
        ({"image": None}, "spec.image"),
    ],
)
def test_invalid_specs_are_rejected_at_admission(
    harness: OperatorHarness, spec: dict[str, Any], message: str
) -> None:
    body = {key: value for key, value in VALID_SPEC.items() if spec.get(key, 0) is not None}
    body.update({key: value for key, value in spec.items() if value is not None})
    with pytest.raises(client.exceptions.ApiException) as rejected:
        harness.objects.create_namespaced_custom_object(
            GROUP,
            VERSION,
            harness.namespace,
            PLURAL,
            {
                "apiVersion": f"{GROUP}/{VERSION}",
                "kind": "SnapshotJob",
                "metadata": {"name": "bad"},
                "spec": body,
            },
        )
    assert rejected.value.status == 422
    assert message in json.loads(rejected.value.body)["message"]


def test_export_over_the_initial_snapshot_is_rejected(harness: OperatorHarness) -> None:
    uid = harness.create_job(
        "careful", initialSnapshotName="golden", exportSnapshot={"name": "golden"}
    )
    degraded = harness.wait_status(
        "careful",
        lambda s: any(
            c["type"] == "Degraded" and c["reason"] == "ExportRejected"
            for c in s.get("conditions", ())
        ),
        "the Degraded condition ExportRejected",
    )
    assert degraded["phase"] == "STARTING", "the job itself still starts"
    harness.wait_event("careful", "ExportRejected")
    (pod,) = harness.pods(uid)
    env = {item.name: item.value for item in pod.spec.containers[0].env}
    assert env["SJ_INITIAL_SNAPSHOT_NAME"] == "golden"


# --- the store gates starts --------------------------------------------------------------------


def test_no_start_while_the_store_cannot_hold_the_backups(harness: OperatorHarness) -> None:
    uid = harness.create_job("greedy", hazelcast={"backupCount": 3})
    waiting = harness.wait_status(
        "greedy",
        lambda s: any(c["reason"] == "TooFewMembers" for c in s.get("conditions", ())),
        "StoreReady TooFewMembers",
    )
    assert waiting["phase"] == "NOT_RUNNING"
    time.sleep(2)
    assert harness.pods(uid) == []
    harness.wait_event("greedy", "StoreNotReady")
    harness.patch_spec("greedy", hazelcast={"backupCount": 2})
    harness.wait_phase("greedy", "STARTING")


def test_no_start_while_the_store_is_unreachable(harness: OperatorHarness) -> None:
    uid = harness.create_job("lonely", hazelcast={"address": "127.0.0.1:1", "clusterName": "x"})
    waiting = harness.wait_status(
        "lonely",
        lambda s: any(c["reason"] == "StoreUnreachable" for c in s.get("conditions", ())),
        "StoreReady StoreUnreachable",
    )
    assert waiting["phase"] == "NOT_RUNNING"
    assert harness.pods(uid) == []


@pytest.mark.slow
def test_split_brain_protection_waits_for_the_quorum(
    harness: OperatorHarness, healthy_hazelcast: HazelcastCluster
) -> None:
    policy = {"maxRestarts": 5, "backoffSeconds": 1, "maxBackoffSeconds": 1}
    uid, running = harness.start_running("guarded", splitBrainProtection=True, restartPolicy=policy)
    assert running["executionRecord"]["quorumSize"] == 2, "more than half of 3 members"
    # The test plays the driver here: one that had seen the store at 5 members raised the
    # quorum to quorum_of(5) = 3, so losing one of the 3 members now holds the restart back.
    # The real driver's raise is shown in tests/unit/protocol/test_quorum.py and, with real
    # partitions, tests/integration/test_partitions.py.
    harness.write_status("guarded", executionRecord={**running["executionRecord"], "quorumSize": 3})
    healthy_hazelcast.kill(2)
    harness.exit_pod(running["execution"]["driverPod"], 1)
    held = harness.wait_status(
        "guarded",
        lambda s: (
            s.get("phase") == "RESTARTING"
            and any(
                c["type"] == "StoreReady" and c["reason"] in ("BelowQuorum", "NotClusterSafe")
                for c in s.get("conditions", ())
            )
        ),
        "the restart held back by the store",
    )
    time.sleep(5)
    held = harness.status("guarded")
    assert held["execution"]["attempt"] == 1, "no new execution below the quorum"
    assert held["phase"] == "RESTARTING"
    healthy_hazelcast.restart(2)
    healthy_hazelcast.wait_cluster_safe(expected_size=3)
    resumed = harness.wait_status(
        "guarded", lambda s: s["execution"]["attempt"] == 2, "the restart once whole", timeout=60
    )
    # The failed driver Pod stays for its log.
    harness.wait_pods(uid, [running["execution"]["driverPod"], resumed["execution"]["driverPod"]])


@pytest.mark.slow
def test_no_start_while_the_store_is_not_cluster_safe(
    harness: OperatorHarness, healthy_hazelcast: HazelcastCluster, store: HazelcastSnapshotStore
) -> None:
    # Enough data that the migration after losing a member takes a while to settle.
    uid, running = harness.start_running(
        "patient", restartPolicy={"maxRestarts": 5, "backoffSeconds": 1, "maxBackoffSeconds": 1}
    )
    ballast = f"__sj.snapshot.ballast-{uid}.0"
    chunk = bytes(64 * 1024)
    store.put_chunks(ballast, [(ChunkKey(1, "ballast", p, 0), chunk) for p in range(2000)])
    observed: list[tuple[float, bool]] = []
    healthy_hazelcast.kill(1)
    harness.exit_pod(running["execution"]["driverPod"], 1)
    deadline = time.monotonic() + 60
    started_at = None
    while time.monotonic() < deadline and started_at is None:
        health = healthy_hazelcast.health(0) or {}
        observed.append((time.monotonic(), health.get("clusterSafe") is True))
        if harness.status("patient")["execution"]["attempt"] == 2:
            started_at = time.monotonic()
        time.sleep(0.05)
    assert started_at is not None, harness.operator.process.log_tail(40)
    reasons = [c["reason"] for c in harness.status("patient")["conditions"]]
    assert "ClusterSafe" in reasons
    unsafe = [at for at, safe in observed if not safe]
    assert unsafe, "the member loss must make the store unsafe for a while"
    assert all(at < started_at for at in unsafe), "the restart waited until cluster-safe"
    store.destroy(ballast)


# --- several replicas --------------------------------------------------------------------------

PEERING_CRD: dict[str, Any] = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "kopfpeerings.kopf.dev"},
    "spec": {
        "scope": "Namespaced",
        "group": "kopf.dev",
        "names": {"kind": "KopfPeering", "plural": "kopfpeerings", "singular": "kopfpeering"},
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "status": {
                                "type": "object",
                                "x-kubernetes-preserve-unknown-fields": True,
                            }
                        },
                    }
                },
            }
        ],
    },
}
"""kopf's namespaced peering CRD, as the chart installs it."""


@pytest.mark.slow
def test_two_replicas_one_works_and_the_other_takes_over(
    kube_api: KubeAPI, namespace: str, healthy_hazelcast: HazelcastCluster, tmp_path: Path
) -> None:
    api = kube_api.api_client()
    try:
        client.ApiextensionsV1Api(api).create_custom_resource_definition(PEERING_CRD)
    except client.exceptions.ApiException as exc:
        if exc.status != 409:
            raise
    objects = client.CustomObjectsApi(api)
    peering = {
        "apiVersion": "kopf.dev/v1",
        "kind": "KopfPeering",
        "metadata": {"name": "snapshotjob-operator"},
    }
    deadline = time.monotonic() + 30
    while True:
        try:
            objects.create_namespaced_custom_object(
                "kopf.dev", "v1", namespace, "kopfpeerings", peering
            )
            break
        except client.exceptions.ApiException as exc:
            if exc.status != 404 or time.monotonic() > deadline:
                raise
            time.sleep(0.2)  # the CRD is not served yet

    def replica(label: str, priority: int) -> OperatorProcess:
        return OperatorProcess(
            kube_api,
            namespace,
            healthy_hazelcast,
            tmp_path / f"operator-{label}.log",
            "--priority",
            str(priority),
            "--peering-lifetime",
            "10",
            "--instance",
            f"replica-{label}",
            standalone=False,
        )

    def announced_priorities() -> list[int]:
        peers = (
            objects.get_namespaced_custom_object(
                "kopf.dev", "v1", namespace, "kopfpeerings", "snapshotjob-operator"
            ).get("status")
            or {}
        )
        return sorted(int(peer["priority"]) for peer in peers.values())

    low, high = replica("low", 100), replica("high", 200)
    try:
        # kopf starts every replica paused and resumes it once its peering shows no peer of a
        # higher priority. So the high one goes first, and the low one only once the high one
        # has resumed: every peering state the low one ever sees has the high one in it, and
        # it never resumes while the high one lives. (Started together, each order happened:
        # the low one first resumed and could take the job before it saw the high one; or it
        # saw the high one at once and stayed paused without a "Pausing" line to wait for.)
        high.start()
        wait_until(
            lambda: "Resuming operations" in high.process.log_path.read_text(),
            WAIT,
            "the high replica resuming from kopf's initial pause",
        )
        low.start()
        wait_until(
            lambda: announced_priorities() == [100, 200],
            WAIT,
            "the low replica announcing itself next to the high one",
        )
        harness = OperatorHarness(kube_api, namespace, high)
        uid, running = harness.start_running("shared")
        harness.wait_event("shared", "ExecutionStarted")
        harness.wait_event("shared", "PipelineRunning")
        # (The testbed has no node: its scheduler also reports the driver unschedulable.)
        sources = harness.event_sources("shared")
        assert sources["ExecutionStarted"] == sources["PipelineRunning"] == {"replica-high"}
        low_log = low.process.log_path.read_text()
        assert "Supervising job" not in low_log, "the low one waits"
        assert "Resuming operations" not in low_log, "the low one stayed paused"

        high.kill()
        harness.operator = low
        harness.patch_spec("shared", suspend=True)
        requested = harness.wait_status(
            "shared", lambda s: "termination" in s, "the takeover by the low replica", 40
        )
        assert requested["execution"] == running["execution"], "the takeover starts nothing"
        harness.wait_event("shared", "TerminationRequested")
        sources = harness.event_sources("shared")
        assert sources["TerminationRequested"] == {"replica-low"}
        assert sources["ExecutionStarted"] == {"replica-high"}
        assert harness.pod_names(uid) == [running["execution"]["driverPod"]]
        assert "Supervising job" in low.process.log_path.read_text()
    finally:
        high.stop()
        low.stop()


# --- exit codes, scope --------------------------------------------------------------------


def test_an_interrupted_driver_restarts_at_once_without_counting(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("drained")
    first = running["execution"]

    harness.exit_pod(first["driverPod"], DriverExit.INTERRUPTED)

    restarted = harness.wait_status(
        "drained",
        lambda s: (s.get("execution") or {}).get("attempt") == 2,
        "a second execution",
    )
    assert restarted.get("restarts", 0) == 0, "not counted in restarts"
    assert "lastFailure" not in restarted, "an interruption is not a failure"
    harness.wait_pods(uid, [restarted["execution"]["driverPod"]])
    harness.wait_event("drained", "DriverInterrupted")
    assert "ExecutionFailed" not in harness.events("drained")


def test_a_fenced_driver_starts_nothing(harness: OperatorHarness) -> None:
    uid, running = harness.start_running("zombie")
    first = running["execution"]

    harness.exit_pod(first["driverPod"], DriverExit.FENCED)

    fenced = harness.wait_status(
        "zombie",
        lambda s: any(
            c["type"] == "Degraded" and c["reason"] == "DriverFenced"
            for c in s.get("conditions", ())
        ),
        "Degraded DriverFenced",
    )
    harness.wait_event("zombie", "DriverFenced")
    time.sleep(2)  # several reconciles (store retry 1 s): none may start an execution
    assert harness.status("zombie")["execution"] == first
    assert "lastFailure" not in fenced
    assert harness.pod_names(uid) == [first["driverPod"]]


def _namespace(kube: KubeAPI) -> str:
    name = f"op-{uuid.uuid4().hex[:8]}"
    client.CoreV1Api(kube.api_client()).create_namespace({"metadata": {"name": name}})
    return name


def _started(harness: OperatorHarness, name: str, uid: str, timeout: float = WAIT) -> str:
    status = harness.wait_phase(name, "STARTING", timeout)
    pod = str(status["execution"]["driverPod"])
    harness.wait_pods(uid, [pod])
    return pod


def test_all_namespaces_reconciles_jobs_everywhere_and_namespace_only_its_own(
    kube_api: KubeAPI, namespace: str, healthy_hazelcast: HazelcastCluster, tmp_path: Path
) -> None:
    other = _namespace(kube_api)
    everywhere = OperatorProcess(
        kube_api, namespace, healthy_hazelcast, tmp_path / "all.log", all_namespaces=True
    )
    scoped = OperatorProcess(kube_api, namespace, healthy_hazelcast, tmp_path / "scoped.log")
    try:
        everywhere.start()
        mine, theirs = (
            OperatorHarness(kube_api, namespace, everywhere),
            OperatorHarness(kube_api, other, everywhere),
        )
        for harness in (mine, theirs):
            uid = harness.create_job("everywhere")
            # Every namespace: it also takes up the jobs earlier tests left behind.
            _started(harness, "everywhere", uid, timeout=2 * WAIT)
        everywhere.stop()

        scoped.start()
        mine.operator = theirs.operator = scoped
        ignored = theirs.create_job("scoped")
        _started(mine, "scoped", mine.create_job("scoped"))
        time.sleep(3)  # the scoped operator is up and working: the other job had its chance
        assert theirs.status("scoped") == {}, "a job outside --namespace is left alone"
        assert theirs.pods(ignored) == []
        assert f"namespace={other}" not in scoped.process.log_path.read_text()
    finally:
        everywhere.stop()
        scoped.stop()
        delete_test_namespace(kube_api.api_client(), other)


# --- failures that end ------------------------------------------------------------------------


def _versions(harness: OperatorHarness, name: str, seconds: float) -> list[str]:
    """Polls the job for that long; returns every resourceVersion seen, in order."""
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        job = harness.job(name)
        assert job is not None
        version = job["metadata"]["resourceVersion"]
        if not seen or seen[-1] != version:
            seen.append(version)
        time.sleep(0.05)
    return seen


def test_a_refused_driver_pod_is_reported_once_and_starts_when_allowed(
    harness: OperatorHarness,
) -> None:
    quota = {"metadata": {"name": "no-pods"}, "spec": {"hard": {"pods": "0"}}}
    harness.core.create_namespaced_resource_quota(harness.namespace, quota)
    uid = harness.create_job("quota")

    degraded = harness.wait_status(
        "quota",
        lambda s: any(
            c["type"] == "Degraded" and c["reason"] == "CreateFailed"
            for c in s.get("conditions", ())
        ),
        "Degraded CreateFailed",
    )
    versions = _versions(harness, "quota", 20)

    # Before: every failed reconcile started a new execution, about 10 status writes a second.
    assert len(versions) <= 8, f"status written {len(versions) - 1} times in 20 s"
    status = harness.status("quota")
    assert status["phase"] == "STARTING"
    assert status["execution"]["id"] == degraded["execution"]["id"], "the same execution"
    condition = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert condition["status"] == "True"
    assert "exceeded quota" in condition["message"]
    assert f"object=Pod/{status['execution']['driverPod']}" in condition["message"]
    assert harness.events("quota").count("CreateFailed") == 1
    events = k8s_events(harness, "quota", "CreateFailed")
    assert len(events) == 1 and events[0].type == "Warning"
    assert "exceeded quota" in events[0].note and "object=Pod/" in events[0].note
    assert harness.pod_names(uid) == []

    harness.core.delete_namespaced_resource_quota("no-pods", harness.namespace)

    harness.wait_pods(uid, [status["execution"]["driverPod"]], timeout=60)
    started = harness.wait_status(
        "quota", lambda s: "startFailure" not in s, "the failure cleared", timeout=10
    )
    assert started["execution"]["id"] == status["execution"]["id"]
    harness.run_driver("quota", started["execution"]["driverPod"])
    running = harness.wait_phase("quota", "RUNNING")
    condition = next(c for c in running["conditions"] if c["type"] == "Degraded")
    assert condition["status"] == "False"


def k8s_events(harness: OperatorHarness, name: str, reason: str) -> list[Any]:
    """The Events (``events.k8s.io/v1``) regarding the job with that reason."""
    listed = client.EventsV1Api(harness.api).list_namespaced_event(
        harness.namespace, field_selector=f"regarding.name={name}"
    )
    return [event for event in listed.items if event.reason == reason]


# --- Spark that never starts, and a failed driver's reason (issue 13) --------------------------


def _set_pod_status(harness: OperatorHarness, pod: str, status: dict[str, Any]) -> None:
    harness.core.patch_namespaced_pod_status(pod, harness.namespace, {"status": status})


@pytest.mark.parametrize("operator_args", [("--pipeline-start-timeout", "8")])
def test_an_unschedulable_driver_degrades_then_fails_the_job(harness: OperatorHarness) -> None:
    # The testbed's scheduler has no node: it reports every Pod Unschedulable, as a cluster
    # whose nodes are all too small would. (Executor Pods: the unit tests.)
    policy = {"maxRestarts": 0, "backoffSeconds": 1, "maxBackoffSeconds": 1}
    harness.create_job("starved", restartPolicy=policy)
    failed = harness.wait_phase("starved", "FAILED", timeout=40)

    assert failed["lastFailure"]["reason"] == "PipelineStartTimeout"
    assert "timeoutSeconds=8" in failed["lastFailure"]["message"]
    assert "reason=Unschedulable" in failed["lastFailure"]["message"]
    (event,) = k8s_events(harness, "starved", "DriverUnschedulable")
    assert event.type == "Warning" and "pod=starved-driver-1" in event.note
    harness.wait_event("starved", "RestartLimitReached")


def test_a_failed_drivers_message_and_oom_kill_reach_status_and_event(
    harness: OperatorHarness,
) -> None:
    policy = {"maxRestarts": 0, "backoffSeconds": 1, "maxBackoffSeconds": 1}
    uid, running = harness.start_running("greedy", restartPolicy=policy)
    driver = running["execution"]["driverPod"]
    log_tail = "line 1\nTraceback (most recent call last):\njava.lang.OutOfMemoryError: heap\n"
    _set_pod_status(
        harness,
        driver,
        {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "driver",
                    "image": VALID_SPEC["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {
                        "terminated": {
                            "exitCode": 137,
                            "reason": "OOMKilled",
                            "message": log_tail,
                        }
                    },
                }
            ],
        },
    )

    failed = harness.wait_phase("greedy", "FAILED")
    message = failed["lastFailure"]["message"]
    assert "exitCode=137" in message and "containerReason=OOMKilled" in message
    assert "java.lang.OutOfMemoryError: heap" in message
    assert failed["lastFailure"]["driverPod"] == driver
    (event,) = k8s_events(harness, "greedy", "RestartLimitReached")
    assert "containerReason=OOMKilled" in event.note and "OutOfMemoryError" in event.note
    assert harness.pod_names(uid) == [driver], "kept for kubectl logs"
