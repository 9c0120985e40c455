"""The decision function in a loop with a simulated world: drivers, kubelet, store and users.

A hypothesis state machine interleaves reconciles with everything that happens between them:
drivers that start, report their pipeline running (or never do, as when executors cannot be
scheduled), snapshot, serve requests, crash, exit with RESTART_FORCEFUL, get SIGTERM
(INTERRUPTED) or find themselves fenced (FENCED); Pods that are stopped by the kubelet, vanish
with their node or are deleted by hand; nodes that stop reporting (their Pods stay Running and
nothing more is heard of them) and come back; users who suspend, resume, export,
cancel and upgrade; a store that loses cluster safety, or fails the operator's copies to an
export; time that passes; users who delete the job under either ``deletionPolicy``, and change
it while the deletion is held. After every step the safety invariants are checked on the whole
world, not on a single decision.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, settings

from tests.unit.operator.job_world import JobWorld

pytestmark = pytest.mark.filterwarnings("error")

JobWorld.TestCase.settings = settings(
    max_examples=120,
    stateful_step_count=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
test_the_decision_function_keeps_the_world_safe = JobWorld.TestCase
