"""``SnapshotJob.spec``: what the user asks for (``docs/reference/api.md``, "Spec").

Every field is declarative, so GitOps tools can own the whole spec: there are no nonces or
imperative triggers (users of the Flink Kubernetes operator complain that its restart and
savepoint nonces are imperative and drift under GitOps). A new ``exportSnapshot.name`` asks for
an export, ``suspend`` flips between running and suspended, and any other change rolls out
according to ``upgradeMode``. The fields that decide what an execution runs are fingerprinted
(:meth:`SnapshotJobSpec.execution_fingerprint`), so the operator can tell an upgrade from a
request it serves without restarting the job.
"""

from __future__ import annotations

import enum
import hashlib
import json
from typing import Annotated, Any, ClassVar

from pydantic import ConfigDict, Field, field_validator

from snapshotjob_contract.base import (
    DNS_LABEL_MAX_LENGTH,
    DNS_LABEL_PATTERN,
    SECRET_KEY_PATTERN,
    ApiModel,
    CrossFieldRule,
)
from snapshotjob_contract.kafka import KafkaSpec
from snapshotjob_contract.pod_template import template_problems
from snapshotjob_contract.record import MAX_BACKUP_COUNT
from snapshotjob_contract.spark_ui import SparkUiSpec

DEFAULT_STATE_PARTITIONS = 8
"""``spec.statePartitions`` when omitted; the runtime's own default, so jobs created before the
field existed keep their partitioning."""

DEFAULT_MAX_DELTAS = 16
"""``spec.snapshotChains.maxDeltas`` when omitted, and the snapshot protocol's default."""
DEFAULT_MAX_DELTA_PERCENT = 50
"""``spec.snapshotChains.maxDeltaPercent`` when omitted, and the snapshot protocol's default."""

SPARK_MEMORY_PATTERN = r"^[1-9][0-9]*[kKmMgGtT]?$"
"""Spark's memory strings as ``spark.driver.memory`` takes them, e.g. ``512m`` or ``2g``."""

CPU_QUANTITY_PATTERN = r"^([1-9][0-9]*m|[1-9][0-9]*(\.[0-9]+)?|0\.[0-9]*[1-9][0-9]*)$"
"""A positive Kubernetes CPU quantity: whole or decimal cores (`1`, `0.5`) or millicores
(`250m`)."""


def _unset(value: object) -> bool:
    """Whether an optional field is left out of dumps, so adding it changed no fingerprint."""
    return value is None


def _checked_template(value: dict[str, Any] | None) -> dict[str, Any] | None:
    if value is not None:
        problems = template_problems(value)
        if problems:
            raise ValueError("; ".join(problems))
    return value


class ImagePullPolicy(enum.StrEnum):
    """When the kubelet pulls the runtime image, as for any container."""

    ALWAYS = "Always"
    IF_NOT_PRESENT = "IfNotPresent"
    NEVER = "Never"


class ProcessingGuarantee(enum.StrEnum):
    """Jet's processing guarantees (docs/concepts/protocol.md, "Processing guarantees").

    The operator checks the spec against it and the runtime's sources and sinks act on it.
    """

    EXACTLY_ONCE = "EXACTLY_ONCE"
    """Transactional sinks publish the output since the last snapshot in the snapshot's second
    phase; a replay after a restore re-creates exactly the unpublished output."""
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    """Sinks write every epoch; a replay after a restore writes some output again."""
    NONE = "NONE"
    """No snapshots at all: a restarted job starts from the beginning without state."""


class UpgradeMode(enum.StrEnum):
    """How a change of the execution-relevant spec rolls out (Flink's upgradeMode)."""

    SNAPSHOT = "snapshot"
    """Take a terminal snapshot (RESTART_GRACEFUL), then start the new spec from it."""
    LAST_SNAPSHOT = "last-snapshot"
    """Stop at once (RESTART_FORCEFUL) and start the new spec from the last good snapshot."""
    STATELESS = "stateless"
    """Stop at once and start the new spec as a new job would, without the job's own state."""


class PipelineSpec(ApiModel):
    """The user's pipeline code, inside the runtime image."""

    model_config = ConfigDict(extra="forbid")

    module: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
    """Dotted name of a Python module in the image with a `define_pipeline(p)` function."""
    args: dict[str, Any] = Field(default_factory=dict)
    """Free-form arguments handed to `define_pipeline` as `p.args`."""


class DriverResources(ApiModel):
    """Size of the Spark driver, which is also the job's snapshot coordinator."""

    model_config = ConfigDict(extra="forbid")

    cores: int = Field(default=1, ge=1, le=64)
    """CPU cores of the driver (`spark.driver.cores`)."""
    memory: str = Field(default="1g", pattern=SPARK_MEMORY_PATTERN)
    """Heap of the driver in Spark's notation, e.g. `512m` or `2g` (`spark.driver.memory`)."""
    cores_request: str | None = Field(default=None, pattern=CPU_QUANTITY_PATTERN, exclude_if=_unset)
    """CPU request of the driver container as a Kubernetes quantity, e.g. `500m`; `cores` when
    omitted. Spark still runs `cores` task threads on the driver."""
    memory_overhead: str | None = Field(
        default=None, pattern=SPARK_MEMORY_PATTERN, exclude_if=_unset
    )
    """Memory of the driver container beyond the heap, in Spark's notation, e.g. `1g`: the
    pipeline's Python process (its own code, pandas, Arrow batches) lives there too. The
    container's memory request and limit are the heap plus this; when omitted, Spark's default
    overhead: a tenth of the heap, at least 384 MiB."""
    pod_template: dict[str, Any] | None = Field(default=None, exclude_if=_unset)
    """The driver Pod's template, over `spec.podTemplate`. A partial Pod as described there;
    a driver with a service account of its own needs the operator's driver Role bound to it."""

    _check_template = field_validator("pod_template")(_checked_template)


class ExecutorResources(ApiModel):
    """Number and size of the Spark executors."""

    model_config = ConfigDict(extra="forbid")

    instances: int = Field(default=1, ge=1, le=1000)
    """How many executors run (`spark.executor.instances`)."""
    cores: int = Field(default=1, ge=1, le=64)
    """CPU cores of each executor (`spark.executor.cores`)."""
    memory: str = Field(default="1g", pattern=SPARK_MEMORY_PATTERN)
    """Heap of each executor in Spark's notation, e.g. `2g` (`spark.executor.memory`)."""
    cores_request: str | None = Field(default=None, pattern=CPU_QUANTITY_PATTERN, exclude_if=_unset)
    """CPU request of each executor Pod as a Kubernetes quantity, e.g. `500m`
    (`spark.kubernetes.executor.request.cores`); `cores` when omitted. Spark still runs
    `cores` tasks at once on each executor."""
    memory_overhead: str | None = Field(
        default=None, pattern=SPARK_MEMORY_PATTERN, exclude_if=_unset
    )
    """Memory of each executor Pod beyond the heap, in Spark's notation, e.g. `384m`
    (`spark.executor.memoryOverhead`); Spark's default when omitted: a tenth of the heap, at
    least 384 MiB."""
    pod_template: dict[str, Any] | None = Field(default=None, exclude_if=_unset)
    """The executor Pods' template, over `spec.podTemplate`. A partial Pod as described
    there."""

    _check_template = field_validator("pod_template")(_checked_template)


class SparkSpec(ApiModel):
    """How the pipeline runs on Spark."""

    model_config = ConfigDict(extra="forbid")

    master: str = Field(default="k8s", min_length=1)
    """Spark master: `k8s` runs executors as Pods of this cluster; `local[N]` runs in the driver."""
    conf: dict[str, str] = Field(default_factory=dict)
    """Extra Spark configuration, e.g. `spark.sql.shuffle.partitions: "8"`."""
    driver: DriverResources = Field(default_factory=DriverResources)
    """The driver Pod's Spark resources."""
    executor: ExecutorResources = Field(default_factory=ExecutorResources)
    """The executor Pods' Spark resources."""


class ExportSnapshotSpec(ApiModel):
    """A request to export a named snapshot; a name the job has not exported yet triggers it."""

    model_config = ConfigDict(extra="forbid")

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="!self.cancelJob || has(self.name)",
            message="exportSnapshot.cancelJob needs exportSnapshot.name: the terminal snapshot "
            "is exported under that name",
            holds=lambda export: not export.cancel_job or export.name is not None,
        ),
    )

    name: str | None = Field(
        default=None, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN
    )
    """Name of the exported snapshot (a DNS-1123 label); it is kept after the job is deleted."""
    cancel_job: bool = False
    """Take the export as a terminal snapshot and cancel the job (CANCEL_GRACEFUL); otherwise
    the export is export-only and the job keeps running."""


class ExportPolicySpec(ApiModel):
    """Periodic exports, and how long the exports the operator creates for the job are kept.

    Retention applies to the SnapshotJobExport objects of origin ExportSnapshot and Periodic
    that completed; never to those users create, nor to an export some SnapshotJob names
    (initialSnapshotName, exportSnapshot.name, its restore point) or that is being taken.
    """

    model_config = ConfigDict(extra="forbid")

    periodic_seconds: int | None = Field(default=None, ge=60, exclude_if=_unset)
    """Take an export-only snapshot this often while the job runs, as a SnapshotJobExport of
    origin Periodic named `<job>-<unix time>`; unset for none."""
    max_count: int | None = Field(default=None, ge=1, exclude_if=_unset)
    """Keep at most this many completed exports of origin ExportSnapshot and Periodic (the
    newest); unset for no limit."""
    max_age_seconds: int | None = Field(default=None, ge=60, exclude_if=_unset)
    """Delete completed exports of origin ExportSnapshot and Periodic older than this; unset
    for no limit."""
    dispose_on_delete: bool = True
    """The spec.disposeOnDelete of the SnapshotJobExport objects the operator creates: whether
    retiring one destroys its data too."""


class RestartPolicy(ApiModel):
    """How failed executions are restarted: exponential backoff, then FAILED."""

    model_config = ConfigDict(extra="forbid")

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="self.maxBackoffSeconds >= self.backoffSeconds",
            message="restartPolicy.maxBackoffSeconds must be at least backoffSeconds",
            holds=lambda policy: policy.max_backoff_seconds >= policy.backoff_seconds,
        ),
    )

    max_restarts: int = Field(default=10, ge=0)
    """Failed executions restarted in a row before the job becomes FAILED; the count resets
    once an execution has run for maxBackoffSeconds and taken a snapshot of its own (a stalled
    execution does not reset it)."""
    backoff_seconds: int = Field(default=10, ge=1)
    """Delay before the first restart; it doubles with every further failure."""
    max_backoff_seconds: int = Field(default=300, ge=1)
    """Upper bound of the delay between restarts."""

    def backoff(self, failures: int) -> int:
        """Returns the delay before restarting after ``failures`` failures in a row (>= 1)."""
        # Clamp the exponent so a large count cannot build a huge integer.
        doublings = min(max(failures - 1, 0), 32)
        return min(self.backoff_seconds << doublings, self.max_backoff_seconds)


class StallDetectionSpec(ApiModel):
    """When a driver that lives but makes no progress is restarted, and how long its steps may
    take.

    A stall is a running execution that takes no snapshot: a wedged sink call, a hung epoch, a
    driver cut off from the API server. The operator reports it (``SnapshotHealthy=False
    SnapshotStale`` and an Event) once the restore point is older than the staleness bound,
    then ends the execution once no snapshot has been taken for ``intervals`` snapshot
    intervals (at least ``minSeconds``) since the later of the last snapshot and the start of
    the execution's pipeline; the restart goes through ``restartPolicy``, so a job that keeps
    stalling ends FAILED. The driver bounds its own steps: an epoch or a sink call that runs
    longer than its timeout ends the execution at once (exit code 70, ``STALLED``).
    """

    model_config = ConfigDict(extra="forbid")

    enabled: bool = True
    """Whether the operator restarts a stalled execution; the driver's timeouts hold either
    way."""
    intervals: int = Field(default=6, ge=2, le=1000)
    """Snapshot intervals without a new snapshot after which a running execution is ended."""
    min_seconds: int = Field(default=300, ge=10)
    """The stall bound is never shorter than this, so long snapshots and slow starts pass."""
    epoch_timeout_seconds: int = Field(default=900, ge=10)
    """An epoch (reading, transforming and writing one batch) that runs longer ends the
    execution."""
    sink_timeout_seconds: int = Field(default=300, ge=10)
    """A sink call of a snapshot (prepare, commit, abort) that runs longer ends the
    execution."""

    def bound_seconds(self, snapshot_interval_seconds: int) -> int:
        """The time without a snapshot after which a running execution is ended."""
        return max(self.intervals * snapshot_interval_seconds, self.min_seconds)


class DeletionPolicy(enum.StrEnum):
    """What deleting a SnapshotJob does with the job's state."""

    EXPORT = "Export"
    """Take a terminal export (a SnapshotJobExport that outlives the job, with a durable copy
    where durable storage is configured), then destroy the job's own snapshot maps."""
    DESTROY = "Destroy"
    """Cancel without a snapshot and destroy the job's own snapshot maps at once; only exports
    taken before are kept."""


class ExpiredOffsetsPolicy(enum.StrEnum):
    """What a restore does when a Kafka source's restored offset was deleted by retention."""

    FAIL = "Fail"
    """Stop (exit code 71, ``SOURCE_DATA_LOST``), naming the partitions and how many records
    are gone; the job stays FAILED until the spec changes."""
    EARLIEST = "Earliest"
    """Go on from each such partition's earliest retained offset, logging and reporting what
    was skipped."""


class HazelcastSpec(ApiModel):
    """The snapshot store: the installation's Hazelcast cluster unless an address is given."""

    model_config = ConfigDict(extra="forbid")

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="has(self.address) || !has(self.clusterName)",
            message="hazelcast.clusterName names an external cluster, so it needs "
            "hazelcast.address",
            holds=lambda store: store.address is not None or store.cluster_name is None,
        ),
    )

    address: str | None = Field(default=None, min_length=1)
    """Comma-separated `host:port` members of an external cluster; empty for the
    installation's own cluster."""
    cluster_name: str | None = Field(default=None, min_length=1)
    """Cluster name of the external cluster."""
    backup_count: int = Field(default=1, ge=1, le=MAX_BACKUP_COUNT)
    """Synchronous backups of this job's automatic snapshot maps, which carry it in their names
    (`__sj.b<backupCount>.snapshot.<uid>.<0|1>`, configured by the members' `__sj.b<N>.*`
    patterns); a snapshot survives this many members failing at once. The store needs more
    members than backups. Exports always get 6, whichever job wrote them."""


S3_BUCKET_PATTERN = r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$"
"""An S3 bucket name as AWS and S3-compatible servers accept it: 3 to 63 lower-case letters,
digits, dots and hyphens, starting and ending with a letter or digit."""

S3_PREFIX_PATTERN = r"^([A-Za-z0-9!_.*'()-]+(/[A-Za-z0-9!_.*'()-]+)*)?$"
"""A key prefix of path segments of S3's safe characters, without a leading or trailing ``/``
or an empty segment, so every object key it makes is unambiguous."""


class DurableStorageSpec(ApiModel):
    """Object storage, reached through the S3 API, that keeps durable copies of snapshots.

    Every export is copied there once it validates, and `initialSnapshotName` finds an export
    there when the store no longer has it (docs/guides/durable-snapshots.md).
    """

    model_config = ConfigDict(extra="forbid")

    bucket: str = Field(pattern=S3_BUCKET_PATTERN)
    """The bucket; it must exist, and the credentials must be allowed to read, write, list and
    delete objects in it."""
    prefix: str = Field(default="", max_length=512, pattern=S3_PREFIX_PATTERN)
    """Where under the bucket this job's copies are kept, e.g. `team-a/snapshots`; empty for the
    bucket's root."""
    endpoint: str | None = Field(
        default=None, pattern=r"^https?://[^\s/]+(/.*)?$", exclude_if=_unset
    )
    """The S3 API's URL, e.g. `http://minio.storage:9000`; empty for AWS S3 itself."""
    region: str = Field(default="us-east-1", min_length=1)
    """The region requests are signed for."""
    credentials_secret: str | None = Field(
        default=None, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN, exclude_if=_unset
    )
    """A Secret in the job's namespace with the keys `accessKeyId` and `secretAccessKey`; unset
    for the AWS SDK's default credential chain (web identity such as IRSA, EKS Pod Identity,
    `AWS_*` variables from the pod template, the node's role)."""
    snapshot_copy_interval_seconds: int | None = Field(default=None, ge=10, exclude_if=_unset)
    """Copy the automatic snapshot there at most this often (the first of every execution at
    once), so that the job survives the loss of the whole store; none when unset."""


SecretKey = Annotated[
    str, Field(max_length=253, pattern=SECRET_KEY_PATTERN, description="A key of the Secret.")
]


class SnapshotSigningSpec(ApiModel):
    """Sign every snapshot's validation record with a key only the job's Pods hold, and
    restore only snapshots that verify (docs/operations/security.md, "Signed snapshots").

    The record lists every chunk's size and checksum, so a chunk rewritten with its checksum
    recomputed is refused too. The keys are values of a Secret in the job's namespace (at
    least 32 bytes each, e.g. `openssl rand -base64 48`); the operator never reads them, it
    hands them to the driver Pod by reference."""

    model_config = ConfigDict(extra="forbid")

    secret_name: str = Field(max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN)
    """The Secret holding the keys, in the job's namespace."""
    key_id: SecretKey
    """The Secret's key that signs new snapshots; its id is written into each record."""
    verify_key_ids: list[SecretKey] = Field(default_factory=list, max_length=8)
    """Older keys of the same Secret whose snapshots a restore still accepts: a rotation adds
    the new key, signs with it, and keeps the old one here until no snapshot or export
    signed with it is needed."""
    accept_unsigned: bool = False
    """Restore a snapshot without a MAC (taken before signing was turned on); set it for the
    first execution after turning signing on, then remove it."""


class DurableRestoreSpec(ApiModel):
    """The user's consent to restore an older durable copy after the store lost the restore
    point, writing again the output committed since; it applies to exactly this pair of ids."""

    model_config = ConfigDict(extra="forbid")

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="self.acceptSnapshotId < self.insteadOfSnapshotId",
            message="durableRestore.acceptSnapshotId must be older (lower) than "
            "insteadOfSnapshotId: a copy of the lost snapshot itself needs no consent",
            holds=lambda restore: restore.accept_snapshot_id < restore.instead_of_snapshot_id,
        ),
    )

    accept_snapshot_id: int = Field(ge=0)
    """The durable copy's snapshot id, as the job's RestoreNeedsConsent condition names it."""
    instead_of_snapshot_id: int = Field(ge=0)
    """The lost restore point's snapshot id, as the condition names it."""


class SnapshotChainsSpec(ApiModel):
    """Bounds of the chains incremental snapshots build per state partition: a full version,
    then deltas. Longer chains make a snapshot cheaper (a partition is written in full less
    often) and a restore dearer (it reads and applies more deltas)."""

    model_config = ConfigDict(extra="forbid")

    max_deltas: int = Field(default=DEFAULT_MAX_DELTAS, ge=1, le=64)
    """Most deltas after a partition's full version, so a restore reads at most
    maxDeltas + 1 versions of it; each partition is also written in full at its turn, once
    every maxDeltas + 1 snapshots, the partitions' turns spread over the snapshots."""
    max_delta_percent: int = Field(default=DEFAULT_MAX_DELTA_PERCENT, ge=1, le=100)
    """Most bytes of a partition's deltas, in percent of its full version's: a restore reads
    at most 1 + maxDeltaPercent / 100 times the state."""


class SnapshotJobSpec(ApiModel):
    """The desired state of a snapshot-protected PySpark job."""

    model_config = ConfigDict(extra="forbid")

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = (
        CrossFieldRule(
            cel="self.processingGuarantee != 'NONE' || self.upgradeMode == 'stateless'",
            message="processingGuarantee NONE takes no snapshots, so upgradeMode must be stateless",
            holds=lambda spec: (
                spec.processing_guarantee is not ProcessingGuarantee.NONE
                or spec.upgrade_mode is UpgradeMode.STATELESS
            ),
        ),
        CrossFieldRule(
            cel="!has(self.snapshotChains) || self.incrementalSnapshots",
            message="snapshotChains bounds the chains of incremental snapshots: set "
            "incrementalSnapshots to true, or remove snapshotChains",
            holds=lambda spec: spec.snapshot_chains is None or spec.incremental_snapshots,
        ),
    )

    image: str = Field(min_length=1)
    """Container image holding spark_runtime and the pipeline code."""
    image_pull_policy: ImagePullPolicy = ImagePullPolicy.IF_NOT_PRESENT
    """When to pull the image."""
    pipeline: PipelineSpec
    """The pipeline to run."""
    spark: SparkSpec = Field(default_factory=SparkSpec)
    """Spark settings of the driver and executors."""
    processing_guarantee: ProcessingGuarantee = ProcessingGuarantee.EXACTLY_ONCE
    """EXACTLY_ONCE publishes sink output only when a snapshot commits; AT_LEAST_ONCE writes
    every epoch; NONE takes no snapshots."""
    snapshot_interval_seconds: int = Field(default=10, ge=1)
    """Time from the end of one automatic snapshot to the start of the next."""
    state_partitions: int = Field(default=DEFAULT_STATE_PARTITIONS, ge=1, le=1024)
    """Number of hash partitions of keyed state; a change rolls out as any other (upgradeMode),
    and the restore re-partitions the job's state."""
    incremental_snapshots: bool = False
    """Snapshots write, per state partition, only the keys updated since the last snapshot (a
    delta) and list the earlier chunks they build on, all in one map per job; a partition is
    written in full again when its chain reaches the bounds of snapshotChains (16 deltas, or
    deltas half its size, by default) and at its turn. Running aggregates and deduplication
    take them; other operators' snapshots stay full. Exports are always full. A change rolls
    out as any other (upgradeMode). See docs/concepts/protocol.md."""
    snapshot_chains: SnapshotChainsSpec | None = Field(default=None, exclude_if=_unset)
    """Bounds of the chains of incremental snapshots (only with incrementalSnapshots); the
    defaults when unset. A change rolls out as any other (upgradeMode)."""
    suspend: bool = False
    """Suspend the job with a terminal snapshot (true), or resume it from its last good
    snapshot (false)."""
    export_snapshot: ExportSnapshotSpec | None = None
    """Export a named snapshot; changing the name exports again."""
    export_policy: ExportPolicySpec = Field(default_factory=ExportPolicySpec)
    """Periodic exports, and the retention of the exports the operator creates."""
    initial_snapshot_name: str | None = Field(
        default=None, max_length=DNS_LABEL_MAX_LENGTH, pattern=DNS_LABEL_PATTERN
    )
    """Exported snapshot to start from while the job has no snapshot of its own."""
    upgrade_mode: UpgradeMode = UpgradeMode.SNAPSHOT
    """How a change of the image, pipeline, Spark settings, guarantee, interval, state
    partitions or store rolls out: snapshot, last-snapshot or stateless."""
    suspend_on_failure: bool = False
    """Suspend (without a snapshot) instead of restarting when an execution fails."""
    split_brain_protection: bool = False
    """Start no execution while fewer store members are up than the quorum (more than half of
    the most members seen)."""
    restart_policy: RestartPolicy = Field(default_factory=RestartPolicy)
    """Restarts of failed executions."""
    stall_detection: StallDetectionSpec = Field(default_factory=StallDetectionSpec)
    """Restarts of running executions that take no snapshot, and the timeouts of epochs and
    sink calls; on by default."""
    deletion_policy: DeletionPolicy = DeletionPolicy.EXPORT
    """What deleting the job does with its state: Export (the default) keeps a terminal export
    of it, Destroy destroys it."""
    expired_offsets: ExpiredOffsetsPolicy = ExpiredOffsetsPolicy.FAIL
    """What a restore does when a Kafka source's restored offset is below the partition's
    earliest retained offset: Fail (the default) or go on from the Earliest."""
    hazelcast: HazelcastSpec = Field(default_factory=HazelcastSpec)
    """The Hazelcast cluster holding the snapshot data."""
    durable_storage: DurableStorageSpec | None = Field(default=None, exclude_if=_unset)
    """Object storage for durable copies of this job's exports and snapshots; without it the
    operator's default (the chart's `durableStorage`) applies."""
    durable_restore: DurableRestoreSpec | None = Field(default=None, exclude_if=_unset)
    """Restore an older durable copy after the store lost the restore point."""
    snapshot_signing: SnapshotSigningSpec | None = Field(default=None, exclude_if=_unset)
    """Sign every snapshot with a key from a Secret and restore only snapshots that verify;
    unsigned when unset. A change rolls out as any other (upgradeMode)."""
    kafka: KafkaSpec | None = Field(default=None, exclude_if=_unset)
    """Security settings of every Kafka source and sink of the job (TLS, SASL), with Secret
    references; see docs/guides/kafka-security.md. A change rolls out as any other
    (upgradeMode)."""
    spark_ui: SparkUiSpec = Field(default_factory=SparkUiSpec)
    """The driver's Spark web UI through a Service (and an Ingress) while an execution runs;
    off by default. See docs/guides/spark-ui.md."""
    pod_template: dict[str, Any] | None = Field(default=None, exclude_if=_unset)
    """Pod settings of the driver and the executors: environment from Secrets, volumes, node
    selection, tolerations, affinity, security contexts, service account, image pull Secrets.
    A partial Pod (`metadata.labels`, `metadata.annotations` and `spec`), as in a Pod template
    of Flink or Spark: its container named `main` stands for the driver's or executor's own
    container (env, envFrom, volumeMounts, securityContext; not image, command, args or
    resources, which come from this spec), other containers are sidecars. serviceAccountName,
    securityContext, affinity and topologySpreadConstraints replace the operator's, lists add
    up, restartPolicy stays the operator's; `spec.spark.driver.podTemplate` and
    `spec.spark.executor.podTemplate` add to it for one role. See docs/guides/pod-template.md."""

    _check_template = field_validator("pod_template")(_checked_template)

    def execution_fingerprint(self) -> str:
        """Returns a digest of the fields an execution runs with.

        ``suspend``, ``exportSnapshot`` and the operator-only fields (restart policy, upgrade
        mode, suspendOnFailure, splitBrainProtection, initialSnapshotName, which is read only at
        a first start) are left out: changing them needs no new execution.
        ``statePartitions``, ``incrementalSnapshots``, ``snapshotChains`` and
        ``sparkUi.enabled`` count only when
        they are not the default (unset), so jobs that existed before the fields keep their
        fingerprint and are not rolled out by an operator upgrade.
        """
        relevant = self.model_dump(
            mode="json",
            include={
                "image",
                "image_pull_policy",
                "pipeline",
                "spark",
                "processing_guarantee",
                "snapshot_interval_seconds",
                "hazelcast",
                "pod_template",
            },
        )
        if self.state_partitions != DEFAULT_STATE_PARTITIONS:
            relevant["state_partitions"] = self.state_partitions
        if self.incremental_snapshots:
            relevant["incremental_snapshots"] = True
        if self.snapshot_chains is not None:
            relevant["snapshot_chains"] = self.snapshot_chains.model_dump(mode="json")
        if self.spark_ui.enabled:
            # The driver starts its UI or not; the Service's settings need no new execution.
            relevant["spark_ui"] = True
        if self.snapshot_signing is not None:
            relevant["snapshot_signing"] = self.snapshot_signing.model_dump(mode="json")
        if self.kafka is not None:
            relevant["kafka"] = self.kafka.model_dump(mode="json")
        stall = self.stall_detection
        if (stall.epoch_timeout_seconds, stall.sink_timeout_seconds) != (
            StallDetectionSpec().epoch_timeout_seconds,
            StallDetectionSpec().sink_timeout_seconds,
        ):
            # The driver's own timeouts; the operator's bound needs no new execution.
            relevant["step_timeouts"] = [stall.epoch_timeout_seconds, stall.sink_timeout_seconds]
        canonical = json.dumps(relevant, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:16]
