"""A job's SnapshotJobExport objects: read, decide, perform; and an export's deletion.

The export decision (:func:`snapshot_operator.reconcile.exports.decide_exports`) runs in the
job's own loop, right before the job's decision, and hands it the export to take next. Its
reads come in a fixed order, exports before the job: an export's deletion removes its entry
from the job's ``status.exportedSnapshots`` before the object goes, so a list without the
object is followed by a job without the entry, and the decision never takes the entry for an
export that has no object yet (which would bring a deleted export back).

Like :mod:`snapshot_operator.executing`, this module joins decisions to the gateways and adds
no judgement; it imports no client.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from snapshot_operator.executing import READS, Services, store_of
from snapshot_operator.gateways import CreateFailed, StaleObservation, StoreOperationFailed
from snapshot_operator.reconcile import JobRef, parse_spec
from snapshot_operator.reconcile.actions import KeepExport
from snapshot_operator.reconcile.exports import (
    DISPOSE_ATTEMPTS,
    CreateExport,
    DeleteExport,
    EmitExportEvent,
    ExportObject,
    ExportsDecision,
    ExportsObservation,
    PatchExportStatus,
    completed_status,
    decide_deletion,
    decide_exports,
    names_in_use,
    parse_export,
)
from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus, export_map_name
from snapshotjob_contract.exports import (
    EXPORT_KIND,
    ExportOrigin,
    ExportPhase,
    ExportReason,
    SnapshotJobExportSpec,
)
from snapshotjob_contract.resource import API_VERSION

log = logging.getLogger(__name__)

_FORGET_ATTEMPTS = 5
"""Optimistic-lock conflicts tolerated while removing an export from its job's status."""


class ExportNameTaken(Exception):  # noqa: N818 - names the outcome, like StaleObservation
    """The deletion's export name belongs to another job's SnapshotJobExport: the job waits."""


def _job_parts(raw: Mapping[str, Any]) -> tuple[SnapshotJobSpec | None, SnapshotJobStatus]:
    spec = parse_spec(raw.get("spec"))
    try:
        status = SnapshotJobStatus.model_validate(raw.get("status") or {})
    except pydantic.ValidationError:
        status = SnapshotJobStatus()
    return (spec if isinstance(spec, SnapshotJobSpec) else None), status


def _emit(
    services: Services,
    namespace: str,
    export: tuple[str, str],
    action: str,
    reason: ExportReason,
    note: str,
    *,
    warning: bool = False,
) -> None:
    """One Event regarding an export, given as its name and uid."""
    name, uid = export
    services.kube.emit_event(
        {
            "apiVersion": API_VERSION,
            "kind": EXPORT_KIND,
            "namespace": namespace,
            "name": name,
            "uid": uid,
        },
        action=action,
        reason=reason.value,
        event_type="Warning" if warning else "Normal",
        note=note,
    )


@dataclass(frozen=True)
class ExportsReconciled:
    """A reconcile of a job's export objects.

    Attributes:
        decision: What was decided (and performed).
        job: The job as read right after the export objects (or as watched, see
            :func:`reconcile_exports`), when nothing was written since: the job's own
            decision may take it instead of reading it again. None if it must read again
            (something was written, or the job is gone).
    """

    decision: ExportsDecision
    job: dict[str, Any] | None


def reconcile_exports(
    services: Services, namespace: str, job_name: str, watched: dict[str, Any] | None = None
) -> ExportsReconciled:
    """Updates the job's export objects; returns the export the job should take next.

    The first look lists from the API server's watch cache: a consistent list waits up to
    100 ms for that cache to catch up with etcd
    (:func:`snapshot_operator.observing._first_look_pods` says why). A view that is behind can only
    miss work (an export whose object the cache has yet to show), which the export's own
    watch event brings back; so whenever the first look finds anything to do, the decision is
    made again from consistent lists, and only that one is performed.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        job_name: The job's name.
        watched: The job as the watch delivered it, taken by the first look instead of a
            read (:mod:`snapshot_operator.reconcile.freshness` says when it may be).

    Raises:
        kubernetes.client.exceptions.ApiException: On API errors.
    """
    decision, _, job = _decide_exports(services, namespace, job_name, cached=True, job=watched)
    if not decision.actions and decision.requested is None:
        return ExportsReconciled(decision, job)
    decision, uids, job = _decide_exports(services, namespace, job_name, cached=False)
    for action in decision.actions:
        _perform(services, namespace, job_name, action, uids)
    return ExportsReconciled(decision, None if decision.actions else job)


def _decide_exports(
    services: Services,
    namespace: str,
    job_name: str,
    *,
    cached: bool,
    job: dict[str, Any] | None = None,
) -> tuple[ExportsDecision, dict[str, str], dict[str, Any] | None]:
    """The decision on the job's exports, the uid of each of its export objects, the job."""
    kube = services.kube
    if cached:
        # A first look performs nothing: the order of its reads does not matter, and made at
        # once they take the time of one.
        listed = READS.submit(kube.list_exports, namespace, cached=True)
        job_raw = job if job is not None else kube.read_job(namespace, job_name)
        exports_raw = listed.result()
    else:
        exports_raw = kube.list_exports(namespace)  # before the job: see the module docstring
        job_raw = kube.read_job(namespace, job_name)
    exports: list[ExportObject] = []
    others: set[str] = set()
    for raw in exports_raw:
        export = parse_export(raw)
        if export is None:
            continue
        if export.spec.job_name == job_name:
            exports.append(export)
        else:
            others.add(export.name)
    spec, status = _job_parts(job_raw) if job_raw is not None else (None, SnapshotJobStatus())
    in_use: dict[str, str] = {}
    policy = spec.export_policy if spec is not None else None
    if policy is not None and (policy.max_count is not None or policy.max_age_seconds is not None):
        in_use = names_in_use(
            [
                (str(j["metadata"]["name"]), *_job_parts(j))
                for j in kube.list_jobs(namespace, cached=cached)
            ]
        )
    observation = ExportsObservation(
        job_name=job_name,
        job_uid=str(job_raw["metadata"]["uid"]) if job_raw is not None else None,
        spec=spec,
        status=status,
        exports=tuple(exports),
        now=services.clock(),
        other_export_names=frozenset(others),
        in_use=in_use,
        copy_attempts=services.settings.decision.export_copy_attempts,
    )
    uids = {export.name: export.uid for export in exports}
    return decide_exports(observation), uids, job_raw


def _perform(
    services: Services,
    namespace: str,
    job_name: str,
    action: PatchExportStatus | CreateExport | DeleteExport | EmitExportEvent,
    uids: dict[str, str],
) -> None:
    kube = services.kube
    context = f"namespace={namespace} job={job_name}"
    match action:
        case PatchExportStatus(name=name, status=status):
            kube.patch_export_status(namespace, name, status)
            log.info(
                "Patched export status %s export=%s phase=%s", context, name, status.get("phase")
            )
        case CreateExport(name=name, spec=spec, status=status):
            try:
                uid = kube.create_export(namespace, _manifest(name, namespace, spec))
            except CreateFailed as error:
                log.warning("Export not created %s export=%s error=%s", context, name, error)
                return
            if uid is None:
                return  # Another object has the name; the next decision sees it.
            uids[name] = uid
            kube.patch_export_status(namespace, name, status.to_json())
            log.info(
                "Created export %s export=%s origin=%s phase=%s",
                context,
                name,
                spec.origin.value,
                status.phase.value,
            )
        case DeleteExport(name=name, uid=uid):
            deleted = kube.delete_export(namespace, name, uid)
            log.info("Retired export %s export=%s deleted=%s", context, name, deleted)
        case EmitExportEvent(name=name, reason=reason, message=message, warning=warning):
            uid = uids.get(name)
            if uid is not None:
                _emit(services, namespace, (name, uid), "Export", reason, message, warning=warning)


def _manifest(name: str, namespace: str, spec: SnapshotJobExportSpec) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": EXPORT_KIND,
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec.to_json(),
    }


def keep_export(services: Services, job: JobRef, action: KeepExport) -> None:
    """Makes sure a deleted job's export has its SnapshotJobExport, completed, before the job goes.

    The object is created like the one the export reconcile creates for an export the job took
    (origin ``ExportSnapshot``), without an owner reference: it outlives the job. One of that
    name for the same job (the export reconcile's, or a user's asking for it) gets the
    completed status if it lacks it. Read from a consistent list: a cached one may not show an
    object created a moment ago.

    Raises:
        CreateFailed: If the API server did not create the object (the finalizer stays).
        ExportNameTaken: If an object of that name names another job (the finalizer stays).
    """
    kube = services.kube
    exported = action.exported
    name = exported.name
    status = completed_status(exported, job.name, job.uid, services.clock())
    context = f"namespace={job.namespace} job={job.name} export={name}"
    for _ in range(2):
        found = next(
            (
                export
                for export in map(parse_export, kube.list_exports(job.namespace))
                if export is not None and export.name == name
            ),
            None,
        )
        if found is None:
            spec = SnapshotJobExportSpec(
                job_name=job.name,
                origin=ExportOrigin.EXPORT_SNAPSHOT,
                dispose_on_delete=action.dispose_on_delete,
            )
            if kube.create_export(job.namespace, _manifest(name, job.namespace, spec)) is None:
                continue  # Created since the list: look at it.
            kube.patch_export_status(job.namespace, name, status.to_json())
            log.info(
                "Created the deleted job's export %s snapshotId=%s", context, exported.snapshot_id
            )
            return
        if found.spec.job_name != job.name:
            raise ExportNameTaken(
                f"Export name taken by another job's SnapshotJobExport {context} "
                f"otherJob={found.spec.job_name}: delete that object, or set the job's "
                "spec.deletionPolicy: Destroy"
            )
        current = found.status
        if (current.phase, current.job_uid, current.snapshot_id) != (
            ExportPhase.COMPLETED,
            job.uid,
            exported.snapshot_id,
        ):
            kube.patch_export_status(job.namespace, name, status.to_json())
            log.info("Completed the deleted job's export %s", context)
        return
    raise StaleObservation(f"Export kept appearing and disappearing {context}")


def delete_export(services: Services, namespace: str, raw: Mapping[str, Any]) -> str | None:
    """Handles an export's deletion: disposes of its data if asked, then forgets it.

    Returns:
        Why the deletion must wait (the finalizer stays; the caller asks again later), or
        None once it is done and the finalizer may go.

    Raises:
        kubernetes.client.exceptions.ApiException: On API errors.
    """
    kube = services.kube
    name = str(raw["metadata"]["name"])
    export = parse_export(raw)
    if export is None:
        return None  # Not an export the operator could have acted on.
    job_name = export.spec.job_name
    jobs = kube.list_jobs(namespace)
    parts = {str(j["metadata"]["name"]): _job_parts(j) for j in jobs}
    disposal = decide_deletion(export, names_in_use([(n, *p) for n, p in parts.items()]))
    if disposal.wait is not None:
        _emit(
            services,
            namespace,
            (name, export.uid),
            "Delete",
            ExportReason.EXPORT_IN_USE,
            disposal.wait,
            warning=True,
        )
        return disposal.wait
    if disposal.dispose:
        waiting = _dispose(services, namespace, export, parts.get(job_name, (None, None))[0])
        if waiting is not None:
            return waiting
    _forget(services, namespace, job_name, name)
    return None


def _dispose(
    services: Services, namespace: str, export: ExportObject, job_spec: SnapshotJobSpec | None
) -> str | None:
    """Destroys the export's map and durable copy; a failure is retried a few times."""
    ref = (export.name, export.uid)
    map_name = export_map_name(namespace, export.name)
    location = export.status.durable_location
    try:
        members, cluster = store_of(services, job_spec)
        services.store.destroy_maps(members, cluster, [map_name])
        if location is not None:
            if services.durable is None:
                raise StoreOperationFailed(
                    "NoDurableStorage",
                    f"The operator has no durable storage configured; delete location={location} "
                    "yourself",
                )
            services.durable.discard(location)
    except StoreOperationFailed as error:
        failures = export.status.dispose_failures + 1
        left = f"map={map_name}" + (f" location={location}" if location else "")
        retry = failures < DISPOSE_ATTEMPTS
        if retry:
            status = export.status.model_copy(update={"dispose_failures": failures})
            services.kube.patch_export_status(namespace, export.name, status.to_json())
            message = (
                f"Disposing of export failed, trying again attempt={failures} "
                f"limit={DISPOSE_ATTEMPTS} {left} error={error.reason}: {error}"
            )
        else:
            message = (
                f"Disposing of export failed, giving up and deleting the object "
                f"attempts={failures} left {left} error={error.reason}: {error}"
            )
        _emit(
            services, namespace, ref, "Delete", ExportReason.DISPOSE_FAILED, message, warning=True
        )
        log.warning("%s namespace=%s export=%s", message, namespace, export.name)
        return message if retry else None
    note = f"Disposed of export map={map_name}" + (f" location={location}" if location else "")
    _emit(services, namespace, ref, "Delete", ExportReason.EXPORT_DISPOSED, note)
    log.info("%s namespace=%s export=%s", note, namespace, export.name)
    return None


def _forget(services: Services, namespace: str, job_name: str, name: str) -> None:
    """Removes the export from its job's ``status.exportedSnapshots``, under the job's lock.

    Raises:
        StaleObservation: If the job kept changing under every attempt.
    """
    kube = services.kube
    for _ in range(_FORGET_ATTEMPTS):
        job = kube.read_job(namespace, job_name)
        if job is None:
            return
        entries = (job.get("status") or {}).get("exportedSnapshots") or []
        kept = [entry for entry in entries if entry.get("name") != name]
        if len(kept) == len(entries):
            return
        try:
            kube.patch_status(
                namespace,
                job_name,
                str(job["metadata"]["resourceVersion"]),
                {"exportedSnapshots": kept},
            )
        except StaleObservation:
            continue
        log.info("Forgot export namespace=%s job=%s export=%s", namespace, job_name, name)
        return
    raise StaleObservation(
        f"Job kept changing while forgetting export namespace={namespace} job={job_name} "
        f"export={name}"
    )
