"""Which of a job's exports are kept, and what deleting one does. Pure.

Retention deletes completed exports of the operator's origins (``ExportSnapshot``,
``Periodic``) beyond the job's ``spec.exportPolicy.maxCount`` or older than its
``maxAgeSeconds``. Neither retention nor a deletion with ``disposeOnDelete`` ever destroys an
export some job needs: the one it starts from (``initialSnapshotName``), the one its spec asks
for (``exportSnapshot.name``), the terminal export holding its restore point
(:func:`names_in_use`). That is the complaint Flink users have of savepoint cleanup (a
snapshot in use deleted), ruled out here by construction and by a property test
(``tests/unit/operator/test_export_retention.py``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime

from snapshot_operator.reconcile.export_model import (
    DeleteExport,
    EmitExportEvent,
    ExportAction,
    ExportObject,
    ExportsObservation,
)
from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus
from snapshotjob_contract.exports import ExportOrigin, ExportPhase, ExportReason

_RETAINED_ORIGINS = frozenset({ExportOrigin.EXPORT_SNAPSHOT, ExportOrigin.PERIODIC})

DISPOSE_ATTEMPTS = 5
"""Failed attempts to destroy an export's data before its deletion gives up and lets the
object go, with a DisposeFailed Event naming what is left."""


def retire(
    observation: ExportsObservation, completed: Sequence[tuple[ExportObject, datetime]]
) -> list[ExportAction]:
    """Deletes the completed exports of the operator's origins that the policy no longer keeps.

    Args:
        observation: The job and its exports.
        completed: The exports that are completed after this decision, with when.
    """
    spec = observation.spec
    if spec is None or observation.job_uid is None:
        return []
    policy = spec.export_policy
    if policy.max_count is None and policy.max_age_seconds is None:
        return []
    retained = [(e, at) for e, at in completed if e.spec.origin in _RETAINED_ORIGINS]
    newest_first = sorted(retained, key=lambda pair: pair[1], reverse=True)
    in_use = own_names_in_use(spec, observation.status) | set(observation.in_use)
    actions: list[ExportAction] = []
    for index, (export, completed_at) in enumerate(newest_first):
        age = (observation.now - completed_at).total_seconds()
        over_count = policy.max_count is not None and index >= policy.max_count
        too_old = policy.max_age_seconds is not None and age > policy.max_age_seconds
        if not (over_count or too_old) or export.name in in_use:
            continue
        why = (
            f"maxCount={policy.max_count}"
            if over_count
            else f"maxAgeSeconds={policy.max_age_seconds} ageSeconds={int(age)}"
        )
        actions.append(
            EmitExportEvent(
                export.name,
                ExportReason.EXPORT_RETIRED,
                f"Retiring export by the job's exportPolicy job={observation.job_name} {why} "
                f"disposeOnDelete={str(export.spec.dispose_on_delete).lower()}",
            )
        )
        actions.append(DeleteExport(export.name, export.uid))
    return actions


def own_names_in_use(spec: SnapshotJobSpec | None, status: SnapshotJobStatus) -> set[str]:
    """The export names one job needs kept: its restore point, its start, its spec's export."""
    names = set()
    restore_point = status.record().exported_snapshot_name
    if restore_point is not None:
        names.add(restore_point)
    if spec is not None:
        if spec.initial_snapshot_name is not None:
            names.add(spec.initial_snapshot_name)
        if spec.export_snapshot is not None and spec.export_snapshot.name is not None:
            names.add(spec.export_snapshot.name)
    return names


def names_in_use(
    jobs: Sequence[tuple[str, SnapshotJobSpec | None, SnapshotJobStatus]],
) -> dict[str, str]:
    """Every export name the namespace's jobs need kept, with the first job naming it."""
    used: dict[str, str] = {}
    for job_name, spec, status in jobs:
        for name in sorted(own_names_in_use(spec, status)):
            used.setdefault(name, job_name)
    return used


@dataclass(frozen=True)
class Disposal:
    """What deleting an export object does now.

    Attributes:
        wait: Why the deletion must wait (the export is in use or being taken); None to go on.
        dispose: Whether to destroy the export's data.
    """

    wait: str | None
    dispose: bool


def decide_deletion(export: ExportObject, in_use: Mapping[str, str]) -> Disposal:
    """Whether a deleted export's data is destroyed now, later, or kept.

    An export some job names, or that is being taken, is never destroyed: its deletion waits
    (the PersistentVolumeClaim protection's shape), with the job to change named in the
    message. An export without ``disposeOnDelete`` goes at once and keeps its data.
    """
    if not export.spec.dispose_on_delete:
        return Disposal(wait=None, dispose=False)
    user = in_use.get(export.name)
    if user is not None:
        return Disposal(
            wait=f"Not disposing of export name={export.name}: job={user} names it "
            "(initialSnapshotName, exportSnapshot.name or its restore point); change that job",
            dispose=False,
        )
    if export.status.phase is ExportPhase.IN_PROGRESS:
        return Disposal(
            wait=f"Not disposing of export name={export.name}: it is being taken", dispose=False
        )
    return Disposal(wait=None, dispose=True)
