"""Deleting a SnapshotJob (deletion.py): stop the driver, keep or destroy its state, let it go.

Over arbitrary observations of a job being deleted, under either ``deletionPolicy``: nothing
starts, and neither the snapshot maps nor their durable copies are deleted, nor the finalizer
removed, while a driver may still run. With ``Destroy`` the status is not written and every
driver that may run is deleted without a snapshot. With ``Export`` the job's state is never
destroyed without being kept: the finalizer goes only with the deletion's export kept first,
or when there is no snapshot to keep. The steps of each policy, one example each, are in
``test_decide_deletion_policy.py``; a driver on a lost node during deletion is in
``test_decide_lost_nodes.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given

from snapshot_operator.reconcile import (
    CopySnapshotToExport,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    Observation,
    PatchStatus,
    RemoveFinalizer,
    RequestExport,
    RequestTermination,
    decide,
)
from snapshot_operator.reconcile.actions import KeepExport
from snapshot_operator.reconcile.deletion import deletion_export_name
from snapshotjob_contract import (
    NO_SNAPSHOT,
    DeletionPolicy,
    SnapshotJobSpec,
    TerminationMode,
    all_snapshot_map_names,
    export_map_name,
)
from snapshotjob_contract.record import JobIdentity, durable_copy_map_name
from tests.unit.operator.decide_helpers import creates, many, of_type
from tests.unit.operator.world import JOB, observations, specs, status_after

pytestmark = pytest.mark.filterwarnings("error")

DESTROY = specs().map(
    lambda spec: spec.model_copy(update={"deletion_policy": DeletionPolicy.DESTROY})
)
EXPORT = specs().map(
    lambda spec: spec.model_copy(update={"deletion_policy": DeletionPolicy.EXPORT})
)


@many
@given(DESTROY.flatmap(observations))
def test_destroy_cancels_forcefully_then_cleans_up(observation: Observation) -> None:
    deleting = replace(observation, deleting=True)
    assert isinstance(observation.spec, SnapshotJobSpec)
    assert observation.spec.deletion_policy is DeletionPolicy.DESTROY

    actions = decide(deleting)

    assert creates(actions) == []
    assert of_type(actions, PatchStatus) == []
    assert of_type(actions, KeepExport) == []
    assert of_type(actions, CopySnapshotToExport) == []
    may_run = [pod for pod in observation.pods if pod.may_run]
    deleted = {action.pod_name for action in of_type(actions, DeleteDriverPod)}
    assert {pod.name for pod in may_run if not pod.deleting} <= deleted
    if may_run:
        assert of_type(actions, RemoveFinalizer) == []
        assert of_type(actions, DeleteDurableCopies) == [], "a driver may still copy"
    else:
        maps = of_type(actions, DeleteSnapshotMaps)
        assert maps == [DeleteSnapshotMaps(all_snapshot_map_names(JOB.uid))]
        spec = observation.spec
        storage = spec.durable_storage if isinstance(spec, SnapshotJobSpec) else None
        copies = of_type(actions, DeleteDurableCopies)
        assert copies == [DeleteDurableCopies(durable_copy_map_name(JOB.uid), storage)]
        assert actions.index(copies[0]) < actions.index(RemoveFinalizer())
        assert actions[-1] == RemoveFinalizer()


@many
@given(EXPORT.flatmap(observations))
def test_export_never_destroys_state_it_did_not_keep(observation: Observation) -> None:
    deleting = replace(observation, deleting=True)
    name = deletion_export_name(JOB)

    actions = decide(deleting)

    assert creates(actions) == []
    assert of_type(actions, RequestExport) == []
    for request in of_type(actions, RequestTermination):
        assert (request.mode, request.export_name) == (TerminationMode.CANCEL_GRACEFUL, name)
    may_run = [pod for pod in observation.pods if pod.may_run]
    record = observation.status.record()
    for copy in of_type(actions, CopySnapshotToExport):
        assert not may_run, "copied while a driver may move the restore point"
        identity = JobIdentity(uid=JOB.uid, namespace=JOB.namespace, backup_count=1)
        assert copy == CopySnapshotToExport(
            record.successful_snapshot_map_name(identity) or "",
            record.snapshot_id,
            name,
            export_map_name(JOB.namespace, name),
        )
    maps = of_type(actions, DeleteSnapshotMaps)
    removed = of_type(actions, RemoveFinalizer)
    assert bool(maps) == bool(removed), "the maps go with the finalizer, and only then"
    if may_run:
        assert removed == []
        assert of_type(actions, DeleteDurableCopies) == [], "a driver may still copy"
    if not removed:
        return
    assert actions[-1] == RemoveFinalizer()
    kept = of_type(actions, KeepExport)
    if kept:
        (keep,) = kept
        assert keep.exported == observation.status.exported(name)
        assert actions.index(keep) < actions.index(maps[0]), "kept before anything goes"
    else:
        # Nothing kept: there was nothing to keep, and nothing to ask a driver for.
        assert record.snapshot_id == NO_SNAPSHOT
        assert observation.status.exported(name) is None
    # The patch, if any, is a valid status (a deletion writes only what it needs).
    status_after(observation.status, actions)
