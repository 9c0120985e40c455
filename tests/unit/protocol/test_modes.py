"""Termination modes and snapshot kinds carry their meaning as data (docs/concepts/protocol.md)."""

from __future__ import annotations

import pytest

from snapshot_protocol import ActionAfter, SnapshotKind, TerminationMode

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("mode", "terminal_snapshot", "action_after"),
    [
        (TerminationMode.RESTART_GRACEFUL, True, ActionAfter.RESTART),
        (TerminationMode.RESTART_FORCEFUL, False, ActionAfter.RESTART),
        (TerminationMode.SUSPEND_GRACEFUL, True, ActionAfter.SUSPEND),
        (TerminationMode.SUSPEND_FORCEFUL, False, ActionAfter.SUSPEND),
        (TerminationMode.CANCEL_GRACEFUL, True, ActionAfter.CANCEL),
        (TerminationMode.CANCEL_FORCEFUL, False, ActionAfter.CANCEL),
    ],
)
def test_mode_data(
    mode: TerminationMode, terminal_snapshot: bool, action_after: ActionAfter
) -> None:
    assert (mode.terminal_snapshot, mode.action_after) == (terminal_snapshot, action_after)
    forceful = mode.without_terminal_snapshot()
    assert (forceful.terminal_snapshot, forceful.action_after) == (False, action_after)


def test_there_are_six_distinct_modes() -> None:
    assert len({(m.terminal_snapshot, m.action_after) for m in TerminationMode}) == 6


@pytest.mark.parametrize(
    ("kind", "terminal", "exported", "export_only"),
    [
        (SnapshotKind.AUTOMATIC, False, False, False),
        (SnapshotKind.EXPORT_ONLY, False, True, True),
        (SnapshotKind.TERMINAL, True, False, False),
        (SnapshotKind.TERMINAL_EXPORTED, True, True, False),
    ],
)
def test_snapshot_kinds(
    kind: SnapshotKind, terminal: bool, exported: bool, export_only: bool
) -> None:
    assert (kind.is_terminal, kind.is_exported, kind.is_export_only) == (
        terminal,
        exported,
        export_only,
    )


def test_terminal_kind_depends_on_the_export_name() -> None:
    assert SnapshotKind.terminal(None) is SnapshotKind.TERMINAL
    assert SnapshotKind.terminal("x") is SnapshotKind.TERMINAL_EXPORTED
