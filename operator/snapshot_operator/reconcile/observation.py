"""What the decision function sees: one consistent observation of a SnapshotJob and its world.

The kopf layer gathers it (the object, a fresh list of the job's driver Pods, the store's health
endpoint, the clock) and the decision function turns it into actions. Keeping the observation a
plain value is what makes every decision testable without an API server: tests build
observations, the operator builds them from the cluster.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from datetime import datetime

from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus


class PodPhase(enum.StrEnum):
    """The driver Pod's ``status.phase``."""

    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"

    @property
    def is_terminal(self) -> bool:
        """Whether the Pod's containers have stopped for good."""
        return self in (PodPhase.SUCCEEDED, PodPhase.FAILED)


@dataclass(frozen=True)
class PodProblem:
    """Why a Pod cannot start, as Kubernetes reports it.

    Attributes:
        reason: The Kubernetes reason, e.g. ``Unschedulable``, ``ImagePullBackOff`` or
            ``OOMKilled``.
        message: The scheduler's or kubelet's message, on one line and cut to fit an Event.
        scheduling: Whether the Pod cannot be scheduled (rather than its container started).
        image: The image the kubelet cannot pull (``ErrImagePull``, ``ImagePullBackOff``),
            as the container names it; None for other problems.
        pull_secrets: The names of the Pod's ``imagePullSecrets`` when its image cannot be
            pulled: a wrong or missing one is the usual cause of a ``401 Unauthorized``.
    """

    reason: str
    message: str
    scheduling: bool = False
    image: str | None = None
    pull_secrets: tuple[str, ...] = ()


@dataclass(frozen=True)
class DriverPod:
    """A driver Pod of the job, as listed by its job label.

    Attributes:
        name: The Pod's name.
        execution_id: The execution the Pod runs (its label).
        phase: The Pod's phase.
        exit_code: The driver container's exit code once it has terminated, else None.
        deleting: Whether the Pod has a deletion timestamp (its containers may still run).
        termination_message: What the driver wrote to its termination message file
            (``/dev/termination-log``) before it exited, e.g. which snapshot is corrupted, on
            one line and cut to a length that fits an Event; with ``FallbackToLogsOnError``
            the last lines of its log when it wrote none; else None.
        termination_reason: The terminated container's reason when it says more than
            ``Error``, e.g. ``OOMKilled``; else None.
        problem: Why the Pod or its driver container cannot start (unschedulable, image pull,
            container config), while it has not terminated; else None.
        node_lost_since: Since when the node controller has reported the running Pod not
            Ready: its node stopped reporting (a driver Pod has no readiness probe, so
            nothing else turns it not Ready while it runs); None while it is Ready.
    """

    name: str
    execution_id: str
    phase: PodPhase
    exit_code: int | None = None
    deleting: bool = False
    termination_message: str | None = None
    termination_reason: str | None = None
    problem: PodProblem | None = None
    node_lost_since: datetime | None = None

    @property
    def may_run(self) -> bool:
        """Whether the Pod's driver may still be running: another driver must not start."""
        return not self.phase.is_terminal


@dataclass(frozen=True)
class ExecutorPod:
    """A Spark executor Pod of the job (labelled with its uid and component ``executor``).

    Attributes:
        name: The Pod's name.
        driver_pod: The driver Pod that owns it (Spark sets the owner reference); None if it
            names none.
        problem: Why it cannot start or stopped with an error; None while all is well.
    """

    name: str
    driver_pod: str | None
    problem: PodProblem | None = None


@dataclass(frozen=True)
class UpgradeCheckPod:
    """The Pod of an upgrade check (labelled with the job's uid and component
    ``upgrade-check``): ``snapshot validate --pipeline`` in the changed spec's image.

    Attributes:
        name: The Pod's name.
        spec_hash: The execution fingerprint of the spec it checks.
        phase: The Pod's phase.
        exit_code: Its container's exit code once it ended: 0 compatible, 78 incompatible.
        message: What the check printed last (its termination message), if anything.
        deleting: Whether the Pod has a deletion timestamp.
    """

    name: str
    spec_hash: str
    phase: PodPhase
    exit_code: int | None = None
    message: str | None = None
    deleting: bool = False


@dataclass(frozen=True)
class StoreHealth:
    """The Hazelcast cluster's health endpoint, as the operator last read it.

    Attributes:
        cluster_safe: No partition migrates and every backup is in sync.
        member_count: Members in the cluster.
    """

    cluster_safe: bool
    member_count: int


@dataclass(frozen=True)
class InvalidSpec:
    """A spec the API models reject: stored before a rule existed, or written around the CRD.

    Attributes:
        message: What is wrong, from the models' validation.
    """

    message: str


@dataclass(frozen=True)
class JobRef:
    """Identifies the SnapshotJob."""

    namespace: str
    name: str
    uid: str


@dataclass(frozen=True)
class Observation:
    """Everything one decision is based on.

    Attributes:
        job: The SnapshotJob.
        generation: Its ``metadata.generation``.
        spec: Its spec, or why the spec is invalid.
        status: Its status as read together with the spec.
        pods: Every driver Pod of the job.
        store: The store's health; None when the health endpoint could not be read.
        now: The current time (timezone-aware).
        deleting: Whether the SnapshotJob has a deletion timestamp.
        executors: Every Spark executor Pod of the job.
        checks: Every upgrade check Pod of the job.
    """

    job: JobRef
    generation: int
    spec: SnapshotJobSpec | InvalidSpec
    status: SnapshotJobStatus
    now: datetime
    pods: tuple[DriverPod, ...] = ()
    store: StoreHealth | None = None
    deleting: bool = False
    executors: tuple[ExecutorPod, ...] = ()
    checks: tuple[UpgradeCheckPod, ...] = ()


@dataclass(frozen=True)
class DecisionSettings:
    """Operator-wide timings of the decision function.

    Attributes:
        graceful_timeout_seconds: A graceful termination or export-only snapshot not done by
            then is made forceful (or asked again, for an export).
        store_retry_seconds: How soon to look again while the store holds back a start.
        resync_seconds: How soon to look again when nothing is due.
        stale_snapshot_intervals: SnapshotHealthy turns False when the restore point of a
            running job is older than this many snapshot intervals (plus the graceful slack).
        stale_snapshot_slack_seconds: Added to the staleness bound, for long snapshots.
        export_copy_attempts: Failed copies to an export (while suspended) before the export
            is given up; a new export name starts again.
        export_retry_seconds: Delay before copying again after the first failed copy; it
            doubles with every further failure.
        forced_restarts_degraded: Forced restarts in a row (exits 75 and 143, no new snapshot
            in between) from which the job is Degraded ``RepeatedForcedRestarts``.
        forced_restart_limit: Forced restarts in a row that restart at once; each further one
            counts as a failure, through the restart policy, so that a loop of them ends.
        driver_lost_seconds: How long a running driver Pod's node may stop reporting before
            the operator deletes the Pod at once and starts a new execution elsewhere.
        start_attempts: Failed creations of a starting execution's objects (the API server
            refused them) before the job is FAILED; the delay between them is the spec's
            restart backoff.
        pipeline_start_timeout_seconds: An execution whose driver has not reported a running
            pipeline by then (its Pods unschedulable, its image or executors not starting) is
            ended and counted as a failure, so the restart policy bounds it.
        upgrade_check_timeout_seconds: An upgrade check that has not answered by then (its
            Pod unschedulable, its image not pulled) refuses the rollout, which a further
            spec change tries again.
    """

    graceful_timeout_seconds: int = 300
    store_retry_seconds: int = 10
    resync_seconds: int = 60
    stale_snapshot_intervals: int = 3
    stale_snapshot_slack_seconds: int = field(default=60)
    export_copy_attempts: int = 3
    export_retry_seconds: int = 10
    start_attempts: int = 6
    driver_lost_seconds: int = 60
    forced_restarts_degraded: int = 3
    forced_restart_limit: int = 10
    pipeline_start_timeout_seconds: int = 300
    upgrade_check_timeout_seconds: int = 600
