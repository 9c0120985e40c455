"""The kopf handlers: they only register and delegate, as in crate-operator.

Each SnapshotJob gets one daemon that runs :func:`snapshot_operator.executing.reconcile_once`
whenever something about the job changed and whenever the decision asked to look again
(``Requeue``: backoffs, graceful deadlines, store retries). Watch events of the job and of its
driver Pods only wake that daemon. One loop per job means reconciles of a job never overlap
inside a replica, and no decision is made on a view of the job older than the loop's own last
write: the job is read, or taken as kopf's watch delivered it once that watch has shown the
version the previous reconcile left (:mod:`snapshot_operator.reconcile.freshness`).

Why a daemon rather than kopf's create/update/resume/timer handlers: those record their
progress and the last handled spec in annotations of the SnapshotJob, and every such write
bumps its ``resourceVersion``, which the operator's status patches and the driver's
execution-record writes (both under an optimistic lock) would then lose to. For the same
reason kopf's record of the last handled spec is switched off (:class:`_NoDiffBase`).
The daemon covers the same ground without writing anything: it starts for every existing
job when the operator starts (resume), the watch events cover create and update, and its
wait covers the timer. Deletion is kopf's ``on.delete`` with the finalizer
``snapshotjob.io/finalizer``: the job is kept until the decision says its cleanup is done.

The store's members are restarted by one background loop started with the operator
(``--store-statefulset``), not by a kopf daemon or timer on the StatefulSet: those would put
kopf's finalizer on the Hazelcast StatefulSet (blocking its deletion whenever the operator is
gone) and need the store's namespace among the watched ones. The loop polls instead; each
step is planned from fresh reads and its one deletion is preconditioned, see
:mod:`snapshot_operator.store_restarts`.

A job's SnapshotJobExport objects are reconciled in the same loop, right before the job
(:mod:`snapshot_operator.exports_executing`), because the job's decision takes the export they
ask for: the export objects' watch events only wake the job's loop, or reconcile the objects of
a job that does not exist (to report JobNotFound). An export's deletion is kopf's ``on.delete``
under the same finalizer: it waits while a job names the export, and disposes of its data if
``spec.disposeOnDelete`` asks for it.

The gateways to the Kubernetes API and the store (:mod:`snapshot_operator.gateways`) come in
the kopf memo as :class:`~snapshot_operator.executing.Services`, built by ``__main__``; the
handlers pass them on and import no client.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import Iterable
from typing import Any

import kopf

from snapshot_operator.executing import Outcome, Seen, Services, read_early, reconcile_once
from snapshot_operator.exports_executing import (
    ExportsReconciled,
    delete_export,
    reconcile_exports,
)
from snapshot_operator.reconcile.freshness import WatchedDriver, WatchedObject, resource_version
from snapshot_operator.rollout import RestartMember, RolloutStep, WaitForHealthyStore
from snapshot_operator.settings import DEFAULT_FINALIZER
from snapshot_operator.store_restarts import restart_step
from snapshotjob_contract.exports import EXPORT_PLURAL
from snapshotjob_contract.pods import LABEL_JOB_UID
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION

log = logging.getLogger(__name__)

WATCH_SERVER_TIMEOUT_SECONDS = 300
"""How long the API server keeps one watch open before the operator reopens it."""

_STOP_POLL_SECONDS = 1.0
"""How often a waiting daemon checks whether kopf asked it to stop."""


class _NoDiffBase(kopf.DiffBaseStorage):
    """Keeps no record of the last handled spec on the object.

    kopf would write it as an annotation on every spec change, racing the operator's own
    status patch (and the driver's record writes) for the ``resourceVersion``; nothing here
    handles spec diffs (the decision compares the spec with ``execution.specHash``), so the
    record is not needed. Deletion is detected from the deletion timestamp, not from it.
    """

    def fetch(self, *, body: kopf.Body) -> kopf.BodyEssence | None:
        """Returns no previous essence."""
        return None

    def build(
        self, *, body: kopf.Body, extra_fields: Iterable[kopf.FieldSpec] | None = None
    ) -> kopf.BodyEssence:
        """Returns an empty essence: with no previous one, nothing compares it.

        kopf builds the essence of every watch event's object, of the jobs' and the driver
        Pods' alike, before it calls any handler: its own build deep-copies the whole object
        (status and managedFields included), 0.5 ms or more in the event loop before the
        job's loop is woken.
        """
        return kopf.BodyEssence()

    def store(self, *, body: kopf.Body, patch: kopf.Patch, essence: kopf.BodyEssence) -> None:
        """Stores nothing."""


class _QuietWakes(logging.Filter):
    """Drops kopf's success line of the handlers that only wake a job's loop.

    kopf logs ``Handler 'job_changed' succeeded.`` at INFO for every watch event of every job,
    driver Pod and export, in the event loop and before the woken loop can run: each line's
    write delayed the reconcile it announced (0.1 ms, several under I/O load) and said
    nothing the reconcile's own lines do not. Their failures are still logged.
    """

    _QUIET = frozenset(
        f"Handler {name!r} succeeded."
        for name in ("job_changed", "driver_pod_changed", "export_changed")
    )

    def filter(self, record: logging.LogRecord) -> bool:
        """Whether the record is logged: all but those success lines."""
        return record.levelno != logging.INFO or record.msg not in self._QUIET


def _services(memo: kopf.Memo) -> Services:
    services: Services = memo["services"]
    return services


def _waker(memo: kopf.Memo, uid: str) -> asyncio.Event:
    wakers: dict[str, asyncio.Event] = memo["wakers"]
    return wakers.setdefault(uid, asyncio.Event())


def _watched(memo: kopf.Memo, uid: str) -> WatchedObject:
    # Built by __main__, as the wakers: shared by the job's event handler and its daemon.
    watched: dict[str, WatchedObject] = memo["watched"]
    return watched.setdefault(uid, WatchedObject())


def _drivers(memo: kopf.Memo) -> dict[tuple[str, str], WatchedDriver]:
    # Built by __main__: the current driver Pod of each job, by namespace and name, kept from
    # the Pods' watch events for the job's loop.
    drivers: dict[tuple[str, str], WatchedDriver] = memo["drivers"]
    return drivers


def _follow_driver(
    memo: kopf.Memo, namespace: str | None, driver: WatchedDriver | None, seen: Seen | None
) -> WatchedDriver | None:
    """Keeps the driver Pod the job's status names watched, after a reconcile."""
    name = seen.driver_pod if seen is not None else None
    if driver is not None and (driver.name != name or namespace is None):
        _drivers(memo).pop((namespace or "", driver.name), None)
        driver = None
    if driver is None and name is not None and namespace is not None:
        driver = _drivers(memo).setdefault((namespace, name), WatchedDriver(name))
    if driver is not None:
        driver.reconciled(seen.driver_pod_version if seen is not None else None)
    return driver


def _reconcile_exports(
    services: Services, namespace: str, name: str, watched: dict[str, Any] | None = None
) -> ExportsReconciled | None:
    """The job's export objects; None if they could not be reconciled (the job still is).

    A failure here must not stop the job's own reconcile: an operator upgraded before the
    SnapshotJobExport CRD was applied (Helm never installs CRDs on upgrade) would otherwise
    leave every job unsupervised.
    """
    try:
        return reconcile_exports(services, namespace, name, watched)
    except Exception:
        log.exception("Export reconcile failed namespace=%s job=%s", namespace, name)
        return None


def _reconcile_job_and_exports(
    services: Services,
    namespace: str,
    name: str,
    seen: Seen | None,
    watched: dict[str, Any] | None = None,
    driver: dict[str, Any] | None = None,
) -> Outcome:
    """The job's export objects, then the job, which takes the export they ask for.

    The job's reads that the previous reconcile lets guess start first, so that they run
    while the export objects and the job are read. ``watched`` and ``driver`` are the job and
    its current driver Pod as the watch delivered them, taken instead of reads
    (:mod:`snapshot_operator.reconcile.freshness`).
    """
    early = read_early(services, namespace, seen, driver)
    exports = _reconcile_exports(services, namespace, name, watched)
    requested = exports.decision.requested if exports is not None else None
    job = exports.job if exports is not None else None
    outcome = reconcile_once(services, namespace, name, requested, job=job, early=early)
    if outcome.gone:
        _reconcile_exports(services, namespace, name)  # Pending exports now say JobNotFound.
    due = exports.decision.due_in_seconds if exports is not None else None
    if due is not None and due < outcome.requeue_after:
        return dataclasses.replace(outcome, requeue_after=max(due, 1.0))
    return outcome


async def _reconcile(
    services: Services,
    namespace: str | None,
    name: str,
    seen: Seen | None = None,
    watched: dict[str, Any] | None = None,
    driver: dict[str, Any] | None = None,
) -> Outcome:
    if namespace is None:
        raise kopf.PermanentError(f"SnapshotJob without a namespace name={name}")
    try:
        return await asyncio.to_thread(
            _reconcile_job_and_exports, services, namespace, name, seen, watched, driver
        )
    except Exception:
        # Level-based: whatever failed is decided again from a fresh read.
        retry = services.settings.decision.store_retry_seconds
        log.exception(
            "Reconcile failed namespace=%s name=%s retrySeconds=%s", namespace, name, retry
        )
        # What it wrote (or created, or deleted) before it failed is not known: the next
        # reconcile reads the job and the driver.
        unknown = (
            dataclasses.replace(seen, resource_version=None, driver_pod_version=None)
            if seen is not None
            else None
        )
        return Outcome(requeue_after=retry, seen=unknown)


@kopf.on.startup()
def configure(settings: kopf.OperatorSettings, memo: kopf.Memo, **_: Any) -> None:
    """Keeps kopf's own bookkeeping off the SnapshotJob's status, under our finalizer."""
    settings.peering.lifetime = _services(memo).settings.peering_lifetime_seconds
    settings.persistence.finalizer = DEFAULT_FINALIZER
    settings.persistence.progress_storage = kopf.AnnotationsProgressStorage(prefix=GROUP)
    settings.persistence.diffbase_storage = _NoDiffBase()
    # Events are the decision's fixed reasons only; kopf's own go to the log.
    settings.posting.enabled = False
    kopf_objects = logging.getLogger("kopf.objects")
    if not any(isinstance(existing, _QuietWakes) for existing in kopf_objects.filters):
        kopf_objects.addFilter(_QuietWakes())
    # A watch the network silently dropped would leave jobs unsupervised: reopen regularly.
    settings.watching.server_timeout = WATCH_SERVER_TIMEOUT_SECONDS
    settings.watching.client_timeout = WATCH_SERVER_TIMEOUT_SECONDS + 30


async def _restart_store_members(services: Services, namespace: str, name: str) -> None:
    settings = services.settings
    log.info("Watching store members for restarts namespace=%s statefulset=%s", namespace, name)
    step: RolloutStep | None = None
    while True:
        try:
            step = await asyncio.to_thread(
                restart_step,
                services.kube,
                services.store,
                namespace,
                name,
                settings.store_members,
                settings.health_timeout_seconds,
                step,
            )
        except Exception:
            log.exception("Store restart step failed namespace=%s statefulset=%s", namespace, name)
            step = WaitForHealthyStore("step failed")
        # A rollout in progress is looked at as often as a held-back start; an idle one
        # only at the resync interval.
        busy = isinstance(step, WaitForHealthyStore | RestartMember)
        decision = settings.decision
        await asyncio.sleep(decision.store_retry_seconds if busy else decision.resync_seconds)


@kopf.on.startup()
async def start_store_restarts(memo: kopf.Memo, **_: Any) -> None:
    """Starts the loop that restarts outdated store members, if a StatefulSet is given."""
    services = _services(memo)
    namespace = services.settings.store_namespace
    name = services.settings.store_statefulset
    if name is None or namespace is None:
        return
    memo["store_restarts"] = asyncio.create_task(_restart_store_members(services, namespace, name))


@kopf.on.cleanup()
async def stop_store_restarts(memo: kopf.Memo, **_: Any) -> None:
    """Stops the store restart loop (a step under way in its thread runs to its end)."""
    task: asyncio.Task[None] | None = memo.get("store_restarts")
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@kopf.on.event(GROUP, VERSION, PLURAL)
async def job_changed(uid: str, body: kopf.Body, memo: kopf.Memo, **_: Any) -> None:
    """A SnapshotJob was created, changed (spec or status) or deleted: reconcile it."""
    watched: WatchedObject | None = memo["watched"].get(uid)
    if watched is not None:  # None before the job's daemon starts, and after it ends
        watched.delivered(resource_version(body))
    _waker(memo, uid).set()


@kopf.on.event("v1", "pods", labels={LABEL_JOB_UID: kopf.PRESENT})
async def driver_pod_changed(
    labels: kopf.Labels,
    namespace: str | None,
    name: str,
    body: kopf.Body,
    type: str | None,
    memo: kopf.Memo,
    **_: Any,
) -> None:
    """A driver Pod changed phase, exited or went away: reconcile its job."""
    driver = _drivers(memo).get((namespace or "", name))
    if driver is not None:  # only the Pod a job's status names as its current driver
        driver.delivered(body, deleted=type == "DELETED")
    _waker(memo, labels[LABEL_JOB_UID]).set()


@kopf.on.event(GROUP, VERSION, EXPORT_PLURAL)
async def export_changed(namespace: str | None, spec: kopf.Spec, memo: kopf.Memo, **_: Any) -> None:
    """A SnapshotJobExport changed: wake its job's loop, or report that the job is missing."""
    job_name = spec.get("jobName")
    if namespace is None or not isinstance(job_name, str):
        return
    uid = _job_uids(memo).get((namespace, job_name))
    if uid is not None:
        _waker(memo, uid).set()
        return
    await asyncio.to_thread(_reconcile_exports, _services(memo), namespace, job_name)


@kopf.on.delete(GROUP, VERSION, EXPORT_PLURAL)
async def export_deleted(
    namespace: str | None, name: str, body: kopf.Body, memo: kopf.Memo, **_: Any
) -> None:
    """Keeps the finalizer while the export is in use; disposes of its data if asked.

    Raises:
        kopf.TemporaryError: While the deletion waits; kopf calls again after the delay.
    """
    if namespace is None:
        return
    services = _services(memo)
    waiting = await asyncio.to_thread(delete_export, services, namespace, dict(body))
    if waiting is not None:
        raise kopf.TemporaryError(waiting, delay=services.settings.decision.store_retry_seconds)
    log.info("Export deletion done namespace=%s export=%s", namespace, name)


def _job_uids(memo: kopf.Memo) -> dict[tuple[str, str], str]:
    # Built by __main__: kopf gives each object a shallow copy of the memo, so only a dict
    # created before the copies is shared between the jobs' and the exports' handlers.
    uids: dict[tuple[str, str], str] = memo["job_uids"]
    return uids


@kopf.daemon(GROUP, VERSION, PLURAL, cancellation_timeout=30.0)
async def supervise(
    namespace: str | None,
    name: str,
    uid: str,
    body: kopf.Body,
    memo: kopf.Memo,
    stopped: kopf.DaemonStopped,
    **_: Any,
) -> None:
    """Reconciles one SnapshotJob on every change and whenever the decision asked to.

    ``body`` is kopf's live view of the job, replaced by every watch event: the reconcile
    takes a copy of it instead of a read once the watch has caught up with the last reconcile
    (:class:`~snapshot_operator.reconcile.freshness.WatchedObject`), and likewise the current
    driver Pod as :func:`driver_pod_changed` keeps it.
    """
    services = _services(memo)
    waker = _waker(memo, uid)
    watched = _watched(memo, uid)
    if namespace is not None:
        _job_uids(memo)[(namespace, name)] = uid
    log.info("Supervising job namespace=%s name=%s uid=%s", namespace, name, uid)
    seen: Seen | None = None
    driver: WatchedDriver | None = None
    try:
        while not stopped:
            # Only a reconcile a watch event woke takes the watched job; one that is due
            # (a requeue, the resync) reads it: a job deleted while the watch was down and
            # re-listed after "410 Gone" gets no DELETED event, and its view would stay.
            # A shallow copy, taken in the event loop: kopf replaces the view's whole
            # object on each event and never changes one it delivered.
            by_event = waker.is_set()
            job = dict(body) if by_event and watched.current else None
            pod = driver.view if by_event and driver is not None else None
            waker.clear()
            outcome = await _reconcile(services, namespace, name, seen, job, pod)
            seen = outcome.seen
            watched.reconciled(seen.resource_version if seen else None, resource_version(body))
            driver = _follow_driver(memo, namespace, driver, seen)
            if outcome.gone:
                return
            loop = asyncio.get_running_loop()
            due = loop.time() + outcome.requeue_after
            while not stopped and not waker.is_set():
                remaining = due - loop.time()
                if remaining <= 0:
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(waker.wait(), min(remaining, _STOP_POLL_SECONDS))
    finally:
        wakers: dict[str, asyncio.Event] = memo["wakers"]
        wakers.pop(uid, None)
        memo["watched"].pop(uid, None)
        _follow_driver(memo, namespace, driver, None)
        if namespace is not None and _job_uids(memo).get((namespace, name)) == uid:
            del _job_uids(memo)[(namespace, name)]
            # This replica no longer supervises the job (deleted, or peering moved it away):
            # the jobs-by-phase gauge must not keep counting it.
            services.metrics.job_gone(namespace, name)
        log.info("Stopped supervising job namespace=%s name=%s uid=%s", namespace, name, uid)


@kopf.on.delete(GROUP, VERSION, PLURAL)
async def delete(namespace: str | None, name: str, memo: kopf.Memo, **_: Any) -> None:
    """Keeps the finalizer until the driver is gone and the snapshot maps are destroyed.

    Raises:
        kopf.TemporaryError: While the cleanup is not done; kopf calls again after the delay.
    """
    services = _services(memo)
    outcome = await _reconcile(services, namespace, name)
    if outcome.gone or outcome.finalizer_removable:
        if namespace is not None:
            # The reconcile above recorded the job's last phase; the job is about to go.
            services.metrics.job_gone(namespace, name)
        log.info("Cleanup done namespace=%s name=%s", namespace, name)
        return
    raise kopf.TemporaryError(
        f"Cleanup not done namespace={namespace} name={name}", delay=outcome.requeue_after
    )
