"""The driver's exit codes must agree with the operator's reading of them."""

from __future__ import annotations

from snapshot_operator.api.driver import DriverExit
from spark_runtime.exit_codes import ExitCode


def test_codes_the_operator_acts_on_have_the_operators_values() -> None:
    for meaning in DriverExit:
        assert ExitCode[meaning.name] == meaning.value


def test_every_code_is_distinct_and_a_valid_exit_status() -> None:
    values = [code.value for code in ExitCode]
    assert len(set(values)) == len(values)
    assert all(0 <= value <= 255 for value in values)


def test_codes_outside_the_operator_contract_read_as_failures_there() -> None:
    # FAILED and FAILPOINT_CRASH must make the operator restart, not complete the job.
    for code in (ExitCode.FAILED, ExitCode.FAILPOINT_CRASH):
        assert DriverExit.of(code) is None


def test_fenced_and_interrupted_are_part_of_the_operator_contract() -> None:
    # 77 must never count as a failure and 143 must restart at once: the operator names both.
    assert DriverExit.of(ExitCode.FENCED) is DriverExit.FENCED
    assert DriverExit.of(ExitCode.INTERRUPTED) is DriverExit.INTERRUPTED
