"""One reconcile: read, decide, and perform the decided actions in order.

This is the only place that joins the pure decision (:func:`snapshot_operator.reconcile.decide`)
to the world, and it adds no judgement of its own: it reads the job, its driver Pods and the
store's health, lets ``observe`` and ``decide`` turn them into actions, and performs those in
the order given, stopping at the first error. Everything it writes to the status is guarded
by the ``resourceVersion`` of the read (then of its own previous write), so a half-performed
list is harmless: the next reconcile reads again and decides the same, or better.

The Kubernetes API and the store arrive as gateways (:mod:`snapshot_operator.gateways`) in
:class:`Services`, built once by ``__main__``: this module imports no client, and its unit
tests give it in-memory gateways. Blocking by design (the Kubernetes and Hazelcast clients are
synchronous); the kopf handlers run it in a worker thread.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from snapshot_operator.gateways import (
    CreateFailed,
    DurableGateway,
    KubernetesGateway,
    StaleObservation,
    StoreGateway,
    StoreOperationFailed,
)
from snapshot_operator.job_copies import delete_job_copies
from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.metrics import OperatorMetrics
from snapshot_operator.reconcile import (
    Action,
    CopySnapshotToExport,
    CreateDriverPod,
    CreateUpgradeCheckPod,
    DeleteDriverPod,
    DeleteDurableCopies,
    DeleteSnapshotMaps,
    DeleteUpgradeCheckPod,
    EmitEvent,
    Observation,
    PatchStatus,
    RemoveFinalizer,
    Requeue,
    decide,
    observe,
    parse_spec,
)
from snapshot_operator.reconcile.actions import KeepExport, acts_beyond_the_status, status_writes
from snapshot_operator.reconcile.export_model import parse_export
from snapshot_operator.reconcile.exports import with_requested_export
from snapshot_operator.settings import OperatorSettings
from snapshot_operator.spark_ui_executing import SparkUiGateway, reconcile_spark_ui
from snapshot_operator.upgrade_check_pod import build_upgrade_check_pod
from snapshotjob_contract import (
    DurableStorageSpec,
    ExportedSnapshot,
    ExportFailureStatus,
    SnapshotJobSpec,
    StartFailureStatus,
)
from snapshotjob_contract.exports import ExportPhase
from snapshotjob_contract.pods import LABEL_JOB_UID

log = logging.getLogger(__name__)

READS = ThreadPoolExecutor(max_workers=32, thread_name_prefix="reconcile-read")
"""Where a reconcile makes its independent reads at once. Shared by the jobs' reconciles,
which run in the event loop's default threads (one at a time per job): a reconcile has at
most four reads here at a time (the export list, the Pods' list, the current driver, the
store's health; the job is read in its own thread), so 32 threads serve eight jobs
reconciling at the same moment before any read queues; none of these reads waits for
another."""

RETRY_STALE_SECONDS = 0.05
"""How soon to decide again after a write lost the optimistic lock: at once, the job moved."""


def _utc_now() -> datetime:
    return datetime.now(UTC)


@dataclass(frozen=True)
class Services:
    """What a reconcile needs besides the job: the gateways and settings, one per operator.

    Attributes:
        kube: The Kubernetes API.
        store: The snapshot store (Hazelcast).
        settings: The operator's settings.
        clock: The current time, timezone-aware (UTC).
        durable: The installation's durable storage, for disposing of exports' copies; None
            without one.
        metrics: The operator's metrics, which each reconcile reports to.
        spark_ui: The Spark UI's calls (:mod:`snapshot_operator.spark_ui_executing`); None
            to leave the UI objects alone.
    """

    kube: KubernetesGateway
    store: StoreGateway
    settings: OperatorSettings
    clock: Callable[[], datetime] = _utc_now
    durable: DurableGateway | None = None
    metrics: OperatorMetrics = field(default_factory=OperatorMetrics)
    spark_ui: SparkUiGateway | None = None


@dataclass(frozen=True)
class Seen:
    """What a reconcile of a job saw, from which the next one starts its reads early.

    Attributes:
        uid: The job's uid.
        driver_pod: The current driver Pod's name as the reconcile left the status (after
            its own writes), None if the status names none.
        members: The store members whose health it read.
        resource_version: The job's ``resourceVersion`` as the reconcile left it (its last
            write's, or the one it read if it wrote nothing); None if not known.
        driver_pod_version: The ``resourceVersion`` of the driver Pod named by
            ``driver_pod`` as the performed decision saw it; None if not known (no such Pod,
            or the reconcile created or deleted Pods, or named a new driver).
    """

    uid: str
    driver_pod: str | None
    members: tuple[str, ...]
    resource_version: str | None = None
    driver_pod_version: str | None = None


@dataclass(frozen=True)
class Outcome:
    """How a reconcile ended.

    Attributes:
        requeue_after: Decide again after this many seconds even if nothing changes.
        finalizer_removable: The job is being deleted and its cleanup is done.
        gone: The job no longer exists.
        seen: What the reconcile saw, for :func:`read_early` before the next one; None if it
            read no job.
        resource_version: The job's ``resourceVersion`` after the writes performed (set by
            :func:`_perform`, then carried in ``seen``).
    """

    requeue_after: float
    finalizer_removable: bool = False
    gone: bool = False
    seen: Seen | None = None
    resource_version: str | None = None


class EarlyReads:
    """A reconcile's reads that need the job, started before the job is read.

    The Pods' list needs the job's uid, the current driver's read its name in the status, the
    store's health the members its spec names: read after the job, each waited for the job's
    read first (5 to 8 ms for the driver, ``bench/reconcile_latency.py``). Started on what
    the job's previous reconcile saw, they run at the same time as the job's read (and the
    export objects'); the reconcile takes each only if the job, once read, names the same
    uid, driver and members, and reads it again otherwise.

    A driver Pod read a moment before the status it is judged against, not after, is a view
    the executor already handles: the Pod may change right after any read, its change wakes
    the loop again (the daemon clears its wake before the reconcile reads anything), and the
    status writes are locked on the job's ``resourceVersion``. Its name is never reused by a
    later execution (job name and attempt), and the Pods the operator creates or deletes
    are created or deleted by an earlier reconcile of the same loop, before both reads.

    The driver Pod as the watch delivered it stands for its read when the job's loop hands it
    (:mod:`snapshot_operator.reconcile.freshness` says when it may): the view is then no
    older than the one the previous decision was made on, the same guarantee a read gives.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        seen: What the job's previous reconcile saw.
        driver: The driver Pod named in ``seen`` as the watch delivered it, or None.
    """

    def __init__(
        self,
        services: Services,
        namespace: str,
        seen: Seen,
        driver: dict[str, Any] | None = None,
    ) -> None:
        kube = services.kube
        self.seen = seen
        self.driver: Future[dict[str, Any] | None] | None = None
        if seen.driver_pod is not None and _named(driver) == seen.driver_pod:
            self.driver = Future()
            self.driver.set_result(driver)
        elif seen.driver_pod is not None:
            # Submitted slowest first: the threads start their requests one after the other
            # (each holds the interpreter lock to build its request), and a Pod's GET, read
            # from etcd, takes longer than a list from the API server's cache.
            self.driver = READS.submit(kube.read_pod, namespace, seen.driver_pod)
        self.health = READS.submit(
            services.store.read_health, seen.members, services.settings.health_timeout_seconds
        )
        self.pods = READS.submit(kube.list_driver_pods, namespace, seen.uid, cached=True)


def _named(pod: Mapping[str, Any] | None) -> str | None:
    name = ((pod or {}).get("metadata") or {}).get("name")
    return name if isinstance(name, str) else None


def read_early(
    services: Services,
    namespace: str,
    seen: Seen | None,
    driver: dict[str, Any] | None = None,
) -> EarlyReads | None:
    """Starts the reads of a job's next reconcile that the previous one lets it guess.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        seen: What the job's previous reconcile saw.
        driver: The driver Pod ``seen`` names, as the watch delivered it, taken instead of
            its read; None to read it.

    Returns:
        The reads under way, for :func:`reconcile_once`; None without a previous reconcile.
    """
    return EarlyReads(services, namespace, seen, driver) if seen is not None else None


def _create_upgrade_check(
    services: Services, observation: Observation, action: CreateUpgradeCheckPod
) -> None:
    """Creates an upgrade check's Pod; one the API server refuses is answered by the timeout.

    A refused Pod (a quota, say) is logged, not retried here: the decision creates it again
    while it is missing, and refuses the rollout once the check's timeout has passed.
    """
    job = observation.job
    spec = observation.spec
    if not isinstance(spec, SnapshotJobSpec):
        raise TypeError(
            f"Decision checked an invalid spec namespace={job.namespace} name={job.name}"
        )
    members, cluster = store_of(services, None)
    settings = services.settings
    pod = build_upgrade_check_pod(
        job,
        spec,
        action,
        store_address=",".join(members) or None,
        store_cluster_name=cluster,
        store_label=settings.store_label,
        service_account=settings.driver_service_account,
        log_format=settings.log_format,
        image_pull_secrets=settings.job_image_pull_secrets,
        timeout_seconds=settings.decision.upgrade_check_timeout_seconds,
    )
    try:
        if settings.driver_service_account is None:
            services.kube.ensure_driver_identity(job)
        created = services.kube.create_pod(pod)
    except CreateFailed as error:
        log.warning(
            "Upgrade check pod not created namespace=%s name=%s pod=%s error=%s",
            job.namespace,
            job.name,
            action.pod_name,
            error,
        )
        return
    log.info(
        "Created upgrade check pod namespace=%s name=%s pod=%s specHash=%s maps=%s new=%s",
        job.namespace,
        job.name,
        action.pod_name,
        action.spec_hash,
        ",".join(action.map_names),
        created,
    )


def store_of(services: Services, spec: SnapshotJobSpec | None) -> tuple[tuple[str, ...], str]:
    """Returns the members and cluster name of the store a job uses."""
    settings = services.settings
    if spec is not None and spec.hazelcast.address is not None:
        members = tuple(part.strip() for part in spec.hazelcast.address.split(",") if part)
        return members, spec.hazelcast.cluster_name or settings.store_cluster_name
    return settings.store_members, settings.store_cluster_name


def reconcile_once(
    services: Services,
    namespace: str,
    name: str,
    requested_export: str | None = None,
    *,
    job: dict[str, Any] | None = None,
    early: EarlyReads | None = None,
) -> Outcome:
    """Reads the job and its world, decides, and performs the actions.

    Args:
        services: The gateways and settings.
        namespace: The job's namespace.
        name: The job's name.
        requested_export: The export a SnapshotJobExport object asks the job for, taken as if
            the spec asked for it unless the spec asks for an export of its own
            (:func:`snapshot_operator.reconcile.exports.with_requested_export`).
        job: The job as just read (by the export reconcile, after its export objects and
            with nothing written since), or as the watch delivered it once the watch has
            caught up with the last reconcile (:mod:`snapshot_operator.reconcile.freshness`);
            read here if None. A decision that acts beyond the status is made again on a
            fresh read either way.
        early: Reads started with the job's (:func:`read_early`), taken where the job names
            what they guessed.

    Returns:
        When to look again; whether the finalizer may go; what the reconcile saw.

    Raises:
        kubernetes.client.exceptions.ApiException: On API errors other than conflicts.
        snapshot_operator.gateways.StoreOperationFailed: If the store failed.
    """
    started = time.perf_counter()
    try:
        return _reconcile_once(services, namespace, name, requested_export, job, early, started)
    except Exception:
        services.metrics.reconcile_failed(time.perf_counter() - started)
        raise


def _reconcile_once(
    services: Services,
    namespace: str,
    name: str,
    requested_export: str | None,
    job: dict[str, Any] | None,
    early: EarlyReads | None,
    started: float,
) -> Outcome:
    metrics = services.metrics
    raw = job if job is not None else services.kube.read_job(namespace, name)
    if raw is None:
        metrics.job_gone(namespace, name)
        return Outcome(requeue_after=0, gone=True)
    raw, uid, members, cluster = _taken(services, raw, requested_export)
    # Independent reads, made at once: the slowest one sets the time, not their sum.
    health_read = (
        early.health
        if early is not None and early.seen.members == members
        else READS.submit(
            services.store.read_health, members, services.settings.health_timeout_seconds
        )
    )
    pods = _first_look_pods(services, namespace, uid, raw, early)
    health = health_read.result()
    read = time.perf_counter()
    observation = observe(raw, pods, health, services.clock())
    metrics.store_health(cluster, observation.store)
    actions = decide(observation, services.settings.decision)
    if acts_beyond_the_status(actions):
        # Starting, deleting or releasing acts on the other Pods too: decided again from a
        # consistent list of them, and only that decision is performed. The job is read again
        # first: the Pods' writes are not locked on its version, so a view of it that missed
        # a write (the watch's, or one made before the export reconcile wrote) must not lead.
        fresh = services.kube.read_job(namespace, name)
        if fresh is None:
            metrics.job_gone(namespace, name)
            return Outcome(requeue_after=0, gone=True)
        raw, uid, fresh_members, cluster = _taken(services, fresh, requested_export)
        if fresh_members != members:
            members = fresh_members
            health = services.store.read_health(members, services.settings.health_timeout_seconds)
        pods = services.kube.list_driver_pods(namespace, uid)
        observation = observe(raw, pods, health, services.clock())
        actions = decide(observation, services.settings.decision)
    decided = time.perf_counter()
    previous_phase = (raw.get("status") or {}).get("phase")
    # The status as this decision's writes leave it: what the next reconcile guesses from.
    status: dict[str, Any] = dict(raw.get("status") or {})
    try:
        outcome = _perform(services, observation, raw, status, actions)
    except StaleObservation as stale:
        log.info("Deciding again %s", stale)
        # Nothing the decision wanted was written: only the time is recorded.
        metrics.reconciled(
            namespace,
            name,
            seconds=time.perf_counter() - started,
            previous_phase=previous_phase,
            actions=(),
            observation=observation,
        )
        # The job's version is not known: the next reconcile reads it.
        return Outcome(requeue_after=RETRY_STALE_SECONDS, seen=_seen(uid, status, members, None))
    metrics.reconciled(
        namespace,
        name,
        seconds=time.perf_counter() - started,
        previous_phase=previous_phase,
        actions=actions,
        observation=observation,
    )
    if len(actions) > 1:
        # Only reconciles that did something: the timings say where a slow reaction went.
        log.info(
            "Reconciled namespace=%s name=%s actions=%d readMs=%.1f decideMs=%.1f performMs=%.1f",
            namespace,
            name,
            len(actions),
            (read - started) * 1000,
            (decided - read) * 1000,
            (time.perf_counter() - decided) * 1000,
        )
    if services.spark_ui is not None:
        version = reconcile_spark_ui(
            services.spark_ui, services.kube, observation, status, outcome.resource_version
        )
        outcome = dataclasses.replace(outcome, resource_version=version)
    seen = _seen(uid, status, members, outcome.resource_version)
    if seen.driver_pod is not None and not _acts_on_pods(actions):
        seen = dataclasses.replace(seen, driver_pod_version=_pod_version(pods, seen.driver_pod))
    return dataclasses.replace(outcome, seen=seen)


def _taken(
    services: Services, raw: dict[str, Any], requested_export: str | None
) -> tuple[dict[str, Any], str, tuple[str, ...], str]:
    """The job as its decision takes it (with the requested export), its uid and store."""
    if requested_export is not None:
        raw = {
            **raw,
            "spec": with_requested_export(raw.get("spec"), raw.get("status"), requested_export),
        }
    spec = parse_spec(raw.get("spec"))
    members, cluster = store_of(services, spec if isinstance(spec, SnapshotJobSpec) else None)
    return raw, str(raw["metadata"]["uid"]), members, cluster


def _acts_on_pods(actions: Sequence[Action]) -> bool:
    return any(isinstance(action, CreateDriverPod | DeleteDriverPod) for action in actions)


def _completed_export(
    services: Services, namespace: str, name: str | None
) -> tuple[str, int] | None:
    """``(job uid, snapshot id)`` of the completed SnapshotJobExport called ``name``, if any.

    The identity the new driver's restore checks, so that a reused export name never restores
    another export's data (snapshot_protocol.export_names). A consistent list, not the watch
    cache: a stale identity would fail the restore. Only a start from an export pays for it.
    """
    if name is None:
        return None
    for raw in services.kube.list_exports(namespace):
        export = parse_export(raw)
        if export is None or export.name != name:
            continue
        status = export.status
        if (
            status.phase is ExportPhase.COMPLETED
            and status.job_uid is not None
            and status.snapshot_id is not None
        ):
            return status.job_uid, status.snapshot_id
    return None


def _pod_version(pods: Sequence[Mapping[str, Any]], name: str) -> str | None:
    """The version of the named Pod in the list the decision was made on, if it is there."""
    for pod in pods:
        metadata = pod.get("metadata") or {}
        if metadata.get("name") == name:
            version = metadata.get("resourceVersion")
            return version if isinstance(version, str) else None
    return None


def _seen(uid: str, status: Mapping[str, Any], members: Sequence[str], version: str | None) -> Seen:
    driver = (status.get("execution") or {}).get("driverPod")
    return Seen(uid, driver if isinstance(driver, str) else None, tuple(members), version)


def _first_look_pods(
    services: Services,
    namespace: str,
    uid: str,
    raw: Mapping[str, Any],
    early: EarlyReads | None,
) -> list[dict[str, Any]]:
    """The job's Pods for a first decision: the current driver as it is, the others cached.

    A consistent list is answered from the API server's watch cache once that cache has
    caught up with etcd (``ConsistentListFromCache``, GA in Kubernetes 1.34), which it learns
    from a progress request sent every 100 ms while a list waits: 0 to 100 ms per list, most
    of the 98 ms between a suspend and its termination request (``bench/reconcile_latency.py``).
    The current driver Pod is read by name instead (a GET is consistent and quick), and the
    others come from the watch cache: a decision on this view is performed only if it writes
    no more than the status (see :func:`acts_beyond_the_status`), which the other Pods cannot
    make wrong: they only hold back a start or ask for a deletion, which are decided again.
    Both reads are taken from ``early`` where it guessed the job's uid and driver right.
    """
    kube = services.kube
    listed = (
        early.pods
        if early is not None and early.seen.uid == uid
        else READS.submit(kube.list_driver_pods, namespace, uid, cached=True)
    )
    current = ((raw.get("status") or {}).get("execution") or {}).get("driverPod")
    if not isinstance(current, str):
        pod = None
    elif early is not None and early.driver is not None and early.seen.driver_pod == current:
        pod = early.driver.result()
    else:
        pod = kube.read_pod(namespace, current)
    cached = listed.result()
    if not isinstance(current, str):
        return cached
    others = [other for other in cached if other["metadata"]["name"] != current]
    if pod is not None and (pod["metadata"].get("labels") or {}).get(LABEL_JOB_UID) == uid:
        others.append(pod)
    return others


def _perform(
    services: Services,
    observation: Observation,
    raw: dict[str, Any],
    status: dict[str, Any],
    actions: Sequence[Action],
) -> Outcome:
    """Performs the actions in order; ``status`` follows the writes (for writes that extend
    a list, and for the caller)."""
    job = observation.job
    kube = services.kube
    version = str(raw["metadata"]["resourceVersion"])
    requeue: float = services.settings.decision.resync_seconds
    removable = False
    context = f"namespace={job.namespace} name={job.name}"
    index = 0
    while index < len(actions):
        writes = status_writes(actions, index, services.clock())
        if writes:
            # Consecutive status writes that touch different fields go in one request (one
            # round trip less on the way to a termination request), applied as one.
            patch = {key: value for _, part in writes for key, value in part.items()}
            version = kube.patch_status(job.namespace, job.name, version, patch)
            status.update(patch)
            for written, part in writes:
                if isinstance(written, PatchStatus):
                    log.info("Patched status %s fields=%s", context, ",".join(sorted(part)))
                else:
                    log.info("Requested from the driver %s request=%s", context, written)
            index += len(writes)
            continue
        action = actions[index]
        index += 1
        match action:
            case CreateDriverPod():
                spec = observation.spec
                if not isinstance(spec, SnapshotJobSpec):
                    raise TypeError(f"Decision created a driver for an invalid spec {context}")
                members, cluster = store_of(services, None)
                pod = build_driver_pod(
                    job,
                    spec,
                    action,
                    store_address=",".join(members) or None,
                    store_cluster_name=cluster,
                    store_label=services.settings.store_label,
                    service_account=services.settings.driver_service_account,
                    default_durable_storage=services.settings.durable_storage,
                    log_format=services.settings.log_format,
                    image_pull_secrets=services.settings.job_image_pull_secrets,
                    initial_export=_completed_export(
                        services, job.namespace, action.initial_snapshot_name
                    ),
                )
                try:
                    if services.settings.driver_service_account is None:
                        kube.ensure_driver_identity(job)
                    created = kube.create_pod(pod)
                except CreateFailed as error:
                    _start_failed(services, observation, version, status, action, error)
                    # The rest (the start's Events) did not happen; the decision reports it.
                    # The failure was written to the status: its version is not kept here.
                    return Outcome(requeue_after=RETRY_STALE_SECONDS)
                if created:
                    services.metrics.execution_started()
                log.info(
                    "Created driver pod %s pod=%s executionId=%s new=%s",
                    context,
                    action.pod_name,
                    action.execution_id,
                    created,
                )
            case DeleteDriverPod(pod_name=pod_name, at_once=at_once):
                existed = kube.delete_pod(job.namespace, pod_name, at_once=at_once)
                log.info(
                    "Deleted driver pod %s pod=%s existed=%s atOnce=%s",
                    context,
                    pod_name,
                    existed,
                    at_once,
                )
            case CreateUpgradeCheckPod():
                _create_upgrade_check(services, observation, action)
            case DeleteUpgradeCheckPod(pod_name=pod_name):
                existed = kube.delete_pod(job.namespace, pod_name)
                log.info(
                    "Deleted upgrade check pod %s pod=%s existed=%s", context, pod_name, existed
                )
            case CopySnapshotToExport():
                version = _copy(services, observation, version, status, action)
            case DeleteSnapshotMaps(map_names=map_names):
                spec = observation.spec
                members, cluster = store_of(
                    services, spec if isinstance(spec, SnapshotJobSpec) else None
                )
                services.store.destroy_maps(members, cluster, map_names)
                log.info("Destroyed snapshot maps %s maps=%s", context, ",".join(map_names))
            case DeleteDurableCopies():
                event = delete_job_copies(
                    services.durable, services.settings.durable_storage, action
                )
                log.info(
                    "Disposed of a deleted job's durable copies %s map=%s outcome=%s",
                    context,
                    action.map_name,
                    event.reason if event else "none",
                )
                if event is not None:
                    kube.emit_job_event(job, event)
            case EmitEvent():
                kube.emit_job_event(job, action)
            case KeepExport():
                # Imported here: exports_executing imports this module.
                from snapshot_operator.exports_executing import keep_export

                keep_export(services, job, action)
            case RemoveFinalizer():
                removable = True
            case Requeue(after_seconds=after):
                requeue = after
    return Outcome(requeue_after=requeue, finalizer_removable=removable, resource_version=version)


def _copy(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CopySnapshotToExport,
) -> str:
    """Copies the restore point to the export, then records the export in the status.

    A copy the store failed or that did not validate is recorded in ``status.exportFailure``
    (attempts counted per export name) instead of raised: the decision retries it with backoff
    and gives up after a few attempts, which it can only do if it sees the outcome.
    """
    job = observation.job
    spec = observation.spec
    members, cluster = store_of(services, spec if isinstance(spec, SnapshotJobSpec) else None)
    try:
        copied = services.store.copy_snapshot(
            members,
            cluster,
            source_map=action.source_map,
            target_map=action.export_map,
            snapshot_id=action.snapshot_id,
        )
    except StoreOperationFailed as error:
        return _copy_failed(services, observation, version, status, action, error)
    exported = ExportedSnapshot(
        name=action.export_name,
        snapshot_id=copied.snapshot_id,
        num_bytes=copied.num_bytes,
        created_at=services.clock(),
        terminal=False,
        durable_location=_copy_to_durable(services, observation, members, cluster, action),
    )
    kept = [
        entry
        for entry in status.get("exportedSnapshots") or ()
        if entry.get("name") != action.export_name
    ]
    patch = {"exportedSnapshots": [*kept, exported.to_json()]}
    version = services.kube.patch_status(job.namespace, job.name, version, patch)
    status.update(patch)
    log.info(
        "Copied snapshot to export namespace=%s name=%s export=%s snapshotId=%s numBytes=%s",
        job.namespace,
        job.name,
        action.export_name,
        copied.snapshot_id,
        copied.num_bytes,
    )
    return version


def _copy_to_durable(
    services: Services,
    observation: Observation,
    members: Sequence[str],
    cluster: str,
    action: CopySnapshotToExport,
) -> str | None:
    """Copies an export the operator made on to object storage, as a driver does its own.

    Only to the installation's storage, the one the operator has credentials for: a job with
    storage of its own gets no copy of an export taken while suspended (logged). A failed copy
    leaves the export without ``durableLocation``, as a driver's does; it is logged.
    """
    durable = services.durable
    spec = observation.spec
    if durable is None or not isinstance(spec, SnapshotJobSpec):
        return None
    context = f"namespace={observation.job.namespace} name={observation.job.name}"
    if spec.durable_storage is not None and _place(spec.durable_storage) != _place(durable.storage):
        log.warning(
            "Export has no durable copy %s export=%s reason=JobsOwnStorage bucket=%s",
            context,
            action.export_name,
            spec.durable_storage.bucket,
        )
        return None
    try:
        location = durable.copy_export(members, cluster, action.export_map, action.snapshot_id)
    except StoreOperationFailed as error:
        log.warning(
            "Durable copy of the export failed %s export=%s error=%s: %s",
            context,
            action.export_name,
            error.reason,
            error,
        )
        return None
    log.info(
        "Copied export to durable storage %s export=%s location=%s",
        context,
        action.export_name,
        location,
    )
    return location


def _place(storage: DurableStorageSpec) -> tuple[str, str, str | None]:
    """Where copies go: what two storage settings must share to be the same bucket and prefix
    (the copy interval and the Secret's name may differ)."""
    return storage.bucket, storage.prefix, storage.endpoint


def _copy_failed(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CopySnapshotToExport,
    error: StoreOperationFailed,
) -> str:
    """Records a failed copy in ``status.exportFailure``, counting attempts per export."""
    job = observation.job
    previous = status.get("exportFailure") or {}
    attempts = (
        int(previous.get("attempts", 0)) + 1 if previous.get("name") == action.export_name else 1
    )
    failure = ExportFailureStatus(
        name=action.export_name,
        attempts=attempts,
        message=f"{error.reason}: {error}",
        time=services.clock(),
    )
    patch = {"exportFailure": failure.to_json()}
    version = services.kube.patch_status(job.namespace, job.name, version, patch)
    status.update(patch)
    log.warning(
        "Copy to export failed namespace=%s name=%s export=%s attempts=%d error=%s",
        job.namespace,
        job.name,
        action.export_name,
        attempts,
        error,
    )
    return version


def _start_failed(
    services: Services,
    observation: Observation,
    version: str,
    status: dict[str, Any],
    action: CreateDriverPod,
    error: CreateFailed,
) -> str:
    """Records a refused create in ``status.startFailure``, counting attempts per execution.

    Recorded instead of raised, for the same reason as a failed export copy: the decision can
    back off, report the failure once and give up only if it sees it. Raised, it would leave a
    STARTING execution without a Pod, which the next decision cannot tell from a lost Pod.
    """
    job = observation.job
    previous = status.get("startFailure") or {}
    attempts = (
        int(previous.get("attempts", 0)) + 1
        if previous.get("executionId") == action.execution_id
        else 1
    )
    failure = StartFailureStatus(
        execution_id=action.execution_id,
        object=f"{error.kind}/{error.name}",
        attempts=attempts,
        message=f"status={error.code} {error.message}",
        time=services.clock(),
    )
    patch = {"startFailure": failure.to_json()}
    version = services.kube.patch_status(job.namespace, job.name, version, patch)
    status.update(patch)
    log.warning(
        "Create failed namespace=%s name=%s object=%s executionId=%s attempts=%d error=%s",
        job.namespace,
        job.name,
        failure.object,
        action.execution_id,
        attempts,
        failure.message,
    )
    return version
