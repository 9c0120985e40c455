"""A deleted job's periodic durable copies: deleted where the operator has the credentials,
named in a Warning where not, and never a reason to hold the job's deletion.

The object storage is :class:`tests.unit.operator.fake_gateways.FakeDurable` (copies by prefix
and map in memory); the real S3 gateway's deletion is tested against a real S3 server in
``tests/integration/test_exports.py``.
"""

from __future__ import annotations

from typing import Any

import pytest

from snapshot_operator.executing import Services, reconcile_once
from snapshot_operator.gateways import StoreOperationFailed
from snapshot_operator.job_copies import delete_job_copies
from snapshot_operator.reconcile import (
    DeleteDurableCopies,
    EventReason,
    Observation,
    decide,
)
from snapshot_operator.settings import OperatorSettings
from snapshotjob_contract import DurableStorageSpec, SnapshotJobStatus
from snapshotjob_contract.record import durable_copy_map_name
from tests.unit.operator.decide_helpers import HEALTHY, spec_of
from tests.unit.operator.fake_gateways import FakeDurable, FakeKubernetes, FakeStore
from tests.unit.operator.specs import VALID_SPEC
from tests.unit.operator.world import JOB, NOW

MAP = durable_copy_map_name("uid-1")
INSTALLATION = DurableStorageSpec(bucket="snapshots", credentials_secret="snapshots-s3")
COPYING = INSTALLATION.model_copy(update={"snapshot_copy_interval_seconds": 60})
OWN_PREFIX = COPYING.model_copy(update={"prefix": "team-a"})
OTHER_BUCKET = DurableStorageSpec(
    bucket="team-a", credentials_secret="team-a-s3", snapshot_copy_interval_seconds=60
)
OTHER_ENDPOINT = COPYING.model_copy(update={"endpoint": "http://minio.team-a:9000"})


def test_the_installations_copies_are_deleted_and_reported() -> None:
    durable = FakeDurable(INSTALLATION)
    durable.job_copies[("", MAP)] = [7, 6]

    event = delete_job_copies(durable, COPYING, DeleteDurableCopies(MAP, None))

    assert event is not None and event.reason is EventReason.DURABLE_COPIES_DELETED
    assert event.event_type.value == "Normal"
    assert event.message == (
        f"Deleted the job's periodic durable copies location=s3://snapshots/{MAP}/ "
        "snapshotIds=6,7, exports' copies are kept"
    )
    assert durable.job_copies == {}


def test_a_jobs_own_prefix_in_the_installations_bucket_is_emptied() -> None:
    durable = FakeDurable(INSTALLATION)
    durable.job_copies[("team-a", MAP)] = [3]
    durable.job_copies[("", MAP)] = [9]

    event = delete_job_copies(durable, INSTALLATION, DeleteDurableCopies(MAP, OWN_PREFIX))

    assert event is not None and f"location=s3://snapshots/team-a/{MAP}/" in event.message
    assert durable.job_copies == {("", MAP): [9]}, "only the job's own prefix"


@pytest.mark.parametrize("storage", [OTHER_BUCKET, OTHER_ENDPOINT], ids=["bucket", "endpoint"])
def test_copies_the_operator_cannot_reach_are_named_in_a_warning(
    storage: DurableStorageSpec,
) -> None:
    durable = FakeDurable(INSTALLATION)

    event = delete_job_copies(durable, INSTALLATION, DeleteDurableCopies(MAP, storage))

    assert event is not None and event.reason is EventReason.DURABLE_COPIES_KEPT
    assert event.event_type.value == "Warning"
    assert f"location=s3://{storage.bucket}/{MAP}/ reason=NotOperatorBucket" in event.message
    assert "delete them with the bucket's own credentials" in event.message


def test_a_failed_deletion_is_named_in_a_warning() -> None:
    durable = FakeDurable(INSTALLATION)
    durable.job_copies[("", MAP)] = [4]
    durable.discard_failures = [StoreOperationFailed("SnapshotStoreError", "DELETE refused")]

    event = delete_job_copies(durable, COPYING, DeleteDurableCopies(MAP, None))

    assert event is not None and event.reason is EventReason.DURABLE_COPIES_KEPT
    assert "reason=SnapshotStoreError: DELETE refused" in event.message


def test_an_operator_without_durable_storage_names_a_copying_jobs_copies() -> None:
    event = delete_job_copies(None, None, DeleteDurableCopies(MAP, OTHER_BUCKET))

    assert event is not None and event.reason is EventReason.DURABLE_COPIES_KEPT
    assert "reason=NoCredentials" in event.message


@pytest.mark.parametrize(
    ("durable", "installation", "storage"),
    [
        (None, None, None),
        (FakeDurable(INSTALLATION), INSTALLATION, None),
        (
            FakeDurable(INSTALLATION),
            INSTALLATION,
            OTHER_BUCKET.model_copy(update={"snapshot_copy_interval_seconds": None}),
        ),
        (None, None, INSTALLATION),
    ],
    ids=["no-storage", "nothing-copied", "other-bucket-never-copied", "no-credentials-no-copies"],
)
def test_nothing_to_say_when_there_is_nothing_to_delete(
    durable: FakeDurable | None,
    installation: DurableStorageSpec | None,
    storage: DurableStorageSpec | None,
) -> None:
    assert delete_job_copies(durable, installation, DeleteDurableCopies(MAP, storage)) is None


def test_the_decision_names_the_jobs_own_storage() -> None:
    spec = spec_of().model_copy(update={"durable_storage": OTHER_BUCKET})
    observation = Observation(JOB, 1, spec, SnapshotJobStatus(), NOW, (), HEALTHY, deleting=True)

    (action,) = [a for a in decide(observation) if isinstance(a, DeleteDurableCopies)]

    assert action == DeleteDurableCopies(durable_copy_map_name(JOB.uid), OTHER_BUCKET)


def _services(durable: FakeDurable | None) -> tuple[Services, FakeKubernetes]:
    kube = FakeKubernetes(VALID_SPEC)
    settings = OperatorSettings(
        namespaces=("default",),
        store_members=("hz-0:5701",),
        store_cluster_name="store",
        durable_storage=COPYING,
    )
    return Services(kube=kube, store=FakeStore(), settings=settings, durable=durable), kube


def _delete(services: Services, kube: FakeKubernetes) -> Any:
    assert kube.job is not None
    kube.job["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    return reconcile_once(services, "default", "wordcount")


def test_a_deleted_jobs_copies_go_before_its_finalizer() -> None:
    durable = FakeDurable(INSTALLATION)
    durable.job_copies[("", MAP)] = [2]
    services, kube = _services(durable)

    outcome = _delete(services, kube)

    assert outcome.finalizer_removable
    assert durable.job_copies == {}
    reasons = [detail for kind, detail in kube.log if kind == "event"]
    # The job never took a snapshot: its deletionPolicy (Export) has nothing to keep.
    assert reasons == ["DurableCopiesDeleted", "DeletionPolicyApplied", "SnapshotMapsDeleted"]


def test_copies_that_could_not_be_deleted_do_not_hold_the_jobs_deletion() -> None:
    durable = FakeDurable(INSTALLATION)
    durable.job_copies[("", MAP)] = [2]
    durable.discard_failures = [StoreOperationFailed("SnapshotStoreError", "unreachable")]
    services, kube = _services(durable)

    outcome = _delete(services, kube)

    assert outcome.finalizer_removable
    reasons = [detail for kind, detail in kube.log if kind == "event"]
    # The job never took a snapshot: its deletionPolicy (Export) has nothing to keep.
    assert reasons == ["DurableCopiesKept", "DeletionPolicyApplied", "SnapshotMapsDeleted"]
