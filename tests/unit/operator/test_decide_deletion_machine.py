"""The decision in a loop with a simulated world, deleted early, from a job with a snapshot.

:class:`~tests.unit.operator.job_world.JobWorld` deletes its job late in a run, and
most of its runs get there without a snapshot and without a running pipeline, so its
deletions mostly have nothing to keep. This world creates the job with a restore point (as a
job whose earlier executions snapshotted), often with its pipeline already running, and lets
the user delete it after a few reconciles: while its driver starts, runs, serves the terminal
export or not, and while the store fails the operator's copies, under either
``deletionPolicy``, which the user may change while the deletion is held. The checks are
JobWorld's: the job goes only with its state kept (or with ``Destroy``), copies stay within
their bound, a held deletion says so (``_check_a_held_deletion``,
``_state_kept_unless_destroyed``), never two drivers, never a start while deleting.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import initialize, precondition, rule

from snapshot_operator.reconcile import PodPhase
from snapshot_operator.reconcile.deletion import JOB_DELETED
from snapshotjob_contract import Phase, PipelineStartedStatus, SnapshotJobSpec, SnapshotKind
from tests.unit.operator.job_world import JobWorld, then_reconcile
from tests.unit.operator.world import specs

pytestmark = pytest.mark.filterwarnings("error")


class DeletionWorld(JobWorld):
    """A JobWorld whose job has a restore point from the start and is deleted early."""

    # Replaces JobWorld's initializer of the same name.
    @initialize(
        spec=specs().map(lambda spec: spec.model_copy(update={"suspend": False})),
        running=st.booleans(),
        fail=st.booleans(),
    )
    def create_job(self, spec: SnapshotJobSpec, running: bool, fail: bool) -> None:
        self.spec = spec
        self._snapshot(SnapshotKind.AUTOMATIC, None)
        if running:
            self._reconcile()
            self._start_pipeline()
            self._reconcile()
        # A store that fails copies from the start: the runs that reach a held deletion.
        self.copies_fail = fail

    def _start_pipeline(self) -> None:
        pod = self._current()
        if pod is not None and pod.phase is PodPhase.PENDING:
            self.pods[pod.name] = replace(pod, phase=PodPhase.RUNNING)
        pod = self._running_driver()
        if pod is not None and pod.name not in self.stuck_executors:
            report = PipelineStartedStatus(execution_id=pod.execution_id, time=self.now)
            self.status = self.status.model_copy(update={"pipeline_started": report})

    @rule()
    @then_reconcile
    def driver_starts_its_pipeline(self) -> None:
        """Its Pod runs and it reports its pipeline running, in one step: without it few runs
        reach RUNNING, the only phase a deletion asks the driver for a terminal export in."""
        self._start_pipeline()

    @precondition(
        lambda self: (
            self.status.termination is not None and self.status.termination.reason == JOB_DELETED
        )
    )
    @rule()
    @then_reconcile
    def driver_serves_the_deletion_s_request(self) -> None:
        """As JobWorld's driver serves any request; drawn only when there is this one."""
        pod = self._running_driver()
        termination = self.status.termination
        if pod is not None and termination is not None:
            self._snapshot(SnapshotKind.TERMINAL_EXPORTED, termination.export_name)
            self._exit(pod, 64)

    @precondition(lambda self: not self.deleting and self.reconciles >= 4)
    @rule()
    @then_reconcile
    def user_deletes_the_job_early(self) -> None:
        self.deleting = True

    @precondition(lambda self: not self.deleting and self.status.phase is Phase.RUNNING)
    @rule()
    @then_reconcile
    def user_deletes_the_running_job(self) -> None:
        self.deleting = True


DeletionWorld.TestCase.settings = settings(
    max_examples=200,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_a_deletion_keeps_the_state_or_holds_the_job = DeletionWorld.TestCase
