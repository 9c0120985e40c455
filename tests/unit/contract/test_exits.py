"""The driver's exit codes: one definition, fixed values, and every code handled by the operator."""

from __future__ import annotations

import inspect

import pytest

from snapshot_operator.reconcile.exits import EXITS, ExitOutcome
from snapshotjob_contract.exits import DriverExit

# The values are an API: drivers of one release meet operators of another.
FIXED_VALUES = {
    "COMPLETED": 0,
    "FAILED": 1,
    "BAD_INPUT": 2,
    "TERMINATED": 64,
    "SNAPSHOT_CORRUPTED": 65,
    "SNAPSHOT_NOT_FOUND": 66,
    "RESTORE_NEEDS_CONSENT": 68,
    "TRANSIENT_FAILURE": 69,
    "STALLED": 70,
    "SOURCE_DATA_LOST": 71,
    "RESTART_FORCEFUL": 75,
    "FENCED": 77,
    "SNAPSHOT_INCOMPATIBLE": 78,
    "QUORUM_LOST": 79,
    "FAILPOINT_CRASH": 86,
    "INTERRUPTED": 143,
}


def test_the_codes_keep_their_values() -> None:
    assert {code.name: code.value for code in DriverExit} == FIXED_VALUES


def test_every_code_is_a_valid_exit_status() -> None:
    assert all(0 <= code.value <= 255 for code in DriverExit)


def test_every_code_has_a_description() -> None:
    text = inspect.getsource(DriverExit)
    for code in DriverExit:
        assert f"{code.name} = {code.value}\n" in text
        after = text.split(f"{code.name} = {code.value}\n", 1)[1].lstrip()
        assert after.startswith('"""'), f"{code.name} has no description"


@pytest.mark.parametrize("code", list(DriverExit), ids=lambda c: c.name)
def test_the_operator_handles_every_code(code: DriverExit) -> None:
    assert code in EXITS


@pytest.mark.parametrize("code", [DriverExit.FAILED, DriverExit.FAILPOINT_CRASH])
def test_failures_and_injected_crashes_follow_the_restart_policy(code: DriverExit) -> None:
    assert EXITS[code] is EXITS[None]
    assert EXITS[code].outcome is ExitOutcome.RESTART_POLICY


def test_fenced_and_interrupted_are_never_failures() -> None:
    assert EXITS[DriverExit.FENCED].failure is None
    assert EXITS[DriverExit.INTERRUPTED].failure is None
    assert EXITS[DriverExit.INTERRUPTED].outcome is ExitOutcome.RESTART_AT_ONCE
