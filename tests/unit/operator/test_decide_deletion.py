"""Deleting a SnapshotJob (deletion.py): stop the driver, then clean up, then let the job go.

Over arbitrary observations of a job being deleted: nothing starts and the status is not
written, every driver Pod that may run is deleted without a snapshot, and neither the snapshot
maps nor their durable copies are deleted, nor the finalizer removed, while one may still run.
A driver on a lost node during deletion is in ``test_decide_lost_nodes.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given

from snapshot_operator.reconcile import (
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    Observation,
    PatchStatus,
    RemoveFinalizer,
    decide,
)
from snapshotjob_contract import SnapshotJobSpec, all_snapshot_map_names
from snapshotjob_contract.record import durable_copy_map_name
from tests.unit.operator.decide_helpers import creates, many, of_type
from tests.unit.operator.world import JOB, observations

pytestmark = pytest.mark.filterwarnings("error")


@many
@given(observations())
def test_deletion_cancels_forcefully_then_cleans_up(observation: Observation) -> None:
    deleting = replace(observation, deleting=True)

    actions = decide(deleting)

    assert creates(actions) == []
    assert of_type(actions, PatchStatus) == []
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
