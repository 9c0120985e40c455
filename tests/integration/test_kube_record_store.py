"""The execution record store on a real API server: safe writes, conflicts, doubt, fencing,
and the exports the driver lists in ``status.exportedSnapshots``.

Runs against the control-plane test bed (real etcd and kube-apiserver). Where a test needs a
network fault at an exact moment (a response lost after the server applied the patch), it
wraps the client's API object and raises the same urllib3 error a real time-out raises; the
API server and its optimistic locking stay real.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
import urllib3.exceptions
from kubernetes import client

from snapshot_protocol.errors import IndeterminateRecordWrite, ZombieExecution
from snapshotjob_contract.record import ExecutionRecord
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from spark_runtime.kube_record_store import KubernetesRecordStore
from testbed.controlplane import KubeAPI
from testbed.snapshotjob_crd import create_job, install_crd

pytestmark = [pytest.mark.integration, pytest.mark.kube]

NAMESPACE = "default"


@pytest.fixture(scope="module")
def api(kube_api: KubeAPI) -> Iterator[client.ApiClient]:
    api_client = kube_api.api_client()
    install_crd(api_client)
    yield api_client
    api_client.close()


def _status(api: client.ApiClient, name: str) -> dict[str, Any]:
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name
    )
    status: dict[str, Any] = job.get("status") or {}
    return status


def _patch_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> str:
    """Patches the status as another writer (the operator); returns the new resourceVersion."""
    job = client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        name,
        {"status": status},
        _content_type="application/merge-patch+json",
    )
    version: str = job["metadata"]["resourceVersion"]
    return version


def _resource_version(api: client.ApiClient, name: str) -> str:
    job = client.CustomObjectsApi(api).get_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, PLURAL, name
    )
    version: str = job["metadata"]["resourceVersion"]
    return version


class FaultyObjects(client.CustomObjectsApi):  # type: ignore[misc]
    """The real client, with a hook run around each status patch (faults at exact moments).

    It also keeps what the store sent and what the API server answered, so the tests check
    those values rather than the store's log lines.

    Attributes:
        patches: Status patches the store attempted.
        versions: The ``metadata.resourceVersion`` each attempted patch carried, in order.
        answers: The API server's HTTP status for each patch that reached it (200 or the
            error's status, e.g. 409 for a stale ``resourceVersion``), in order.
    """

    def __init__(self, api_client: client.ApiClient) -> None:
        super().__init__(api_client)
        self.patches = 0
        self.versions: list[str] = []
        self.answers: list[int] = []
        self.before_patch: Callable[[int], None] = lambda n: None
        self.after_patch: Callable[[int], None] = lambda n: None

    def patch_namespaced_custom_object_status(self, *args: Any, **kwargs: Any) -> Any:
        self.patches += 1
        body = kwargs["body"] if "body" in kwargs else args[5]
        self.versions.append(body["metadata"]["resourceVersion"])
        self.before_patch(self.patches)
        try:
            result = super().patch_namespaced_custom_object_status(*args, **kwargs)
        except client.ApiException as exc:
            self.answers.append(exc.status)
            raise
        self.answers.append(200)
        self.after_patch(self.patches)
        return result


def _record(snapshot_id: int) -> ExecutionRecord:
    return ExecutionRecord(
        snapshot_id=snapshot_id,
        data_map_index=snapshot_id % 2,
        ongoing_snapshot_id=snapshot_id,
        quorum_size=2,
        timestamp=1_700_000_000_000 + snapshot_id,
    )


def _no_sleep(seconds: float) -> None:
    return None


def test_safe_write_round_trips(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    store = KubernetesRecordStore(client.CustomObjectsApi(api), NAMESPACE, name, "exec-1")

    assert store.read() == ExecutionRecord()
    store.write_safe(_record(3))

    assert store.read() == _record(3)
    assert _status(api, name)["executionRecord"]["snapshotId"] == 3
    assert _status(api, name)["execution"]["id"] == "exec-1"


def test_conflict_is_retried_and_keeps_the_other_writers_change(api: client.ApiClient) -> None:
    """A 409 forced by a status write between our read and our patch: re-read, re-apply."""
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    read_by_the_store = _resource_version(api, name)
    objects = FaultyObjects(api)
    operators: list[str] = []

    def operator_counts_a_restart(n: int) -> None:
        if n == 1:
            operators.append(_patch_status(api, name, {"restarts": 2}))

    objects.before_patch = operator_counts_a_restart
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    store.write_safe(_record(5))

    # The first patch carried the version the store read, which the operator's write made
    # stale: 409. The store re-read and patched again on the operator's version.
    assert objects.versions == [read_by_the_store, *operators]
    assert objects.answers == [409, 200]
    status = _status(api, name)
    assert status["executionRecord"]["snapshotId"] == 5
    assert status["restarts"] == 2


def test_timeout_after_the_server_applied_is_resolved_by_rereading(
    api: client.ApiClient,
) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)

    def response_lost(n: int) -> None:
        if n == 1:
            raise urllib3.exceptions.ReadTimeoutError(None, "/status", "Read timed out")

    objects.after_patch = response_lost
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    store.write_safe(_record(7))

    assert objects.patches == 1, "the re-read should have shown the write was applied"
    assert store.read() == _record(7)


def test_timeout_before_the_server_applied_is_retried(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)

    def request_lost(n: int) -> None:
        if n == 1:
            raise urllib3.exceptions.ConnectTimeoutError(None, "Connection timed out")

    objects.before_patch = request_lost
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    store.write_safe(_record(9))

    assert objects.patches == 2
    assert store.read() == _record(9)


def test_lasting_doubt_is_indeterminate(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)

    def always_lost(n: int) -> None:
        raise urllib3.exceptions.ReadTimeoutError(None, "/status", "Read timed out")

    objects.before_patch = always_lost
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", deadline_s=0.5)
    with pytest.raises(IndeterminateRecordWrite, match=name):
        store.write_safe(_record(11))
    assert objects.patches >= 2
    assert store.read() == ExecutionRecord()


def test_zombie_writes_are_refused(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    old = KubernetesRecordStore(client.CustomObjectsApi(api), NAMESPACE, name, "exec-1")
    old.write_safe(_record(1))
    # The operator starts a new execution: the old driver is now a zombie.
    _patch_status(api, name, {"execution": {"id": "exec-2"}})

    with pytest.raises(ZombieExecution, match="exec-2"):
        old.write_safe(_record(2))
    old.write_standard(_record(3))  # best effort: refused silently

    assert old.read() == _record(1)


def test_zombie_fenced_even_when_new_execution_claims_between_read_and_patch(
    api: client.ApiClient,
) -> None:
    """The fence and the write are checked against one resourceVersion: no window between."""
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)

    def new_execution_claims(n: int) -> None:
        if n == 1:
            _patch_status(api, name, {"execution": {"id": "exec-2"}})

    objects.before_patch = new_execution_claims
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    with pytest.raises(ZombieExecution):
        store.write_safe(_record(4))
    assert objects.patches == 1
    assert _status(api, name).get("executionRecord") is None


# --- status.exportedSnapshots ------------------------------------------------------------------

_EXPORTED_AT = datetime(2026, 3, 1, 12, 30, 5, 250_000, tzinfo=UTC)


def _export(store: KubernetesRecordStore, name: str, snapshot_id: int, terminal: bool) -> None:
    store.append_exported_snapshot(
        name=name,
        snapshot_id=snapshot_id,
        num_bytes=100 * snapshot_id,
        created_at=_EXPORTED_AT,
        terminal=terminal,
    )


def test_exports_are_a_map_by_name(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    store = KubernetesRecordStore(client.CustomObjectsApi(api), NAMESPACE, name, "exec-1")

    _export(store, "nightly", 3, terminal=False)
    _export(store, "weekly", 4, terminal=False)
    _export(store, "nightly", 7, terminal=True)

    assert _status(api, name)["exportedSnapshots"] == [
        {
            "name": "weekly",
            "snapshotId": 4,
            "numBytes": 400,
            "createdAt": "2026-03-01T12:30:05Z",
            "terminal": False,
        },
        {
            "name": "nightly",
            "snapshotId": 7,
            "numBytes": 700,
            "createdAt": "2026-03-01T12:30:05Z",
            "terminal": True,
        },
    ]


def test_export_entry_conflict_keeps_the_operators_change(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)

    def operator_writes_an_export_request(n: int) -> None:
        if n == 1:
            _patch_status(
                api,
                name,
                {
                    "exportRequest": {
                        "name": "weekly",
                        "requestId": "r-1",
                        "requestedAt": "2026-03-01T12:00:00Z",
                    }
                },
            )

    objects.before_patch = operator_writes_an_export_request
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    _export(store, "nightly", 2, terminal=False)

    assert objects.answers == [409, 200], "the first patch met a 409 and was repeated"
    status = _status(api, name)
    assert [e["name"] for e in status["exportedSnapshots"]] == ["nightly"]
    assert status["exportRequest"]["name"] == "weekly"


def test_export_entry_after_a_lost_response_is_written_once(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)

    def response_lost(n: int) -> None:
        if n == 1:
            raise urllib3.exceptions.ReadTimeoutError(None, "/status", "Read timed out")

    objects.after_patch = response_lost
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    _export(store, "nightly", 5, terminal=False)

    assert objects.patches == 1, "the re-read should have shown the entry was written"
    assert len(_status(api, name)["exportedSnapshots"]) == 1


def test_zombie_cannot_report_exports(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    store = KubernetesRecordStore(client.CustomObjectsApi(api), NAMESPACE, name, "exec-1")
    _patch_status(api, name, {"execution": {"id": "exec-2"}})

    with pytest.raises(ZombieExecution, match="exec-2"):
        _export(store, "nightly", 1, terminal=False)
    assert _status(api, name).get("exportedSnapshots") in (None, [])


def test_the_pipeline_report_is_fenced_and_survives_a_conflict(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    objects = FaultyObjects(api)
    store = KubernetesRecordStore(objects, NAMESPACE, name, "exec-1", sleep=_no_sleep)
    # Another writer (the operator) changes the status between the store's read and patch.
    objects.before_patch = lambda n: _patch_status(api, name, {"restarts": 1}) if n == 1 else None

    store.report_pipeline_started()
    store.report_pipeline_started()  # already there: nothing written

    status = _status(api, name)
    assert status["pipelineStarted"]["executionId"] == "exec-1"
    assert status["restarts"] == 1, "the other writer's change is kept"
    assert objects.answers == [409, 200]
    _patch_status(api, name, {"execution": {"id": "exec-2"}})
    with pytest.raises(ZombieExecution, match="exec-2"):
        store.report_pipeline_started()


def test_the_exit_report_is_fenced_and_kept_with_its_message(api: client.ApiClient) -> None:
    name = create_job(api, execution_id="exec-1")["metadata"]["name"]
    store = KubernetesRecordStore(
        client.CustomObjectsApi(api), NAMESPACE, name, "exec-1", sleep=_no_sleep
    )

    store.report_exit(143, "Interrupted by SIGTERM")

    report = _status(api, name)["driverExit"]
    assert (report["executionId"], report["exitCode"], report["message"]) == (
        "exec-1",
        143,
        "Interrupted by SIGTERM",
    )
    _patch_status(api, name, {"execution": {"id": "exec-2"}})
    with pytest.raises(ZombieExecution, match="exec-2"):
        store.report_exit(0, None)
    assert _status(api, name)["driverExit"]["executionId"] == "exec-1"
