"""A deletion performed: the export kept as an object that outlives the job, or the job held.

The executor with in-memory gateways (:mod:`tests.unit.operator.fake_gateways`), so that what
the integration tests cannot provoke on purpose is pinned here: the deletion's export object
is there, completed, before anything of the job is destroyed; an object the API server
refuses, or one of that name for another job, keeps the job and its maps; a store that fails
every copy holds the deletion after the bound, with a Warning, instead of destroying the state.
The decision's side of each step is in ``test_decide_deletion_policy.py``.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from snapshot_operator.executing import Services, reconcile_once
from snapshot_operator.exports_executing import ExportNameTaken
from snapshot_operator.gateways import CreateFailed, StoreOperationFailed
from snapshot_operator.reconcile import JobRef
from snapshot_operator.reconcile.deletion import DELETION_HELD, deletion_export_name
from snapshot_operator.settings import OperatorSettings
from snapshotjob_contract import (
    DurableStorageSpec,
    ExecutionRecordStatus,
    Phase,
    SnapshotJobStatus,
    all_snapshot_map_names,
    export_map_name,
)
from tests.unit.operator.decide_helpers import a_snapshot
from tests.unit.operator.fake_gateways import FakeDurable, FakeKubernetes, FakeStore
from tests.unit.operator.specs import VALID_SPEC

NAME = deletion_export_name(JobRef("default", "wordcount", "uid-1"))
STORAGE = DurableStorageSpec(bucket="snapshots", credentials_secret="snapshots-s3")


class ExportingKubernetes(FakeKubernetes):
    """:class:`FakeKubernetes` that also creates export objects and writes their status.

    Attributes:
        refuse_exports: The message the API server refuses export objects with; None: it
            creates them.
    """

    def __init__(self, spec: Mapping[str, Any]) -> None:
        super().__init__(spec)
        self.refuse_exports: str | None = None

    def create_export(self, namespace: str, manifest: dict[str, Any]) -> str | None:
        name = manifest["metadata"]["name"]
        if self.refuse_exports is not None:
            raise CreateFailed("SnapshotJobExport", name, 403, self.refuse_exports)
        if any(e["metadata"]["name"] == name for e in self.exports):
            return None
        created = copy.deepcopy(manifest)
        created["metadata"] |= {"uid": f"uid-{name}", "creationTimestamp": "2026-01-01T00:00:00Z"}
        self.exports.append(created)
        self.log.append(("create export", name))
        return str(created["metadata"]["uid"])

    def list_jobs(self, namespace: str, *, cached: bool = False) -> list[dict[str, Any]]:
        return [copy.deepcopy(self.job)] if self.job is not None else []

    def delete_export(self, namespace: str, name: str, uid: str) -> bool:
        kept = [e for e in self.exports if e["metadata"]["uid"] != uid]
        deleted = len(kept) < len(self.exports)
        self.exports = kept
        return deleted

    def patch_export_status(self, namespace: str, name: str, status: Mapping[str, Any]) -> bool:
        for export in self.exports:
            if export["metadata"]["name"] == name:
                export["status"] = dict(status)
                self.log.append(("export status", name))
                return True
        return False


class Clock:
    """The executor's and the decision's time, moved by the test."""

    def __init__(self) -> None:
        self.now = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)

    def __call__(self) -> datetime:
        return self.now


@pytest.fixture
def kube() -> ExportingKubernetes:
    """A suspended job with a restore point (snapshot 0), being deleted."""
    kube = ExportingKubernetes(VALID_SPEC)
    record = ExecutionRecordStatus.of(a_snapshot())
    status = SnapshotJobStatus(
        phase=Phase.SUSPENDED, observed_generation=1, execution_record=record
    )
    assert kube.job is not None
    kube.job["status"] = status.to_json()
    kube.job["metadata"]["deletionTimestamp"] = "2026-11-21T12:00:00Z"
    return kube


@pytest.fixture
def store() -> FakeStore:
    return FakeStore()


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def services(kube: ExportingKubernetes, store: FakeStore, clock: Clock) -> Services:
    settings = OperatorSettings(
        namespaces=("default",),
        store_members=("hz-0:5701",),
        store_cluster_name="store",
        durable_storage=STORAGE,
    )
    return Services(
        kube=kube, store=store, settings=settings, clock=clock, durable=FakeDurable(STORAGE)
    )


def _run(services: Services) -> bool:
    """One reconcile of the job; whether its finalizer may go."""
    return reconcile_once(services, "default", "wordcount").finalizer_removable


def _events(kube: FakeKubernetes) -> list[str]:
    return [detail for kind, detail in kube.log if kind == "event"]


def test_the_restore_point_is_copied_kept_as_an_object_then_the_job_goes(
    kube: ExportingKubernetes, services: Services, store: FakeStore
) -> None:
    assert not _run(services), "the copy first"
    target = export_map_name("default", NAME)
    assert [c["target"] for c in store.copies] == [target]
    (listed,) = kube.status["exportedSnapshots"]
    # Durable where the installation's durable storage is configured.
    assert listed["durableLocation"] == f"s3://snapshots/{target}/0"
    assert store.destroyed == []

    assert _run(services)

    (export,) = kube.exports
    assert export["metadata"]["name"] == NAME
    assert "ownerReferences" not in export["metadata"], "it must outlive the job"
    assert export["spec"] == {
        "jobName": "wordcount",
        "origin": "ExportSnapshot",
        "disposeOnDelete": True,
    }
    status = export["status"]
    assert (status["phase"], status["jobUid"], status["snapshotId"]) == ("Completed", "uid-1", 0)
    assert status["durableLocation"] == listed["durableLocation"]
    assert store.destroyed == list(all_snapshot_map_names("uid-1"))
    events = _events(kube)
    assert events[0] == "DeletionPolicyApplied"
    assert events.index("DeletionExportKept") < events.index("SnapshotMapsDeleted")


def test_an_object_the_export_reconcile_made_is_completed_not_made_again(
    kube: ExportingKubernetes, services: Services
) -> None:
    _run(services)
    kube.exports.append(
        {
            "metadata": {"name": NAME, "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"jobName": "wordcount", "origin": "ExportSnapshot", "disposeOnDelete": True},
        }
    )

    assert _run(services)

    assert ("create export", NAME) not in kube.log
    assert kube.exports[0]["status"]["phase"] == "Completed"


def test_a_refused_object_keeps_the_job_and_its_maps(
    kube: ExportingKubernetes, services: Services, store: FakeStore
) -> None:
    _run(services)
    kube.refuse_exports = "exceeded quota"

    with pytest.raises(CreateFailed):
        _run(services)

    assert store.destroyed == []
    kube.refuse_exports = None
    assert _run(services)


def test_an_object_of_that_name_for_another_job_keeps_the_job(
    kube: ExportingKubernetes, services: Services, store: FakeStore
) -> None:
    _run(services)
    kube.exports.append(
        {
            "metadata": {"name": NAME, "uid": "u", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"jobName": "other", "origin": "User"},
        }
    )

    with pytest.raises(ExportNameTaken, match="otherJob=other"):
        _run(services)

    assert store.destroyed == []


def test_a_store_that_fails_every_copy_holds_the_deletion_after_the_bound(
    kube: ExportingKubernetes, services: Services, store: FakeStore, clock: Clock
) -> None:
    settings = services.settings.decision
    store.failures = [
        StoreOperationFailed("StoreUnreachable", "no member answered")
        for _ in range(settings.export_copy_attempts)
    ]
    for attempt in range(1, settings.export_copy_attempts + 1):
        assert not _run(services)
        assert kube.status["exportFailure"]["attempts"] == attempt
        clock.now += timedelta(seconds=settings.export_retry_seconds * 2**attempt)

    assert not _run(services)
    assert not _run(services)

    assert len(store.copies) == settings.export_copy_attempts, "bounded"
    assert store.destroyed == [], "the state is not destroyed"
    assert kube.status["lastFailure"]["reason"] == DELETION_HELD
    assert _events(kube).count("DeletionHeld") == 1, "said once"
    assert "deletionPolicy: Destroy" in kube.status["lastFailure"]["message"]

    # The store is fixed and the spec touched: another round, which succeeds.
    assert kube.job is not None
    kube.job["metadata"]["generation"] = 2
    assert not _run(services)
    assert kube.status["exportedSnapshots"][0]["name"] == NAME
    assert _run(services)
    assert store.destroyed == list(all_snapshot_map_names("uid-1"))
