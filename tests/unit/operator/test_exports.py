"""The pure decision of a job's SnapshotJobExport objects (``reconcile/exports.py``).

Examples check each rule of an export's status (from the job's status), the queue of exports
the job takes, the objects the operator creates (untracked and periodic exports), retention,
what deleting an export does and how the job's spec is given the requested export. A
hypothesis property checks retention's safety over arbitrary exports, policies and in-use
sets: nothing in use, of origin User or not completed is ever retired, and at most one export
is being taken.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapshot_operator.reconcile.exports import (
    CreateExport,
    DeleteExport,
    Disposal,
    EmitExportEvent,
    ExportObject,
    ExportsDecision,
    ExportsObservation,
    PatchExportStatus,
    completed_status,
    decide_deletion,
    decide_exports,
    names_in_use,
    own_names_in_use,
    parse_export,
    periodic_export_name,
    with_requested_export,
)
from snapshotjob_contract import (
    ConditionStatus,
    ExecutionRecordStatus,
    ExecutionStatus,
    ExportedSnapshot,
    ExportFailureStatus,
    ExportRequestStatus,
    Phase,
    SnapshotJobSpec,
    SnapshotJobStatus,
)
from snapshotjob_contract.exports import (
    ExportCondition,
    ExportOrigin,
    ExportPhase,
    ExportReason,
    SnapshotJobExportSpec,
    SnapshotJobExportStatus,
)
from tests.unit.operator.specs import VALID_SPEC

pytestmark = pytest.mark.filterwarnings("error")

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
JOB = "wordcount"
JOB_UID = "6f1c2d3e"
A = TypeVar("A")


def ago(seconds: float) -> datetime:
    """Returns the time that many seconds before NOW."""
    return NOW - timedelta(seconds=seconds)


def job_spec(**changes: Any) -> SnapshotJobSpec:
    """Returns VALID_SPEC with top-level (camelCase) fields changed."""
    return SnapshotJobSpec.model_validate({**VALID_SPEC, **changes})


def job_status(
    phase: Phase = Phase.RUNNING, started_ago: float = 3600, **fields: Any
) -> SnapshotJobStatus:
    """Returns a job status in that phase, its execution started that long ago."""
    execution = ExecutionStatus(
        id="e-1", driver_pod=f"{JOB}-driver", started_at=ago(started_ago), attempt=1, spec_hash="h"
    )
    return SnapshotJobStatus(phase=phase, execution=execution, **fields)


def taken(name: str, age: float = 600, terminal: bool = False) -> ExportedSnapshot:
    """Returns an entry of status.exportedSnapshots that completed that long ago."""
    location = f"s3://snapshots/team/{name}/7"
    fields: dict[str, Any] = {"snapshot_id": 7, "num_bytes": 4096, "durable_location": location}
    return ExportedSnapshot(name=name, created_at=ago(age), terminal=terminal, **fields)


STORED_REASONS = dict(
    zip(
        ExportPhase, ("Queued", "ExportInProgress", "ExportCompleted", "ExportRefused"), strict=True
    )
)
"""A Ready reason per phase (Pending, InProgress, Completed, Failed) as a decision wrote it."""


def stored(phase: ExportPhase, completed_ago: float = 600) -> SnapshotJobExportStatus:
    """Returns an export's status as a previous decision wrote it."""
    done = phase is ExportPhase.COMPLETED
    ready = ConditionStatus.TRUE if done else ConditionStatus.FALSE
    reason = STORED_REASONS[phase]
    condition = ExportCondition(status=ready, reason=reason, last_transition_time=ago(900))
    completed = ago(completed_ago) if done else None
    return SnapshotJobExportStatus(
        phase=phase, conditions=[condition], job_uid=JOB_UID, completed_at=completed
    )


def export(
    name: str,
    origin: ExportOrigin = ExportOrigin.USER,
    created_ago: float = 900,
    status: SnapshotJobExportStatus | None = None,
    deleting: bool = False,
    dispose: bool = False,
) -> ExportObject:
    """Returns an export object of the job."""
    spec = SnapshotJobExportSpec(job_name=JOB, origin=origin, dispose_on_delete=dispose)
    return ExportObject(
        name, f"uid-{name}", ago(created_ago), spec, status or SnapshotJobExportStatus(), deleting
    )


DEFAULT_SPEC = job_spec()


def observe(
    *exports: ExportObject,
    spec: SnapshotJobSpec | None = DEFAULT_SPEC,
    status: SnapshotJobStatus | None = None,
    **fields: Any,
) -> ExportsObservation:
    """Returns an observation of a running job with VALID_SPEC unless told otherwise."""
    return ExportsObservation(
        job_name=JOB,
        job_uid=fields.pop("job_uid", JOB_UID),
        spec=spec,
        status=status if status is not None else job_status(),
        exports=exports,
        now=NOW,
        **fields,
    )


def of(decision: ExportsDecision, kind: type[A]) -> list[A]:
    """Returns the decision's actions of that kind, in order."""
    return [action for action in decision.actions if isinstance(action, kind)]


def state(decision: ExportsDecision, name: str) -> tuple[str, str]:
    """Returns the phase and Ready reason of that export's single status patch."""
    [patch] = [p.status for p in of(decision, PatchExportStatus) if p.name == name]
    return patch["phase"], patch["conditions"][0]["reason"]


def event(decision: ExportsDecision, name: str) -> EmitExportEvent:
    """Returns the single event regarding that export."""
    [only] = [e for e in of(decision, EmitExportEvent) if e.name == name]
    return only


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


RETAINED = (
    export("new", ExportOrigin.PERIODIC, 1000, stored(ExportPhase.COMPLETED, 100)),
    export("newer-mid", ExportOrigin.EXPORT_SNAPSHOT, 1000, stored(ExportPhase.COMPLETED, 200)),
    export("old", ExportOrigin.PERIODIC, 1000, stored(ExportPhase.COMPLETED, 300)),
    export("oldest", ExportOrigin.EXPORT_SNAPSHOT, 1000, stored(ExportPhase.COMPLETED, 400)),
    export("users", ExportOrigin.USER, 5000, stored(ExportPhase.COMPLETED, 5000)),
)


def retired(decision: ExportsDecision) -> list[str]:
    """Returns the names deleted, each checked to come with its ExportRetired Event first."""
    names = [d.name for d in of(decision, DeleteExport)]
    for name in names:
        assert event(decision, name).reason is ExportReason.EXPORT_RETIRED, name
    return names


@pytest.mark.parametrize(
    ("policy", "why"),
    [({"maxCount": 2}, "maxCount=2"), ({"maxAgeSeconds": 250}, "maxAgeSeconds=250 ageSeconds=400")],
    ids=["by-count", "by-age"],
)
def test_retention_deletes_the_oldest_of_the_operators_exports(
    policy: dict[str, int], why: str
) -> None:
    decision = decide_exports(observe(*RETAINED, spec=job_spec(exportPolicy=policy)))

    assert sorted(retired(decision)) == ["old", "oldest"]
    assert {d.uid for d in of(decision, DeleteExport)} == {"uid-old", "uid-oldest"}
    assert why in event(decision, "oldest").message


@pytest.mark.parametrize(
    ("changes", "status", "in_use"),
    [
        ({}, {}, {"oldest": "other-job"}),
        ({"initialSnapshotName": "oldest"}, {}, {}),
        ({"exportSnapshot": {"name": "oldest"}}, {}, {}),
        ({}, {"execution_record": ExecutionRecordStatus(exported_snapshot_name="oldest")}, {}),
    ],
    ids=["other-job", "initial-snapshot", "spec-export", "restore-point"],
)
def test_retention_keeps_exports_in_use(
    changes: dict[str, Any], status: dict[str, Any], in_use: dict[str, str]
) -> None:
    spec = job_spec(exportPolicy={"maxCount": 1}, **changes)

    decision = decide_exports(
        observe(*RETAINED, spec=spec, status=job_status(**status), in_use=in_use)
    )

    assert sorted(retired(decision)) == ["newer-mid", "old"]


def test_own_and_namespace_names_in_use() -> None:
    spec = job_spec(initialSnapshotName="seed", exportSnapshot={"name": "nightly"})
    status = job_status(execution_record=ExecutionRecordStatus(exported_snapshot_name="final"))

    assert own_names_in_use(spec, status) == {"seed", "nightly", "final"}
    assert own_names_in_use(None, SnapshotJobStatus()) == set()
    jobs = [("a", spec, status), ("b", job_spec(initialSnapshotName="seed"), SnapshotJobStatus())]
    assert names_in_use(jobs) == {"seed": "a", "nightly": "a", "final": "a"}


NAMES = ("x0", "x1", "x2", "x3", "x4", "x5")
TAKING = (Phase.RUNNING, Phase.SUSPENDED, Phase.SUSPENDED_EXPORTING_SNAPSHOT)


@st.composite
def export_worlds(draw: st.DrawFn) -> ExportsObservation:
    """Arbitrary exports, job statuses, policies and in-use sets."""
    names = NAMES[: draw(st.integers(0, len(NAMES)))]
    rarely = st.sampled_from((False, False, False, True))
    exports = []
    for name in names:
        created = draw(st.integers(0, 10_000))
        status = stored(draw(st.sampled_from(ExportPhase)), draw(st.integers(0, created)))
        origin = draw(st.sampled_from(ExportOrigin))
        exports.append(export(name, origin, created, status, deleting=draw(rarely)))
    anywhere = st.sampled_from((*names, "elsewhere"))
    maybe_name = st.none() | anywhere
    policy = {
        "maxCount": draw(st.none() | st.integers(1, 4)),
        "maxAgeSeconds": draw(st.none() | st.integers(60, 10_000)),
        "periodicSeconds": draw(st.none() | st.integers(60, 600)),
    }
    changes: dict[str, Any] = {"exportPolicy": {k: v for k, v in policy.items() if v}}
    if draw(rarely):
        changes |= {"processingGuarantee": "NONE", "upgradeMode": "stateless"}
    if (initial := draw(maybe_name)) is not None:
        changes["initialSnapshotName"] = initial
    if (own := draw(maybe_name)) is not None:
        changes["exportSnapshot"] = {"name": own}
    request, failed, restore_point = draw(maybe_name), draw(maybe_name), draw(maybe_name)
    snapshot = draw(st.sampled_from((-1, 5)))
    job = job_status(
        draw(st.sampled_from(TAKING) | st.sampled_from(Phase)),
        started_ago=draw(st.integers(0, 10_000)),
        exported_snapshots=[taken(n, draw(st.integers(0, 9_999))) for n in draw(st.sets(anywhere))],
        export_request=request and {"name": request, "request_id": "r", "requested_at": NOW},
        export_failure=failed
        and {"name": failed, "attempts": draw(st.integers(1, 4)), "message": "", "time": NOW},
        execution_record={
            "snapshot_id": snapshot,
            "ongoing_snapshot_id": snapshot,
            "exported_snapshot_name": restore_point,
        },
    )
    return observe(
        *exports,
        spec=None if draw(rarely) else job_spec(**changes),
        status=job,
        job_uid=None if draw(rarely) else JOB_UID,
        in_use={name: "other-job" for name in draw(st.sets(anywhere, max_size=2))},
    )


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(export_worlds())
def test_retention_never_retires_what_it_must_keep(observation: ExportsObservation) -> None:
    decision = decide_exports(observation)

    objects = {e.name: e for e in observation.exports}
    final = {e.name: e.status.phase for e in observation.exports}
    for patch in of(decision, PatchExportStatus):
        final[patch.name] = ExportPhase(patch.status["phase"])
    kept = set(observation.in_use) | own_names_in_use(observation.spec, observation.status)
    for delete in of(decision, DeleteExport):
        assert delete.name not in kept
        assert objects[delete.name].spec.origin is not ExportOrigin.USER
        assert final[delete.name] is ExportPhase.COMPLETED
        assert delete.uid == objects[delete.name].uid
        assert not objects[delete.name].deleting
    assert sum(phase is ExportPhase.IN_PROGRESS for phase in final.values()) <= 1
    if decision.requested is not None:
        assert final[decision.requested] in {ExportPhase.PENDING, ExportPhase.IN_PROGRESS}
        requested = objects[decision.requested]
        # An export being deleted is only finished, never started.
        assert not requested.deleting or requested.status.phase is ExportPhase.IN_PROGRESS


@pytest.mark.parametrize(
    ("dispose", "in_use", "phase", "wait", "disposes"),
    [
        (False, {"nightly": "wordcount"}, ExportPhase.IN_PROGRESS, "", False),
        (True, {"nightly": "analytics"}, ExportPhase.COMPLETED, "job=analytics names it", False),
        (True, {}, ExportPhase.IN_PROGRESS, "it is being taken", False),
        (True, {"other": "analytics"}, ExportPhase.COMPLETED, "", True),
    ],
    ids=["keeps-data", "in-use", "being-taken", "disposes"],
)
def test_what_deleting_an_export_does(
    dispose: bool, in_use: dict[str, str], phase: ExportPhase, wait: str, disposes: bool
) -> None:
    disposal = decide_deletion(export("nightly", status=stored(phase), dispose=dispose), in_use)

    assert disposal.dispose is disposes and (disposal.wait is None) == (wait == "")
    assert wait in (disposal.wait or "")


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
