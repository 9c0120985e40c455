"""Which of a decision's status writes share one merge patch (``status_writes``)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from snapshot_operator.reconcile import PatchStatus, RequestTermination, Requeue
from snapshot_operator.reconcile.actions import RequestExport, status_writes
from snapshotjob_contract.modes import TerminationMode

pytestmark = pytest.mark.unit

NOW = datetime(2026, 11, 25, tzinfo=UTC)
SUSPEND = RequestTermination(TerminationMode.SUSPEND_GRACEFUL, "exec-1/SUSPEND", None, "Suspend")


def test_writes_of_different_fields_share_one_patch() -> None:
    phase = PatchStatus({"phase": "COMPLETING", "observedGeneration": 2})
    export = RequestExport("nightly", "exec-1/EXPORT")
    writes = status_writes((phase, SUSPEND, export, Requeue(5)), 0, NOW)
    assert [action for action, _ in writes] == [phase, SUSPEND, export]
    assert writes[1][1] == SUSPEND.status_patch(NOW)
    assert writes[2][1] == export.status_patch(NOW)


def test_a_run_ends_at_an_action_that_is_no_status_write() -> None:
    first, second = PatchStatus({"phase": "STARTING"}), PatchStatus({"message": "x"})
    actions = (first, Requeue(1), second)
    assert [action for action, _ in status_writes(actions, 0, NOW)] == [first]
    assert status_writes(actions, 1, NOW) == []
    assert [action for action, _ in status_writes(actions, 2, NOW)] == [second]


def test_a_run_ends_before_a_field_it_already_writes() -> None:
    # Two merge patches of one field do not compose into one: the second starts a new run.
    first = PatchStatus({"phase": "STARTING", "conditions": []})
    second = PatchStatus({"conditions": [{"type": "Ready"}]})
    actions = (first, SUSPEND, second)
    assert [action for action, _ in status_writes(actions, 0, NOW)] == [first, SUSPEND]
    assert [action for action, _ in status_writes(actions, 2, NOW)] == [second]
