"""The step timeouts and the expired offsets policy reach the driver's settings in both modes.

Kubernetes mode reads them from the SnapshotJob (``spec.stallDetection``,
``spec.expiredOffsets``), local mode from the command line, with the spec's defaults.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from snapshotjob_contract.spec import ExpiredOffsetsPolicy
from spark_runtime.cli import parser
from spark_runtime.kube_mode import kubernetes_config
from spark_runtime.local_mode import local_config

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local mode keeps its jobs under ./.snapshotjob by default: not in the checkout."""
    monkeypatch.chdir(tmp_path)


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u-1", "namespace": "team", "name": "sums"},
        "spec": {
            "image": "snapshotjob/runtime:dev",
            "pipeline": {"module": "examples.sequence_sum"},
            "hazelcast": {"address": "hz:5701"},
            **spec,
        },
    }


def _local(*extra: str) -> list[str]:
    return ["run", "--pipeline", "examples.sequence_sum", "--job-uid", "job-1", *extra]


def test_kubernetes_mode_takes_them_from_the_spec() -> None:
    settings = kubernetes_config(
        _job(
            stallDetection={"epochTimeoutSeconds": 120, "sinkTimeoutSeconds": 45},
            expiredOffsets="Earliest",
        )
    ).settings
    assert settings.epoch_timeout_s == 120.0
    assert settings.sink_timeout_s == 45.0
    assert settings.expired_offsets is ExpiredOffsetsPolicy.EARLIEST


def test_both_modes_default_to_the_specs_defaults() -> None:
    from_spec = kubernetes_config(_job()).settings
    from_command_line = local_config(parser().parse_args(_local())).settings
    for settings in (from_spec, from_command_line):
        assert settings.epoch_timeout_s == 900.0
        assert settings.sink_timeout_s == 300.0
        assert settings.expired_offsets is ExpiredOffsetsPolicy.FAIL


def test_local_mode_takes_them_from_the_command_line() -> None:
    settings = local_config(
        parser().parse_args(
            _local(
                "--expired-offsets",
                "Earliest",
                "--epoch-timeout-seconds",
                "2.5",
                "--sink-timeout-seconds",
                "7",
            )
        )
    ).settings
    assert settings.epoch_timeout_s == 2.5
    assert settings.sink_timeout_s == 7.0
    assert settings.expired_offsets is ExpiredOffsetsPolicy.EARLIEST


@pytest.mark.parametrize(
    ("option", "value", "says"),
    [
        ("--epoch-timeout-seconds", "0", "'0' is not a number of seconds above 0"),
        ("--sink-timeout-seconds", "-3", "'-3' is not a number of seconds above 0"),
        ("--sink-timeout-seconds", "soon", "'soon' is not a number of seconds above 0"),
        ("--epoch-timeout-seconds", "nan", "'nan' is not a number of seconds above 0"),
        ("--expired-offsets", "latest", "invalid choice: 'latest'"),
    ],
)
def test_a_bad_value_is_refused_naming_the_option(
    option: str, value: str, says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        parser().parse_args(_local(option, value))
    assert exited.value.code == 2
    assert f"argument {option}: {says}" in capsys.readouterr().err
