"""The API models: defaults, the cross-field rules, and the contract with the protocol core."""

from __future__ import annotations

import re

import pydantic
import pytest
from hypothesis import given

from snapshotjob_contract import (
    CONDITION_DESCRIPTIONS,
    PHASE_DESCRIPTIONS,
    REASON_DESCRIPTIONS,
    ConditionReason,
    ConditionType,
    DriverExit,
    ExecutionRecord,
    ExecutionRecordStatus,
    Phase,
    ProcessingGuarantee,
    RestartPolicy,
    SnapshotJobSpec,
    SnapshotJobStatus,
    TerminationMode,
    UpgradeMode,
)
from tests.unit.operator.specs import INVALID_SPECS, VALID_SPEC, InvalidSpecCase
from tests.unit.operator.world import records


def test_a_minimal_spec_takes_the_documented_defaults() -> None:
    spec = SnapshotJobSpec.model_validate(VALID_SPEC)

    assert spec.processing_guarantee is ProcessingGuarantee.EXACTLY_ONCE
    assert spec.snapshot_interval_seconds == 10
    assert spec.suspend is False
    assert spec.upgrade_mode is UpgradeMode.SNAPSHOT
    assert spec.spark.master == "k8s"
    assert (spec.restart_policy.max_restarts, spec.restart_policy.backoff_seconds) == (10, 10)
    assert spec.restart_policy.max_backoff_seconds == 300
    assert spec.hazelcast.backup_count == 1


def test_specs_are_read_and_written_in_camel_case() -> None:
    spec = SnapshotJobSpec.model_validate(
        {**VALID_SPEC, "exportSnapshot": {"name": "nightly", "cancelJob": True}}
    )

    written = spec.to_json()

    assert written["exportSnapshot"] == {"name": "nightly", "cancelJob": True}
    assert written["restartPolicy"]["maxBackoffSeconds"] == 300
    assert SnapshotJobSpec.model_validate(written) == spec


def test_durable_storage_is_optional_and_changes_no_fingerprint() -> None:
    storage = {
        "bucket": "team.snapshots-1",
        "prefix": "team-a/jobs",
        "endpoint": "http://minio.storage:9000",
        "credentialsSecret": "s3-keys",
    }
    plain = SnapshotJobSpec.model_validate(VALID_SPEC)
    durable = SnapshotJobSpec.model_validate({**VALID_SPEC, "durableStorage": storage})

    assert durable.to_json()["durableStorage"] == {**storage, "region": "us-east-1"}
    assert "durableStorage" not in plain.to_json()
    # Only the operator will read it: a job given storage needs no new execution.
    assert durable.execution_fingerprint() == plain.execution_fingerprint()


@pytest.mark.parametrize("case", INVALID_SPECS, ids=lambda case: case.name)
def test_the_models_reject_what_the_crd_rejects(case: InvalidSpecCase) -> None:
    with pytest.raises(pydantic.ValidationError) as rejected:
        SnapshotJobSpec.model_validate(case.spec())

    if case.message is not None:
        assert case.message in str(rejected.value)


def test_unknown_spec_fields_are_rejected() -> None:
    with pytest.raises(pydantic.ValidationError, match="suspended"):
        SnapshotJobSpec.model_validate({**VALID_SPEC, "suspended": True})


def test_unknown_status_fields_are_ignored_for_newer_writers() -> None:
    status = SnapshotJobStatus.model_validate({"phase": "RUNNING", "futureField": 1})

    assert status.phase is Phase.RUNNING


@pytest.mark.parametrize(
    ("failures", "delay"), [(1, 10), (2, 20), (3, 40), (5, 160), (6, 300), (10_000, 300)]
)
def test_restart_backoff_doubles_up_to_the_maximum(failures: int, delay: int) -> None:
    assert RestartPolicy().backoff(failures) == delay


def test_every_phase_and_condition_is_described() -> None:
    assert set(PHASE_DESCRIPTIONS) == set(Phase)
    assert set(CONDITION_DESCRIPTIONS) == set(ConditionType)
    assert all(phase.description for phase in Phase)
    assert all(condition.description for condition in ConditionType)


def test_every_condition_reason_is_described_and_camel_case() -> None:
    assert set(REASON_DESCRIPTIONS) == set(ConditionReason)
    assert all(reason.description for reason in ConditionReason)
    assert all(re.fullmatch(r"[A-Z][A-Za-z]*", reason.value) for reason in ConditionReason)


def test_termination_modes_are_written_by_name_and_carry_their_meaning() -> None:
    assert [mode.value for mode in TerminationMode] == [mode.name for mode in TerminationMode]
    graceful = {mode for mode in TerminationMode if mode.terminal_snapshot}
    assert {mode.name for mode in graceful} == {
        "RESTART_GRACEFUL",
        "SUSPEND_GRACEFUL",
        "CANCEL_GRACEFUL",
    }
    assert TerminationMode.SUSPEND_GRACEFUL.without_terminal_snapshot() is (
        TerminationMode.SUSPEND_FORCEFUL
    )
    assert {mode.action_after.value for mode in TerminationMode} == {"RESTART", "SUSPEND", "CANCEL"}


def test_the_execution_record_status_has_exactly_the_records_keys() -> None:
    fields = {field.alias for field in ExecutionRecordStatus.model_fields.values()}

    assert fields == set(ExecutionRecord().to_dict())


@given(records())
def test_the_status_form_of_a_record_reads_back_as_the_same_record(
    record: ExecutionRecord,
) -> None:
    status = ExecutionRecordStatus.of(record)

    assert status.to_record() == record
    assert ExecutionRecordStatus.model_validate(status.to_json()).to_record() == record


def test_the_execution_fingerprint_ignores_requests_served_without_a_new_execution() -> None:
    spec = SnapshotJobSpec.model_validate(VALID_SPEC)
    served_in_place = spec.model_copy(
        update={
            "suspend": True,
            "upgrade_mode": UpgradeMode.STATELESS,
            "initial_snapshot_name": "seed",
            "restart_policy": RestartPolicy(max_restarts=1),
        }
    )
    upgraded = spec.model_copy(update={"image": "snapshotjob/runtime:next"})

    assert served_in_place.execution_fingerprint() == spec.execution_fingerprint()
    assert upgraded.execution_fingerprint() != spec.execution_fingerprint()


@pytest.mark.parametrize(
    ("code", "meaning"),
    [
        (0, DriverExit.COMPLETED),
        (2, DriverExit.BAD_INPUT),
        (64, DriverExit.TERMINATED),
        (65, DriverExit.SNAPSHOT_CORRUPTED),
        (75, DriverExit.RESTART_FORCEFUL),
        (1, DriverExit.FAILED),
        (77, DriverExit.FENCED),
        (86, DriverExit.FAILPOINT_CRASH),
        (143, DriverExit.INTERRUPTED),
        (137, None),
    ],
)
def test_driver_exit_codes_have_fixed_meanings(code: int, meaning: DriverExit | None) -> None:
    assert DriverExit.of(code) is meaning
