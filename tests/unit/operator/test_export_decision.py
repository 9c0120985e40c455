"""The pure decision of a job's SnapshotJobExport objects (``reconcile/exports.py``).

Examples check each rule of an export's status (from the job's status), the queue of exports
the job takes, the objects the operator creates (untracked and periodic exports) and how the
job's spec is given the requested export. Retention and deletion are in
``test_export_retention.py``.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any

import pytest

from snapshot_operator.reconcile.exports import (
    CreateExport,
    Disposal,
    EmitExportEvent,
    PatchExportStatus,
    completed_status,
    decide_deletion,
    decide_exports,
    parse_export,
    periodic_export_name,
    with_requested_export,
)
from snapshotjob_contract import (
    ExecutionRecordStatus,
    ExportFailureStatus,
    ExportRequestStatus,
    Phase,
)
from snapshotjob_contract.exports import (
    ExportOrigin,
    ExportPhase,
    ExportReason,
    SnapshotJobExportSpec,
    SnapshotJobExportStatus,
)
from tests.unit.operator.export_worlds import (
    JOB,
    JOB_UID,
    NOW,
    ago,
    event,
    export,
    job_spec,
    job_status,
    observe,
    of,
    state,
    taken,
)
from tests.unit.operator.specs import VALID_SPEC

pytestmark = pytest.mark.filterwarnings("error")


def test_an_exported_snapshot_completes_its_object_once() -> None:
    entry = taken("nightly", terminal=True)
    observation = observe(export("nightly"), status=job_status(exported_snapshots=[entry]))

    decision = decide_exports(observation)

    [patch] = of(decision, PatchExportStatus)
    status = patch.status
    assert (status["phase"], status["jobUid"]) == ("Completed", JOB_UID)
    assert (status["snapshotId"], status["numBytes"], status["terminal"]) == (7, 4096, True)
    assert status["durableLocation"] == "s3://snapshots/team/nightly/7"
    assert datetime.fromisoformat(status["completedAt"]) == entry.created_at
    [ready] = status["conditions"]
    assert (ready["type"], ready["status"], ready["reason"]) == ("Ready", "True", "ExportCompleted")
    completed = event(decision, "nightly")
    assert completed.reason is ExportReason.EXPORT_COMPLETED and not completed.warning
    assert decision.requested is None and not of(decision, CreateExport)
    patched = export("nightly", status=SnapshotJobExportStatus.model_validate(status))
    assert decide_exports(replace(observation, exports=(patched,))).actions == ()


def test_an_export_of_a_missing_job_waits_with_a_warning() -> None:
    decision = decide_exports(observe(export("nightly"), job_uid=None, spec=None))

    assert state(decision, "nightly") == ("Pending", "JobNotFound")
    assert event(decision, "nightly").reason is ExportReason.JOB_NOT_FOUND
    assert event(decision, "nightly").warning and decision.requested is None


@pytest.mark.parametrize(
    ("created", "expected"),
    [({"late": 100, "early": 200}, "early"), ({"b": 100, "a": 100}, "a")],
    ids=["oldest-first", "then-by-name"],
)
def test_the_queue_requests_the_oldest_pending_export(
    created: dict[str, float], expected: str
) -> None:
    exports = [export(name, created_ago=age) for name, age in created.items()]

    decision = decide_exports(observe(*exports))

    assert decision.requested == expected
    assert {state(decision, name) for name in created} == {("Pending", "Queued")}
    assert of(decision, EmitExportEvent) == []  # Queued is no Event.


def test_the_export_the_job_takes_is_requested_and_in_progress() -> None:
    request = ExportRequestStatus(name="second", request_id="r-1", requested_at=ago(5))
    exports = (export("first", created_ago=200), export("second", created_ago=100))

    decision = decide_exports(observe(*exports, status=job_status(export_request=request)))

    assert decision.requested == "second"
    assert state(decision, "second") == ("InProgress", "ExportInProgress")
    assert state(decision, "first") == ("Pending", "Queued")
    assert not event(decision, "second").warning


def test_the_specs_own_export_goes_first() -> None:
    spec = job_spec(exportSnapshot={"name": "from-spec"})

    decision = decide_exports(observe(export("nightly"), spec=spec))

    assert decision.requested is None
    assert state(decision, "nightly") == ("Pending", "Queued")


def test_an_export_of_a_job_taking_no_snapshots_is_refused() -> None:
    spec = job_spec(processingGuarantee="NONE", upgradeMode="stateless")

    decision = decide_exports(observe(export("nightly"), spec=spec))

    assert state(decision, "nightly") == ("Failed", "ExportRefused")
    refused = event(decision, "nightly")
    assert refused.reason is ExportReason.EXPORT_REFUSED and refused.warning
    assert "processingGuarantee NONE" in refused.message
    assert decision.requested is None


@pytest.mark.parametrize(
    ("attempts", "phase", "expected"),
    [
        (3, Phase.SUSPENDED, ("Failed", "ExportCopyFailed")),
        (4, Phase.SUSPENDED_EXPORTING_SNAPSHOT, ("Failed", "ExportCopyFailed")),
        (2, Phase.SUSPENDED, ("Pending", "Queued")),
        (2, Phase.SUSPENDED_EXPORTING_SNAPSHOT, ("InProgress", "ExportInProgress")),
    ],
)
def test_an_export_fails_once_its_copy_failed_copy_attempts_times(
    attempts: int, phase: Phase, expected: tuple[str, str]
) -> None:
    failure = ExportFailureStatus(name="nightly", attempts=attempts, message="boom", time=ago(1))
    record = ExecutionRecordStatus(snapshot_id=4, data_map_index=0, ongoing_snapshot_id=4)
    status = job_status(phase, export_failure=failure, execution_record=record)

    decision = decide_exports(observe(export("nightly"), status=status, copy_attempts=3))

    assert state(decision, "nightly") == expected
    failed = expected[0] == "Failed"
    assert decision.requested == (None if failed else "nightly")
    if expected[0] != "Pending":
        assert event(decision, "nightly").warning is failed


def test_an_export_being_deleted_while_taken_completes_and_its_deletion_goes_on() -> None:
    in_progress = SnapshotJobExportStatus(phase=ExportPhase.IN_PROGRESS)
    deleted = export("nightly", status=in_progress, deleting=True, dispose=True)
    assert decide_deletion(deleted, {}).wait is not None, "waits while it is being taken"
    request = ExportRequestStatus(name="nightly", request_id="r-1", requested_at=ago(5))

    still_taken = decide_exports(observe(deleted, status=job_status(export_request=request)))
    assert still_taken.requested == "nightly", "the job finishes what it started"

    done = decide_exports(
        observe(deleted, status=job_status(exported_snapshots=[taken("nightly")]))
    )
    assert state(done, "nightly") == ("Completed", "ExportCompleted")
    completed = export(
        "nightly",
        status=SnapshotJobExportStatus.model_validate(of(done, PatchExportStatus)[0].status),
        deleting=True,
        dispose=True,
    )
    assert decide_deletion(completed, {}) == Disposal(wait=None, dispose=True)


def test_a_pending_export_being_deleted_is_not_started() -> None:
    decision = decide_exports(observe(export("nightly", deleting=True, dispose=True)))
    assert decision.requested is None


def test_an_export_of_a_suspended_job_without_a_snapshot_is_refused() -> None:
    decision = decide_exports(observe(export("nightly"), status=job_status(Phase.SUSPENDED)))

    assert state(decision, "nightly") == ("Failed", "ExportRefused")
    assert "the job has no snapshot" in event(decision, "nightly").message
    assert decision.requested is None


def test_exports_queued_behind_the_specs_own_export_say_so() -> None:
    spec = job_spec(exportSnapshot={"name": "from-spec"})

    decision = decide_exports(observe(export("nightly"), spec=spec))

    assert decision.requested is None
    [patch] = of(decision, PatchExportStatus)
    assert "spec.exportSnapshot.name=from-spec" in patch.status["conditions"][0]["message"]


@pytest.mark.parametrize("phase", [Phase.FAILED, Phase.STARTING, Phase.COMPLETED])
def test_an_export_waits_while_the_job_neither_runs_nor_is_suspended(phase: Phase) -> None:
    decision = decide_exports(observe(export("nightly"), status=job_status(phase)))

    assert state(decision, "nightly") == ("Pending", "WaitingForJob")
    assert not event(decision, "nightly").warning
    assert decision.requested is None, "nothing is handed to a job that cannot take it"


@pytest.mark.parametrize("dispose", [True, False])
def test_an_untracked_export_gets_a_completed_object(dispose: bool) -> None:
    spec = job_spec(exportPolicy={"disposeOnDelete": dispose})
    status = job_status(exported_snapshots=[taken("tracked"), taken("from-spec")])

    decision = decide_exports(observe(export("tracked"), spec=spec, status=status))

    [create] = of(decision, CreateExport)
    assert create.name == "from-spec"
    assert create.spec == SnapshotJobExportSpec(
        job_name=JOB, origin=ExportOrigin.EXPORT_SNAPSHOT, dispose_on_delete=dispose
    )
    assert create.status.phase is ExportPhase.COMPLETED and create.status.snapshot_id == 7
    assert create.status == completed_status(taken("from-spec"), JOB, JOB_UID, NOW)
    others = observe(status=status, other_export_names=frozenset({"from-spec", "tracked"}))
    assert of(decide_exports(others), CreateExport) == []


def test_a_due_periodic_export_is_created() -> None:
    spec = job_spec(exportPolicy={"periodicSeconds": 60, "disposeOnDelete": False})

    decision = decide_exports(observe(spec=spec, status=job_status(started_ago=61)))

    [create] = of(decision, CreateExport)
    assert create.name == periodic_export_name(JOB, NOW) == f"{JOB}-{int(NOW.timestamp())}"
    assert create.spec.origin is ExportOrigin.PERIODIC and not create.spec.dispose_on_delete
    assert create.status.phase is ExportPhase.PENDING and decision.due_in_seconds == 60


def test_no_periodic_export_before_it_is_due_nor_while_the_previous_one_is_pending() -> None:
    spec = job_spec(exportPolicy={"periodicSeconds": 60})
    previous = export("wordcount-1", ExportOrigin.PERIODIC, created_ago=600)

    early = decide_exports(observe(spec=spec, status=job_status(started_ago=30)))
    pending = decide_exports(observe(previous, spec=spec, status=job_status(started_ago=900)))

    assert of(early, CreateExport) == [] and early.due_in_seconds == pytest.approx(30)
    assert of(pending, CreateExport) == [] and pending.due_in_seconds is None


def test_periodic_export_names_are_dns_labels() -> None:
    name = periodic_export_name("Team.Word_Count-" + "x" * 80, NOW)

    assert name == "team-word-count-" + "x" * 36 + f"-{int(NOW.timestamp())}"
    assert len(name) <= 63


RAW_SPEC: dict[str, Any] = {**VALID_SPEC, "suspend": False}


@pytest.mark.parametrize(
    ("own", "exported", "expected"),
    [
        (None, [], "queued"),
        ({"name": "mine", "cancelJob": True}, [{"name": "mine"}], "queued"),
        ({"cancelJob": False}, [], "queued"),
        ({"name": "mine"}, [], "mine"),
        ({"name": "mine"}, [{"name": "someone-elses"}], "mine"),
    ],
    ids=["no-own", "own-taken", "own-unnamed", "own-pending", "own-pending-others-taken"],
)
def test_the_job_is_asked_for_the_requested_export(
    own: dict[str, Any] | None, exported: list[dict[str, Any]], expected: str
) -> None:
    raw = RAW_SPEC if own is None else {**RAW_SPEC, "exportSnapshot": own}

    spec = with_requested_export(raw, {"exportedSnapshots": exported}, "queued")

    assert spec["exportSnapshot"]["name"] == expected
    assert {k: v for k, v in spec.items() if k != "exportSnapshot"} == RAW_SPEC
    if expected == "queued":
        assert spec["exportSnapshot"] == {"name": "queued"}  # cancelJob is not carried over.
    assert with_requested_export(raw, {}, None) is raw
    assert with_requested_export(None, {}, "queued") is None


def test_parse_export_reads_objects_and_skips_others() -> None:
    raw = {
        "metadata": {
            "name": "nightly",
            "uid": "u-1",
            "creationTimestamp": "2026-11-21T11:00:00Z",
            "deletionTimestamp": "2026-11-21T11:30:00Z",
        },
        "spec": {"jobName": JOB, "origin": "Periodic", "disposeOnDelete": True},
        "status": {"phase": "InProgress"},
    }

    parsed = parse_export(raw)

    assert parsed is not None and parsed.deleting and parsed.created_at == ago(3600)
    assert (parsed.name, parsed.uid) == ("nightly", "u-1")
    assert parsed.spec.origin is ExportOrigin.PERIODIC
    assert parsed.status.phase is ExportPhase.IN_PROGRESS
    assert parse_export({**raw, "spec": {"origin": "Periodic"}}) is None
    assert parse_export({**raw, "metadata": {"name": "nightly"}}) is None
