"""Retention and deletion of a job's exports (``reconcile/export_retention.py``).

Examples check which exports ``spec.exportPolicy`` retires and what deleting one does; a
hypothesis property checks retention's safety over arbitrary exports, policies and in-use
sets: nothing in use, of origin User, not completed or being deleted is ever retired, and at
most one export is being taken. It was checked to fail on five broken variants of the
retention (in-use names ignored, User exports or unfinished ones retired).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snapshot_operator.reconcile.exports import (
    DeleteExport,
    ExportsDecision,
    ExportsObservation,
    PatchExportStatus,
    decide_deletion,
    decide_exports,
    names_in_use,
    own_names_in_use,
)
from snapshotjob_contract import (
    ExecutionRecordStatus,
    Phase,
    SnapshotJobStatus,
)
from snapshotjob_contract.exports import (
    ExportOrigin,
    ExportPhase,
    ExportReason,
)
from tests.unit.operator.export_worlds import (
    JOB_UID,
    NOW,
    event,
    export,
    job_spec,
    job_status,
    observe,
    of,
    stored,
    taken,
)

pytestmark = pytest.mark.filterwarnings("error")


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
