"""``spec.deletionPolicy``, step by step: what a deletion decides under ``Export`` and ``Destroy``.

``Export`` (the default) keeps the job's state as the export ``<job>-deleted-<uid prefix>``:
a running pipeline is asked for a terminal export; a job not running has its restore point
copied; a job without a snapshot has nothing to keep; a copy that keeps failing holds the
deletion (bounded attempts, a Warning, ``lastFailure``) until the spec changes. ``Destroy``
does what the operator did before the policy existed. The properties over arbitrary
observations are in ``test_decide_deletion.py``; the executor's side (the export object kept)
in ``test_deletion_executing.py``.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from snapshot_operator.reconcile import (
    Action,
    CopySnapshotToExport,
    DeleteDriverPod,
    DeleteSnapshotMaps,
    EmitEvent,
    EventReason,
    EventType,
    InvalidSpec,
    JobRef,
    Observation,
    PatchStatus,
    PodPhase,
    RemoveFinalizer,
    RequestTermination,
    Requeue,
    decide,
)
from snapshot_operator.reconcile.actions import KeepExport
from snapshot_operator.reconcile.deletion import DELETION_HELD, JOB_DELETED, deletion_export_name
from snapshotjob_contract import (
    ExecutionRecord,
    ExportedSnapshot,
    ExportFailureStatus,
    Phase,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
    TerminationMode,
    TerminationStatus,
    all_snapshot_map_names,
    export_map_name,
)
from snapshotjob_contract.exports import EXPORT_NAME_RULE
from snapshotjob_contract.record import JobIdentity
from tests.unit.operator.decide_helpers import (
    SETTINGS,
    a_snapshot,
    graceful,
    of_type,
    reasons,
    running_job,
    spec_of,
    suspended_job,
)
from tests.unit.operator.world import JOB, NOW, ago, status_after

pytestmark = pytest.mark.filterwarnings("error")

NAME = deletion_export_name(JOB)
EXPORT_MAP = export_map_name(JOB.namespace, NAME)
MAPS = DeleteSnapshotMaps(all_snapshot_map_names(JOB.uid))
SPEC = spec_of()


def _deleting(observation: Observation, **changes: object) -> Observation:
    return replace(observation, deleting=True, **changes)  # type: ignore[arg-type]


def _messages(actions: tuple[Action, ...], reason: EventReason) -> list[str]:
    return [a.message for a in of_type(actions, EmitEvent) if a.reason is reason]


def _restore_point(record: ExecutionRecord) -> str:
    identity = JobIdentity(uid=JOB.uid, namespace=JOB.namespace, backup_count=1)
    source = record.successful_snapshot_map_name(identity)
    assert source is not None
    return source


def _listing(status: SnapshotJobStatus, exported: ExportedSnapshot) -> SnapshotJobStatus:
    return status.model_copy(update={"exported_snapshots": [exported]})


def _requeue(actions: tuple[Action, ...]) -> float:
    (requeue,) = of_type(actions, Requeue)
    return requeue.after_seconds


def test_the_export_is_named_after_the_job_and_its_uid_as_a_dns_label() -> None:
    assert NAME == "wordcount-deleted-6f1c2d3e"
    for name in ("a." * 31 + "b", "x" * 63, "Upper.Case-", "-"):
        uid = "0123ABCD-4567-89ab-cdef-0123456789ab"
        kept = deletion_export_name(JobRef("default", name, uid))
        assert len(kept) <= 63 and EXPORT_NAME_RULE.holds(kept), kept
        assert kept.endswith("-deleted-0123abcd")


# --- Export: a running job ----------------------------------------------------------------


def test_a_running_job_asks_its_driver_for_a_terminal_export_then_keeps_it() -> None:
    spec = spec_of({"exportPolicy": {"disposeOnDelete": False}})
    observation = _deleting(running_job(spec, record=a_snapshot()))
    execution = observation.status.execution
    assert execution is not None

    actions = decide(observation)

    assert of_type(actions, RequestTermination) == [
        RequestTermination(
            TerminationMode.CANCEL_GRACEFUL,
            f"{execution.id}/CANCEL_GRACEFUL",
            NAME,
            JOB_DELETED,
        )
    ]
    status = status_after(observation.status, actions)
    assert status.phase is Phase.COMPLETING
    assert of_type(actions, DeleteDriverPod) == [], "the driver takes the export"
    assert of_type(actions, RemoveFinalizer) == [] and MAPS not in actions
    (applied,) = _messages(actions, EventReason.DELETION_POLICY_APPLIED)
    assert f"deletionPolicy=Export exportName={NAME}" in applied
    # kopf's deletion handler is not woken by the driver's writes: it looks again soon.
    assert _requeue(actions) <= SETTINGS.store_retry_seconds

    # Asked: nothing more is asked while the driver serves it.
    pending = decide(replace(observation, status=status))
    assert of_type(pending, RequestTermination) == []
    assert of_type(pending, DeleteDriverPod) == []
    assert of_type(pending, RemoveFinalizer) == []

    # The driver lists its terminal export (with its durable copy) and exits as asked.
    exported = ExportedSnapshot(
        name=NAME,
        snapshot_id=1,
        num_bytes=10,
        created_at=NOW,
        terminal=True,
        durable_location=f"s3://bucket/{EXPORT_MAP}/1",
    )
    (pod,) = observation.pods
    ended = replace(pod, phase=PodPhase.FAILED, exit_code=64)
    actions = decide(replace(observation, status=_listing(status, exported), pods=(ended,)))

    keep = KeepExport(exported, dispose_on_delete=False)
    assert actions.index(keep) < actions.index(MAPS), "kept before anything is destroyed"
    assert actions[-1] == RemoveFinalizer()
    assert of_type(actions, CopySnapshotToExport) == []
    (kept,) = _messages(actions, EventReason.DELETION_EXPORT_KEPT)
    assert f"exportName={NAME} snapshotId=1" in kept
    assert f"durableLocation=s3://bucket/{EXPORT_MAP}/1" in kept
    assert f"spec.initialSnapshotName={NAME}" in kept
    assert EventReason.SNAPSHOT_MAPS_DELETED in reasons(actions)


def test_a_driver_that_does_not_serve_in_time_is_stopped_and_the_restore_point_copied() -> None:
    record = a_snapshot()
    asked = TerminationStatus(
        mode=TerminationMode.CANCEL_GRACEFUL,
        request_id="r",
        requested_at=ago(SETTINGS.graceful_timeout_seconds),
        export_name=NAME,
        reason=JOB_DELETED,
    )
    observation = _deleting(
        running_job(SPEC, phase=Phase.COMPLETING, termination=asked, record=record)
    )
    (pod,) = observation.pods

    actions = decide(observation)

    assert DeleteDriverPod(pod.name) in actions
    assert EventReason.TERMINATION_ESCALATED in reasons(actions)
    assert of_type(actions, CopySnapshotToExport) == [], "the driver may still write"
    assert of_type(actions, RemoveFinalizer) == []

    stopping = decide(replace(observation, pods=(replace(pod, deleting=True),)))
    assert of_type(stopping, CopySnapshotToExport) == []
    assert EventReason.TERMINATION_ESCALATED not in reasons(stopping), "escalated once"

    gone = decide(replace(observation, pods=()))
    assert of_type(gone, CopySnapshotToExport) == [
        CopySnapshotToExport(_restore_point(record), record.snapshot_id, NAME, EXPORT_MAP)
    ]


def test_a_graceful_request_pending_before_the_deletion_is_served_first() -> None:
    observation = _deleting(
        running_job(
            SPEC,
            phase=Phase.COMPLETING,
            termination=graceful(TerminationMode.SUSPEND_GRACEFUL),
            record=a_snapshot(),
        )
    )

    actions = decide(observation)

    assert of_type(actions, RequestTermination) == []
    assert of_type(actions, DeleteDriverPod) == []
    assert of_type(actions, RemoveFinalizer) == []
    assert _requeue(actions) <= SETTINGS.store_retry_seconds


def test_a_starting_driver_is_stopped_at_once_and_a_job_without_a_snapshot_keeps_nothing() -> None:
    # Its pipeline never ran: it holds no state the restore point does not.
    observation = _deleting(running_job(SPEC, phase=Phase.STARTING, pod_phase=PodPhase.PENDING))
    (pod,) = observation.pods

    actions = decide(observation)

    assert DeleteDriverPod(pod.name) in actions
    assert of_type(actions, RequestTermination) == []
    (cancelled,) = _messages(actions, EventReason.CANCELLED)
    assert "deletionPolicy=Export" in cancelled

    gone = decide(replace(observation, pods=()))
    assert of_type(gone, KeepExport) == [] and of_type(gone, CopySnapshotToExport) == []
    assert MAPS in gone and gone[-1] == RemoveFinalizer()
    (applied,) = _messages(gone, EventReason.DELETION_POLICY_APPLIED)
    assert "nothing to keep" in applied and f"exportName={NAME}" in applied


# --- Export: a job that does not run ------------------------------------------------------


@pytest.mark.parametrize(
    "phase", [Phase.SUSPENDED, Phase.FAILED, Phase.COMPLETED, Phase.RESTARTING]
)
def test_a_job_not_running_copies_its_restore_point_then_keeps_it(phase: Phase) -> None:
    record = a_snapshot()
    base = suspended_job(SPEC, record)
    observation = _deleting(base, status=base.status.model_copy(update={"phase": phase}))

    actions = decide(observation)

    assert of_type(actions, CopySnapshotToExport) == [
        CopySnapshotToExport(_restore_point(record), record.snapshot_id, NAME, EXPORT_MAP)
    ]
    assert of_type(actions, PatchStatus) == [], "the phase stays, the Events tell the deletion"
    assert of_type(actions, RemoveFinalizer) == [] and MAPS not in actions
    (applied,) = _messages(actions, EventReason.DELETION_POLICY_APPLIED)
    assert f"exportName={NAME}, copying its restore point snapshotId=0" in applied

    # The executor lists the validated copy; the next decision keeps it, then destroys.
    copied = ExportedSnapshot(
        name=NAME, snapshot_id=0, num_bytes=400, created_at=NOW, terminal=False
    )
    done = decide(replace(observation, status=_listing(observation.status, copied)))
    keep = KeepExport(copied, dispose_on_delete=True)  # exportPolicy.disposeOnDelete's default
    assert done.index(keep) < done.index(MAPS)
    assert done[-1] == RemoveFinalizer()
    assert EventReason.DELETION_EXPORT_KEPT in reasons(done)
    assert "durableLocation=none" in _messages(done, EventReason.DELETION_EXPORT_KEPT)[0]


def test_a_restore_point_that_is_an_export_is_copied_from_that_export() -> None:
    record = a_snapshot(SnapshotKind.TERMINAL_EXPORTED, "final")
    observation = _deleting(suspended_job(SPEC, record))

    (copy,) = of_type(decide(observation), CopySnapshotToExport)

    assert copy.source_map == export_map_name(JOB.namespace, "final")
    assert copy.export_map == EXPORT_MAP


def test_a_terminal_export_the_driver_did_not_list_is_listed_from_the_record() -> None:
    # Taken and recorded, but reporting it failed: copying it onto itself would be wrong.
    record = a_snapshot(SnapshotKind.TERMINAL_EXPORTED, NAME)
    observation = _deleting(suspended_job(SPEC, record))

    actions = decide(observation)

    assert of_type(actions, CopySnapshotToExport) == []
    listed = status_after(observation.status, actions).exported(NAME)
    assert listed is not None
    assert (listed.snapshot_id, listed.num_bytes, listed.terminal) == (0, 10, True)


def test_a_job_that_never_took_a_snapshot_has_nothing_to_keep() -> None:
    observation = _deleting(suspended_job(SPEC, ExecutionRecord()))

    actions = decide(observation)

    assert of_type(actions, CopySnapshotToExport) == [] and of_type(actions, KeepExport) == []
    assert MAPS in actions and actions[-1] == RemoveFinalizer()
    (applied,) = _messages(actions, EventReason.DELETION_POLICY_APPLIED)
    assert "deletionPolicy=Export" in applied and "nothing to keep" in applied


def test_an_invalid_spec_gets_the_safe_default_and_keeps_the_restore_point() -> None:
    record = a_snapshot()
    observation = _deleting(suspended_job(SPEC, record), spec=InvalidSpec("bad"))

    assert len(of_type(decide(observation), CopySnapshotToExport)) == 1
    copied = ExportedSnapshot(name=NAME, snapshot_id=0, num_bytes=1, created_at=NOW, terminal=False)
    done = decide(replace(observation, status=_listing(observation.status, copied)))
    # disposeOnDelete as the export reconcile sets it for a spec it cannot read: the default.
    assert KeepExport(copied, dispose_on_delete=True) in done


# --- Export: the store is down -------------------------------------------------------------


def _failed(observation: Observation, attempts: int, seconds_ago: float) -> Observation:
    failure = ExportFailureStatus(
        name=NAME,
        attempts=attempts,
        message="StoreUnreachable: no member answered",
        time=ago(seconds_ago),
    )
    status = observation.status.model_copy(update={"export_failure": failure})
    return replace(observation, status=status)


def test_a_failed_copy_is_retried_with_backoff_then_the_deletion_is_held() -> None:
    base = _deleting(suspended_job(SPEC, a_snapshot()))
    retry = SETTINGS.export_retry_seconds

    early = decide(_failed(base, 1, retry - 4))
    assert of_type(early, CopySnapshotToExport) == []
    assert _requeue(early) == pytest.approx(4)
    again = decide(_failed(base, 1, retry))
    assert len(of_type(again, CopySnapshotToExport)) == 1
    (failed,) = _messages(again, EventReason.EXPORT_FAILED)
    assert "attempts=1 maxAttempts=3" in failed and "StoreUnreachable" in failed
    # The delay doubles: 20 s after the second failure.
    assert of_type(decide(_failed(base, 2, 2 * retry - 1)), CopySnapshotToExport) == []
    assert len(of_type(decide(_failed(base, 2, 2 * retry)), CopySnapshotToExport)) == 1

    exhausted = _failed(base, SETTINGS.export_copy_attempts, 1)
    held = decide(exhausted)

    assert of_type(held, CopySnapshotToExport) == []
    assert MAPS not in held and of_type(held, RemoveFinalizer) == [], "state is never lost"
    (warning,) = [a for a in of_type(held, EmitEvent) if a.reason is EventReason.DELETION_HELD]
    assert warning.event_type is EventType.WARNING
    assert "make the store healthy" in warning.message
    assert "spec.deletionPolicy: Destroy" in warning.message
    status = status_after(exhausted.status, held)
    assert status.last_failure is not None and status.last_failure.reason == DELETION_HELD
    assert status.last_failure.message == warning.message
    assert _requeue(held) == SETTINGS.resync_seconds

    # Held: announced once, no further attempt.
    still = decide(replace(exhausted, status=status))
    assert of_type(still, CopySnapshotToExport) == []
    assert EventReason.DELETION_HELD not in reasons(still)
    assert of_type(still, PatchStatus) == []

    # A spec change starts another round of attempts.
    changed = decide(replace(exhausted, status=status, generation=2))
    assert len(of_type(changed, CopySnapshotToExport)) == 1
    assert status_after(status, changed).export_failure is None

    # Destroy is the way out without keeping the state.
    destroy = spec_of({"deletionPolicy": "Destroy"})
    out = decide(replace(exhausted, status=status, spec=destroy, generation=2))
    assert MAPS in out and out[-1] == RemoveFinalizer()
    assert of_type(out, KeepExport) == [] and of_type(out, CopySnapshotToExport) == []


def test_a_failure_of_another_export_does_not_count() -> None:
    base = _deleting(suspended_job(SPEC, a_snapshot()))
    failure = ExportFailureStatus(name="nightly", attempts=3, message="x", time=ago(1))
    other = replace(base, status=base.status.model_copy(update={"export_failure": failure}))

    assert len(of_type(decide(other), CopySnapshotToExport)) == 1


# --- Destroy -------------------------------------------------------------------------------


def test_destroy_cancels_without_a_snapshot_and_keeps_nothing() -> None:
    spec: SnapshotJobSpec = spec_of({"deletionPolicy": "Destroy"})
    observation = _deleting(running_job(spec, record=a_snapshot()))
    (pod,) = observation.pods

    actions = decide(observation)

    assert DeleteDriverPod(pod.name) in actions
    assert of_type(actions, RequestTermination) == [] and of_type(actions, PatchStatus) == []
    (cancelled,) = _messages(actions, EventReason.CANCELLED)
    assert "mode=CANCEL_FORCEFUL" in cancelled and "deletionPolicy=Destroy" in cancelled
    assert of_type(actions, RemoveFinalizer) == []

    gone = decide(replace(observation, pods=()))
    assert of_type(gone, KeepExport) == [] and of_type(gone, CopySnapshotToExport) == []
    assert MAPS in gone and gone[-1] == RemoveFinalizer()
    (applied,) = _messages(gone, EventReason.DELETION_POLICY_APPLIED)
    assert "deletionPolicy=Destroy" in applied
    assert EventReason.SNAPSHOT_MAPS_DELETED in reasons(gone)
