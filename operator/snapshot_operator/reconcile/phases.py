"""The phase rules one decision obeys: which phases are live, and which changes are allowed.

They are data, apart from the code that moves between phases, so that every decision is
checked against them (the plan refuses to return a phase change they do not allow) instead of
each branch being trusted to stay within them.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from snapshotjob_contract import Phase, SnapshotJobStatus, TerminationMode

LIVE_PHASES = frozenset({Phase.STARTING, Phase.RUNNING, Phase.COMPLETING})
"""Phases in which an execution exists and its driver Pod is supervised."""

_AFTER_EXECUTION_ENDED = frozenset(
    {
        Phase.STARTING,
        Phase.RUNNING,
        Phase.COMPLETING,
        Phase.RESTARTING,
        Phase.SUSPENDED,
        Phase.FAILED,
        Phase.COMPLETED,
    }
)

TRANSITIONS: Mapping[Phase, frozenset[Phase]] = MappingProxyType(
    {
        Phase.NOT_RUNNING: frozenset({Phase.STARTING, Phase.SUSPENDED}),
        Phase.STARTING: _AFTER_EXECUTION_ENDED,
        Phase.RUNNING: _AFTER_EXECUTION_ENDED,
        Phase.COMPLETING: _AFTER_EXECUTION_ENDED,
        Phase.RESTARTING: frozenset({Phase.STARTING, Phase.SUSPENDED}),
        Phase.SUSPENDED: frozenset(
            {Phase.STARTING, Phase.RESTARTING, Phase.SUSPENDED_EXPORTING_SNAPSHOT}
        ),
        Phase.SUSPENDED_EXPORTING_SNAPSHOT: frozenset({Phase.SUSPENDED, Phase.FAILED}),
        Phase.FAILED: frozenset({Phase.STARTING, Phase.RESTARTING, Phase.SUSPENDED}),
        Phase.COMPLETED: frozenset({Phase.STARTING, Phase.RESTARTING, Phase.SUSPENDED}),
    }
)
"""The phase changes one decision may make (staying in a phase is always allowed)."""


class IllegalPhaseChange(Exception):  # noqa: N818 (as the protocol's IllegalTransition)
    """A decision tried a phase change :data:`TRANSITIONS` does not allow: a bug, not a state."""


def check_phase_change(before: Phase, after: Phase) -> None:
    """Refuses a phase change that :data:`TRANSITIONS` does not allow.

    Args:
        before: The observed phase.
        after: The phase the decision arrived at.

    Raises:
        IllegalPhaseChange: The change is not allowed.
    """
    if after is not before and after not in TRANSITIONS[before]:
        raise IllegalPhaseChange(f"{before.value} -> {after.value} is not allowed")


def suspended_on_failure(status: SnapshotJobStatus) -> bool:
    """Whether the job is held suspended by suspendOnFailure (until its spec changes)."""
    termination = status.termination
    return (
        status.phase in (Phase.SUSPENDED, Phase.SUSPENDED_EXPORTING_SNAPSHOT)
        and termination is not None
        and termination.mode is TerminationMode.SUSPEND_FORCEFUL
    )
