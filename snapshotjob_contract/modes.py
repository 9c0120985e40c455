"""Termination modes and snapshot kinds, with Jet's meaning attached as data.

Jet's ``TerminationMode`` couples two decisions: whether a terminal snapshot is taken first
(graceful) and what happens after the execution stops. Graceful modes leave the state "clean":
no transaction stays prepared when the job stops (docs/concepts/protocol.md, "Termination modes").
Keeping the two decisions as data on the enum members lets the coordinator treat all six modes
with one code path.
"""

from __future__ import annotations

import enum


class ActionAfter(enum.Enum):
    """What happens to the job once its execution has stopped."""

    RESTART = "RESTART"
    SUSPEND = "SUSPEND"
    CANCEL = "CANCEL"


class TerminationMode(enum.StrEnum):
    """The six ways to stop an execution: {RESTART, SUSPEND, CANCEL} x {GRACEFUL, FORCEFUL}.

    The value is the name, as ``status.termination.mode`` carries it; what a mode means is
    data on the member (:attr:`terminal_snapshot`, :attr:`action_after`).
    """

    RESTART_GRACEFUL = "RESTART_GRACEFUL"
    RESTART_FORCEFUL = "RESTART_FORCEFUL"
    SUSPEND_GRACEFUL = "SUSPEND_GRACEFUL"
    SUSPEND_FORCEFUL = "SUSPEND_FORCEFUL"
    CANCEL_GRACEFUL = "CANCEL_GRACEFUL"
    CANCEL_FORCEFUL = "CANCEL_FORCEFUL"

    @property
    def terminal_snapshot(self) -> bool:
        """True for graceful modes, which take a terminal snapshot first."""
        return self.name.endswith("_GRACEFUL")

    @property
    def action_after(self) -> ActionAfter:
        """What to do once the execution stopped."""
        return ActionAfter[self.name.split("_", 1)[0]]

    def without_terminal_snapshot(self) -> TerminationMode:
        """Returns the forceful mode with the same action, as Jet's ``withoutTerminalSnapshot``."""
        return TerminationMode[f"{self.action_after.value}_FORCEFUL"]


class SnapshotKind(enum.Enum):
    """The four kinds of snapshot (docs/concepts/protocol.md, "Snapshot kinds").

    AUTOMATIC: taken periodically into the job's alternating pair of snapshot maps.
    EXPORT_ONLY: an exported (named) snapshot that is not terminal; it only saves state, never
        becomes the restore point and has no 2nd phase.
    TERMINAL: an unnamed terminal snapshot (suspend, graceful restart or cancel); written into
        the same maps as automatic snapshots.
    TERMINAL_EXPORTED: a named terminal snapshot (cancel-and-export); written into the export map
        and, once successful, the restore point of the job.
    """

    AUTOMATIC = "AUTOMATIC"
    EXPORT_ONLY = "EXPORT_ONLY"
    TERMINAL = "TERMINAL"
    TERMINAL_EXPORTED = "TERMINAL_EXPORTED"

    @property
    def is_terminal(self) -> bool:
        """Whether the execution stops after this snapshot."""
        return self in (SnapshotKind.TERMINAL, SnapshotKind.TERMINAL_EXPORTED)

    @property
    def is_exported(self) -> bool:
        """Whether the snapshot is written to a named export map instead of the job's maps."""
        return self in (SnapshotKind.EXPORT_ONLY, SnapshotKind.TERMINAL_EXPORTED)

    @property
    def is_export_only(self) -> bool:
        """Whether this is an export-only snapshot: no restore point, no 2nd phase."""
        return self is SnapshotKind.EXPORT_ONLY

    @staticmethod
    def terminal(export_name: str | None) -> SnapshotKind:
        """Returns the kind of terminal snapshot a graceful termination takes."""
        return SnapshotKind.TERMINAL if export_name is None else SnapshotKind.TERMINAL_EXPORTED
