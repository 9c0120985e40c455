"""Hypothesis strategies for SnapshotJobs and their world, and how actions change that world.

The decision function's tests draw arbitrary observations here, including inconsistent ones
(a RUNNING phase without a Pod, Pods of older executions, a forceful termination left in the
status): the safety properties must hold for anything the operator could read after a crash
or a half-applied action list.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from hypothesis import strategies as st
from pydantic import BaseModel

from snapshot_operator.reconcile import (
    Action,
    DriverPod,
    ExecutorPod,
    JobRef,
    Observation,
    PatchStatus,
    PodPhase,
    PodProblem,
    RequestExport,
    RequestTermination,
    StoreHealth,
    driver_pod_name,
    execution_id,
)
from snapshotjob_contract import (
    DeletionPolicy,
    ExecutionRecord,
    ExecutionStatus,
    ExportedSnapshot,
    ExportRequestStatus,
    ExportSnapshotSpec,
    FailureStatus,
    HazelcastSpec,
    Phase,
    PipelineSpec,
    PipelineStartedStatus,
    ProcessingGuarantee,
    RestartPolicy,
    SnapshotJobSpec,
    SnapshotJobStatus,
    SnapshotKind,
    StartFailureStatus,
    TerminationMode,
    TerminationStatus,
    UpgradeMode,
)
from snapshotjob_contract.status import ExecutionRecordStatus

NOW = datetime(2026, 11, 21, 12, 0, tzinfo=UTC)
JOB = JobRef(namespace="default", name="wordcount", uid="6f1c2d3e")
EXPORT_NAMES = ("nightly", "before-upgrade", "seed")
IMAGES = ("snapshotjob/runtime:1", "snapshotjob/runtime:2")
EXIT_CODES = (None, 0, 1, 2, 64, 65, 75, 77, 137, 143)
OTHER_HASH = "0000000000000000"

M = TypeVar("M", bound=BaseModel)


def models(model: type[M], **fields: st.SearchStrategy[Any]) -> st.SearchStrategy[M]:
    """Builds a model from field strategies by field name (st.builds would also fill aliases)."""
    return st.fixed_dictionaries(fields).map(lambda values: model(**values))


def ago(seconds: float) -> datetime:
    """Returns the time ``seconds`` before NOW."""
    return NOW - timedelta(seconds=seconds)


@st.composite
def specs(draw: st.DrawFn) -> SnapshotJobSpec:
    """Valid specs, over every switch the decision function reads."""
    guarantee = draw(st.sampled_from(ProcessingGuarantee))
    upgrade = (
        UpgradeMode.STATELESS
        if guarantee is ProcessingGuarantee.NONE
        else draw(st.sampled_from(UpgradeMode))
    )
    backoff = draw(st.integers(1, 60))
    return SnapshotJobSpec(
        image=draw(st.sampled_from(IMAGES)),
        pipeline=PipelineSpec(module="pipelines.wordcount"),
        processing_guarantee=guarantee,
        upgrade_mode=upgrade,
        suspend=draw(st.booleans()),
        export_snapshot=draw(
            st.none()
            | models(
                ExportSnapshotSpec, name=st.sampled_from(EXPORT_NAMES), cancel_job=st.booleans()
            )
        ),
        initial_snapshot_name=draw(st.none() | st.sampled_from(EXPORT_NAMES)),
        suspend_on_failure=draw(st.booleans()),
        split_brain_protection=draw(st.booleans()),
        restart_policy=RestartPolicy(
            max_restarts=draw(st.integers(0, 5)),
            backoff_seconds=backoff,
            max_backoff_seconds=backoff * draw(st.integers(1, 10)),
        ),
        hazelcast=HazelcastSpec(backup_count=draw(st.integers(1, 2))),
        deletion_policy=draw(st.sampled_from(DeletionPolicy)),
    )


@st.composite
def records(draw: st.DrawFn) -> ExecutionRecord:
    """Records reached by the protocol core's own operations."""
    record = ExecutionRecord()
    for _ in range(draw(st.integers(0, 4))):
        record = record.start_new_snapshot(now=draw(st.integers(0, 2**40)))
        kind = draw(st.sampled_from(SnapshotKind))
        name = draw(st.sampled_from(EXPORT_NAMES)) if kind.is_exported else None
        record = record.snapshot_done(
            kind,
            export_name=name,
            num_bytes=draw(st.integers(0, 2**40)),
            num_keys=draw(st.integers(0, 1000)),
            num_chunks=draw(st.integers(0, 1000)),
            failure=draw(st.none() | st.just("Chunk write indeterminate")),
            now=draw(st.integers(0, 2**40)),
            backup_count=draw(st.integers(1, 6)),
        )
    if draw(st.booleans()):
        record = record.suspended_because("Requested by user")
    return record.with_quorum_size(draw(st.integers(0, 5))).stamped(draw(st.integers(0, 2**40)))


def terminations(execution: ExecutionStatus | None) -> st.SearchStrategy[TerminationStatus]:
    """Termination requests of any mode, made up to ten minutes ago."""

    @st.composite
    def build(draw: st.DrawFn) -> TerminationStatus:
        mode = draw(st.sampled_from(TerminationMode))
        graceful = mode.terminal_snapshot
        return TerminationStatus(
            mode=mode,
            request_id=f"{execution.id if execution else 'none'}/{mode.value}",
            requested_at=ago(draw(st.integers(0, 600))),
            export_name=draw(st.none() | st.sampled_from(EXPORT_NAMES)) if graceful else None,
            reason="SuspendRequested",
        )

    return build()


@st.composite
def statuses(draw: st.DrawFn, spec: SnapshotJobSpec) -> SnapshotJobStatus:
    """Statuses in any phase, with or without an execution, requests and failures."""
    attempt = draw(st.integers(1, 5))
    execution = draw(
        st.none()
        | models(
            ExecutionStatus,
            id=st.just(execution_id(JOB.uid, attempt, NOW)),
            driver_pod=st.just(driver_pod_name(JOB.name, attempt)),
            started_at=st.integers(0, 3600).map(ago),
            attempt=st.just(attempt),
            spec_hash=st.sampled_from([spec.execution_fingerprint(), OTHER_HASH]),
        )
    )
    exported = draw(
        st.lists(
            models(
                ExportedSnapshot,
                name=st.sampled_from(EXPORT_NAMES),
                snapshot_id=st.integers(0, 10),
                num_bytes=st.integers(0, 10**9),
                created_at=st.integers(0, 3600).map(ago),
                terminal=st.booleans(),
            ),
            unique_by=lambda snapshot: snapshot.name,
            max_size=2,
        )
    )
    return SnapshotJobStatus(
        phase=draw(st.sampled_from(Phase)),
        observed_generation=draw(st.none() | st.integers(1, 3)),
        execution_record=ExecutionRecordStatus.of(draw(records())),
        execution=execution,
        termination=draw(st.none() | terminations(execution)),
        export_request=draw(
            st.none()
            | models(
                ExportRequestStatus,
                name=st.sampled_from(EXPORT_NAMES),
                request_id=st.just("request"),
                requested_at=st.integers(0, 600).map(ago),
            )
        ),
        exported_snapshots=exported,
        restarts=draw(st.integers(0, 6)),
        last_failure=draw(
            st.none()
            | models(
                FailureStatus,
                reason=st.sampled_from(["DriverFailed", "Cancelled"]),
                message=st.just("Driver exited exitCode=1"),
                time=st.integers(0, 600).map(ago),
                # A kept failed driver Pod: the current execution's or an older one's.
                driver_pod=st.none()
                | st.sampled_from([driver_pod_name(JOB.name, n) for n in (attempt, attempt - 1)]),
            )
        ),
        # The driver's report: the current execution's, an older one's (stale), or none.
        pipeline_started=draw(
            st.none()
            | models(
                PipelineStartedStatus,
                execution_id=st.sampled_from(
                    [execution_id(JOB.uid, n, NOW) for n in (attempt, max(attempt - 1, 1))]
                ),
                time=st.integers(0, 600).map(ago),
            )
        ),
        start_failure=draw(
            st.none()
            | models(
                StartFailureStatus,
                # The current execution's, or an older one's.
                execution_id=st.sampled_from(
                    [execution_id(JOB.uid, n, NOW) for n in (attempt, max(attempt - 1, 1))]
                ),
                object=st.just(f"Pod/{driver_pod_name(JOB.name, attempt)}"),
                attempts=st.integers(1, 8),
                message=st.just("status=403 Forbidden: exceeded quota"),
                time=st.integers(0, 600).map(ago),
            )
        ),
    )


def pods(status: SnapshotJobStatus) -> st.SearchStrategy[tuple[DriverPod, ...]]:
    """Driver Pods of the current and an older execution, in every state."""
    attempt = status.execution.attempt if status.execution else 1
    attempts = st.sampled_from(sorted({attempt, max(attempt - 1, 1), attempt + 1}))

    @st.composite
    def pod(draw: st.DrawFn) -> DriverPod:
        which = draw(attempts)
        phase = draw(st.sampled_from(PodPhase))
        return DriverPod(
            name=driver_pod_name(JOB.name, which),
            execution_id=execution_id(JOB.uid, which, NOW),
            phase=phase,
            exit_code=draw(st.sampled_from(EXIT_CODES)) if phase.is_terminal else None,
            deleting=draw(st.booleans()),
            problem=draw(st.none() | pod_problems) if phase is PodPhase.PENDING else None,
        )

    return st.lists(pod(), max_size=3).map(tuple)


pod_problems = st.builds(
    PodProblem,
    reason=st.sampled_from(["Unschedulable", "ImagePullBackOff", "StartError"]),
    message=st.just("0/3 nodes are available: 3 Insufficient cpu."),
    scheduling=st.booleans(),
)


def executors(status: SnapshotJobStatus) -> st.SearchStrategy[tuple[ExecutorPod, ...]]:
    """Executor Pods owned by the current or an older driver Pod, well or not starting."""
    attempt = status.execution.attempt if status.execution else 1
    owners = st.sampled_from([driver_pod_name(JOB.name, n) for n in (attempt, attempt - 1)])
    executor = st.builds(
        ExecutorPod,
        name=st.sampled_from(["exec-1", "exec-2"]),
        driver_pod=st.none() | owners,
        problem=st.none() | pod_problems,
    )
    return st.lists(executor, max_size=2).map(tuple)


stores = st.none() | st.builds(
    StoreHealth, cluster_safe=st.booleans(), member_count=st.integers(0, 5)
)


@st.composite
def observations(draw: st.DrawFn, spec: SnapshotJobSpec | None = None) -> Observation:
    """Arbitrary observations of the job (never deleting; tests opt in)."""
    spec = spec if spec is not None else draw(specs())
    status = draw(statuses(spec))
    return Observation(
        job=JOB,
        generation=(status.observed_generation or 1) + draw(st.integers(0, 1)),
        spec=spec,
        status=status,
        now=NOW,
        pods=draw(pods(status)),
        store=draw(stores),
        executors=draw(executors(status)),
    )


def status_after(
    status: SnapshotJobStatus, actions: tuple[Action, ...], now: datetime = NOW
) -> SnapshotJobStatus:
    """Returns the status once the status-writing actions are applied, as the API server would.

    Merge-patch semantics at the top level: a value replaces the field, null removes it.
    Validating the result also checks that every patch writes a valid status.
    """
    document: dict[str, Any] = status.model_dump(mode="json", exclude_none=True)
    for action in actions:
        if isinstance(action, PatchStatus):
            for key, value in action.patch.items():
                if value is None:
                    document.pop(key, None)
                else:
                    document[key] = value
        elif isinstance(action, RequestTermination | RequestExport):
            document.update(action.status_patch(now))
    return SnapshotJobStatus.model_validate(document)
