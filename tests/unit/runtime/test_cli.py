"""The driver's command line, local mode, loading the pipeline module and the exit codes."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path

import pytest

from snapshot_protocol.incremental import ChainPolicy
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.observability import DRIVER_METRICS_PORT, ENV_METRICS_PORT
from snapshotjob_contract.spec import ProcessingGuarantee
from spark_runtime.cli import main, open_mode, parser
from spark_runtime.execution import BadInput, load_definition
from spark_runtime.file_record_store import FileRecordStore
from spark_runtime.local_mode import LocalMode, local_config


@pytest.fixture(autouse=True)
def _in_a_scratch_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Local mode keeps its jobs under ./.snapshotjob by default: not in the checkout."""
    monkeypatch.chdir(tmp_path)


def _local(*extra: str) -> list[str]:
    return [
        "run",
        "--pipeline",
        "examples.sequence_sum",
        "--record-file",
        "/tmp/record.json",
        "--hazelcast",
        "127.0.0.1:5701,127.0.0.1:5702",
        "--cluster-name",
        "dev",
        "--job-uid",
        "job-1",
        *extra,
    ]


def test_local_mode_takes_everything_from_the_command_line() -> None:
    ns = parser().parse_args(
        _local("--arg", "end=10", "--args-json", '{"keys": 3}', "--guarantee", "NONE")
    )
    config = local_config(ns)
    assert config.module == "examples.sequence_sum"
    assert config.args == {"keys": 3, "end": "10"}
    assert config.settings.guarantee is ProcessingGuarantee.NONE
    assert config.settings.store.members == ("127.0.0.1:5701", "127.0.0.1:5702")
    assert config.settings.job.uid == "job-1"
    assert ns.record_file == Path("/tmp/record.json")
    assert config.settings.initial_snapshot_name is None
    assert config.settings.job.backup_count == 1


def test_local_mode_takes_the_backup_count_of_the_snapshot_maps() -> None:
    config = local_config(parser().parse_args(_local("--backup-count", "2")))
    assert config.settings.job.backup_count == 2
    with pytest.raises(SystemExit):
        parser().parse_args(_local("--backup-count", "7"))


def test_local_mode_can_start_from_an_exported_snapshot() -> None:
    config = local_config(parser().parse_args(_local("--initial-snapshot-name", "golden")))
    assert config.settings.initial_snapshot_name == "golden"


def test_local_mode_takes_the_bounds_of_incremental_snapshots_chains() -> None:
    default = local_config(parser().parse_args(_local("--incremental-snapshots")))
    assert default.settings.job.incremental
    assert default.settings.chain_policy == ChainPolicy(16, 0.5)
    config = local_config(
        parser().parse_args(
            _local("--incremental-snapshots", "--max-deltas", "32", "--max-delta-percent", "25")
        )
    )
    assert config.settings.chain_policy == ChainPolicy(32, 0.25)
    with pytest.raises(BadInput, match="add --incremental-snapshots"):
        local_config(parser().parse_args(_local("--max-deltas", "32")))
    with pytest.raises(BadInput, match="maxDeltas: Input should be less than or equal to 64"):
        local_config(parser().parse_args(_local("--incremental-snapshots", "--max-deltas", "65")))


def test_local_mode_needs_only_the_pipeline_and_snapshots_into_the_embedded_store(
    tmp_path: Path,
) -> None:
    (tmp_path / "my_pipeline.py").write_text("def define_pipeline(p):\n    pass\n")
    pipeline = str(tmp_path / "my_pipeline.py")
    ns = parser().parse_args(["run", pipeline, "--state-dir", str(tmp_path / "state")])
    config = local_config(ns)
    assert config.module == "my_pipeline"
    assert config.settings.store.is_embedded
    assert config.settings.store.directory == str((tmp_path / "state" / "store").resolve())
    uid = config.settings.job.uid
    assert re.fullmatch(r"my-pipeline-[0-9a-f]{8}", uid)
    assert config.settings.job.namespace == "local"
    # The same command finds the same job.
    assert local_config(ns).settings.job.uid == uid
    assert (
        local_config(parser().parse_args([*_argv(ns), "--name", "other"])).settings.job.uid != uid
    )


def _argv(ns: argparse.Namespace) -> list[str]:
    return ["run", ns.pipeline_path, "--state-dir", str(ns.state_dir)]


def test_local_mode_refuses_what_it_cannot_run(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="Name the pipeline once"):
        local_config(parser().parse_args(["run"]))
    with pytest.raises(BadInput, match="Name the pipeline once"):
        local_config(parser().parse_args(["run", "a.py", "--pipeline", "a"]))
    with pytest.raises(BadInput, match="does not exist"):
        local_config(parser().parse_args(["run", str(tmp_path / "missing.py")]))
    (tmp_path / "my-pipeline.py").write_text("")
    with pytest.raises(BadInput, match="cannot be imported as a module"):
        local_config(parser().parse_args(["run", str(tmp_path / "my-pipeline.py")]))
    with pytest.raises(BadInput, match="not a DNS label"):
        local_config(parser().parse_args(["run", "--pipeline", "x", "--name", "Bad_Name"]))
    state = ["--state-dir", str(tmp_path / "state")]
    with pytest.raises(BadInput, match="needs the Hazelcast store"):
        local_config(
            parser().parse_args(["run", "--pipeline", "x", *state, "--incremental-snapshots"])
        )


def test_malformed_pairs_are_bad_input() -> None:
    with pytest.raises(BadInput, match="key=value"):
        local_config(parser().parse_args(_local("--arg", "novalue")))


def test_pipeline_modules_must_exist_and_define_the_pipeline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(BadInput, match="Cannot import"):
        load_definition("examples.no_such_pipeline")
    with pytest.raises(BadInput, match=r"no define_pipeline\(p\) function$"):
        load_definition("examples")
    assert callable(load_definition("examples.sequence_sum"))
    # A module of the old API is told where to look.
    (tmp_path / "old_pipeline.py").write_text("def build(p):\n    pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    old_api = r"build\(p\) was the old API; see docs/guides/pipeline-api.md"
    with pytest.raises(BadInput, match=old_api):
        load_definition("old_pipeline")


def test_local_mode_claims_the_record_file_and_hears_the_command_line(tmp_path: Path) -> None:
    record = tmp_path / "job" / "record.json"
    arguments = _local("--execution-id", "e-7")
    arguments[arguments.index("--record-file") + 1] = str(record)
    ns = parser().parse_args(arguments)
    mode = open_mode(ns)
    assert isinstance(mode, LocalMode)
    assert isinstance(mode.records, FileRecordStore)
    assert json.loads(record.read_text())["execution"] == {"id": "e-7"}
    assert mode.app_name == "snapshotjob-job-1"
    # The command line's requests come through the job's directory.
    assert mode.poll_termination is not None and mode.poll_termination() is None
    assert mode.poll_export is not None and mode.poll_export() is None
    assert mode.publish_export is not None


def test_the_metrics_port_comes_from_the_option_or_the_operators_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(ENV_METRICS_PORT, raising=False)
    assert parser().parse_args(_local()).metrics_port is None
    assert parser().parse_args(_local("--metrics-port", "0")).metrics_port == 0
    monkeypatch.setenv(ENV_METRICS_PORT, str(DRIVER_METRICS_PORT))
    assert parser().parse_args(_local()).metrics_port == DRIVER_METRICS_PORT
    assert parser().parse_args(_local("--metrics-port", "9500")).metrics_port == 9500
    monkeypatch.setenv(ENV_METRICS_PORT, "metrics")
    with pytest.raises(SystemExit):
        parser().parse_args(_local())


def test_kubernetes_mode_names_its_missing_options_before_calling_the_api() -> None:
    with pytest.raises(BadInput, match="--namespace, --name and --execution-id"):
        open_mode(parser().parse_args(["run", "--kubernetes", "--namespace", "team"]))


def test_bad_input_ends_the_process_with_its_exit_code() -> None:
    assert main(["run"]) == DriverExit.BAD_INPUT
    assert main(["run", "--pipeline", "examples.no_such_pipeline"]) == DriverExit.BAD_INPUT
