"""Zombie driver episodes on a local-mode job: stop a driver, replace it, let it carry on.

A zombie is a driver of an older execution that still runs after a newer one took the job
over: its node froze, a replacement was started, then the node woke up. Fencing must keep the
zombie from changing anything that counts, and the record alone is not enough: snapshot data
lives in the two automatic maps, and the zombie still knows which of them to write to and to
clear. So an episode is scripted to make the zombie's stale writes land where they hurt most:

1. The driver stops itself at a ``pause`` failpoint of a snapshot, after that snapshot's id
   was stored (taking steps 3 to 8). The map it will write or clear next is the stored
   record's ``ongoing_data_map_index``: its ongoing map before its decision (step 7), the
   other map after it (step 8a clears the map of the previous snapshot).
2. A replacement claims the record file (fencing the zombie), restores, and takes exactly one
   snapshot. A new execution writes into the map that does not hold its restore point, which
   is that very map: the replacement's restore point is now where the zombie goes on.
   The replacement then stops at a ``pause`` failpoint, or dies at a ``crash`` one.
3. The zombie gets ``SIGCONT`` and carries on from its failpoint until its next record write
   fences it (exit code 77).

What happens to the replacement's restore point then is up to the code under test; the next
execution's restore tells (``SnapshotCorrupted`` if it was overwritten or cleared).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from snapshotjob_contract.exits import DriverExit
from testbed.driver_process import DetachedDriver, DriverHarness, log_time


@dataclass(frozen=True)
class ZombieEpisode:
    """What one episode did, for the test's assertions and counts.

    Attributes:
        zombie: The stale execution, ended.
        zombie_exit: Its exit code.
        pause_at: Where it stopped.
        touched_map: The automatic map index it writes to or clears after resuming.
        replacement_map: The map index of the replacement's restore point.
        replacement_snapshot_id: The replacement's restore point.
        replacement_exit: The replacement's exit code (it was SIGKILLed if stopped).
        replacement_done_at: When the replacement had stored its snapshot: when it logged
            its pause, or when it had died at its crash failpoint (local time, as in logs).
        zombie_resumed_at: When the zombie logged that it carried on after ``SIGCONT``.
    """

    zombie: DetachedDriver
    zombie_exit: int
    pause_at: str
    touched_map: int
    replacement_map: int
    replacement_snapshot_id: int
    replacement_exit: int
    replacement_done_at: datetime
    zombie_resumed_at: datetime | None


def zombie_episode(
    harness: DriverHarness,
    pause_at: str,
    replacement_ends_at: str,
    zombie_failpoints: str = "",
    timeout: float = 300.0,
) -> ZombieEpisode:
    """Runs one episode (see the module docstring) and returns what happened.

    Args:
        harness: The job; its current execution must have ended.
        pause_at: The zombie's ``pause`` failpoint, a taking step between 3 and 8.
        replacement_ends_at: ``<failpoint>=pause`` or ``<failpoint>=crash`` at or after
            ``take.after_step_7``, so the replacement's first snapshot is stored first.
        zombie_failpoints: More failpoints for the zombie, e.g. ``take.after_step_5=
            indeterminate`` to make its snapshot fail after writing its validation record.
        timeout: Seconds each driver may take to get to its failpoint, and the zombie to end.

    Returns:
        The episode; the replacement has ended, the zombie too.

    Raises:
        AssertionError: If a driver did not get where the episode needs it.
    """
    armed = ",".join(filter(None, [f"{pause_at}=pause", zombie_failpoints]))
    harness.start(failpoints=armed)
    harness.wait_paused(pause_at, timeout=timeout)
    touched = harness.record().ongoing_data_map_index(incremental=False)
    zombie = harness.detach()
    try:
        replacement_failpoint, _, action = replacement_ends_at.partition("=")
        harness.start(failpoints=replacement_ends_at)
        if action == "pause":
            harness.wait_paused(replacement_failpoint, timeout=timeout)
            stopped_at = log_time(
                harness.log_text(), f"Failpoint pausing failpoint={replacement_failpoint} "
            )
        else:
            code = harness.wait(timeout=timeout)
            assert code == DriverExit.FAILPOINT_CRASH, (
                f"replacement exit {code}, not the crash at {replacement_failpoint}:\n"
                f"{harness.log_tail()}"
            )
            stopped_at = None
        # Either way the replacement had stored its snapshot (its failpoint is after step 7).
        # Whole milliseconds, as the driver's log times, so the two compare.
        now = datetime.now()
        replacement_done_at = stopped_at or now.replace(microsecond=now.microsecond // 1000 * 1000)
        record = harness.record()
        assert record.data_map_index == touched, (
            f"the replacement's restore point (snapshot {record.snapshot_id}, map "
            f"{record.data_map_index}) is not in the map {touched} the zombie touches next:\n"
            f"{harness.log_tail()}"
        )
        zombie.resume()
        zombie_exit = zombie.wait(timeout=timeout)
        if action == "pause":
            harness.kill()
        replacement_exit = harness.exit_codes[-1]
    finally:
        zombie.kill()
    return ZombieEpisode(
        zombie=zombie,
        zombie_exit=zombie_exit,
        pause_at=pause_at,
        touched_map=touched,
        replacement_map=record.data_map_index,
        replacement_snapshot_id=record.snapshot_id,
        replacement_exit=replacement_exit,
        replacement_done_at=replacement_done_at,
        zombie_resumed_at=log_time(zombie.log_text(), f"Failpoint resumed failpoint={pause_at} "),
    )
