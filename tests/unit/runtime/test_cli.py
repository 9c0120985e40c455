"""The driver's command line, SnapshotJob reading, termination and export requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_runtime.cli import (
    DEFAULT_STATE_PARTITIONS,
    ENV_INITIAL_SNAPSHOT_NAME,
    BadInput,
    TerminationWatcher,
    kubernetes_config,
    load_build,
    local_config,
    parser,
)
from spark_runtime.driver import ExportRequest
from spark_runtime.guarantee import Guarantee
from spark_runtime.protocol import TerminationMode


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
    assert config.settings.guarantee is Guarantee.NONE
    assert config.settings.store.members == ("127.0.0.1:5701", "127.0.0.1:5702")
    assert config.settings.job.uid == "job-1"
    assert ns.record_file == Path("/tmp/record.json")
    assert config.settings.initial_snapshot_name is None


def test_local_mode_can_start_from_an_exported_snapshot() -> None:
    config = local_config(parser().parse_args(_local("--initial-snapshot-name", "golden")))
    assert config.settings.initial_snapshot_name == "golden"


def test_local_mode_names_every_missing_option() -> None:
    ns = parser().parse_args(["run", "--pipeline", "x"])
    with pytest.raises(BadInput, match="--record-file, --hazelcast, --job-uid"):
        local_config(ns)


def test_malformed_pairs_are_bad_input() -> None:
    with pytest.raises(BadInput, match="key=value"):
        local_config(parser().parse_args(_local("--arg", "novalue")))


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u-1", "namespace": "team", "name": "sums"},
        "spec": {"pipeline": {"module": "examples.sequence_sum", "args": {"end": 5}}, **spec},
    }


def test_kubernetes_mode_reads_the_snapshotjob() -> None:
    config = kubernetes_config(
        _job(
            processingGuarantee="AT_LEAST_ONCE",
            snapshotIntervalSeconds=3,
            hazelcast={"address": "hz:5701", "clusterName": "prod"},
            statePartitions=16,
            spark={"master": "local[2]", "conf": {"snapshotjob.statePartitions": "4", "a": "b"}},
        )
    )
    assert config.settings.job.uid == "u-1"
    assert config.settings.job.namespace == "team"
    assert config.settings.guarantee is Guarantee.AT_LEAST_ONCE
    assert config.settings.snapshot_interval_ms == 3000
    assert config.settings.state_partitions == 16
    # The old conf key means nothing any more: it is passed to Spark like any other.
    assert config.spark_conf == {"snapshotjob.statePartitions": "4", "a": "b"}
    assert config.master == "local[2]"
    assert config.args == {"end": 5}


def test_state_partitions_default_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    assert kubernetes_config(_job()).settings.state_partitions == DEFAULT_STATE_PARTITIONS == 8
    with pytest.raises(BadInput, match="statePartitions"):
        kubernetes_config(_job(statePartitions="many"))
    with pytest.raises(BadInput, match="at least 1"):
        kubernetes_config(_job(statePartitions=-2))


def test_initial_snapshot_name_comes_from_the_operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    monkeypatch.delenv(ENV_INITIAL_SNAPSHOT_NAME, raising=False)
    assert kubernetes_config(_job()).settings.initial_snapshot_name is None
    monkeypatch.setenv(ENV_INITIAL_SNAPSHOT_NAME, "golden")
    assert kubernetes_config(_job()).settings.initial_snapshot_name == "golden"


def test_kubernetes_mode_needs_a_store_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SJ_HAZELCAST_ADDRESS", raising=False)
    with pytest.raises(BadInput, match="Hazelcast address"):
        kubernetes_config(_job())


def _status(request_id: str, mode: str, export: str | None = None) -> dict[str, Any]:
    termination = {"mode": mode, "requestId": request_id, "reason": "test"}
    if export is not None:
        termination["exportName"] = export
    return {"status": {"termination": termination}}


def test_each_termination_request_is_handed_over_once() -> None:
    watcher = TerminationWatcher(dict)
    watcher.observe(_status("r1", "CANCEL_GRACEFUL", "final"))
    request = watcher.poll()
    assert request is not None
    assert request.mode is TerminationMode.CANCEL_GRACEFUL
    assert request.export_name == "final"
    watcher.observe(_status("r1", "CANCEL_GRACEFUL", "final"))
    assert watcher.poll() is None
    watcher.observe({"status": {}})
    assert watcher.poll() is None


def test_malformed_termination_requests_are_ignored() -> None:
    watcher = TerminationWatcher(dict)
    watcher.observe(_status("r2", "RESTART_SOMETIMES"))
    watcher.observe(_status("r3", "SUSPEND_FORCEFUL", "export-of-a-forceful-stop"))
    assert watcher.poll() is None


def test_pipeline_modules_must_exist_and_define_build() -> None:
    with pytest.raises(BadInput, match="Cannot import"):
        load_build("examples.no_such_pipeline")
    with pytest.raises(BadInput, match="no build"):
        load_build("examples")
    assert callable(load_build("examples.sequence_sum"))


def _export_status(request_id: str, name: str) -> dict[str, Any]:
    return {
        "status": {
            "exportRequest": {
                "name": name,
                "requestId": request_id,
                "requestedAt": "2026-01-01T00:00:00Z",
            }
        }
    }


def test_each_export_request_is_handed_over_once() -> None:
    watcher = TerminationWatcher(dict)
    watcher.observe(_export_status("e1", "nightly"))
    assert watcher.poll_export() == ExportRequest("nightly", "e1")
    assert watcher.poll() is None  # not a termination request
    watcher.observe(_export_status("e1", "nightly"))
    assert watcher.poll_export() is None
    # The operator timed out and asks again under a new id.
    watcher.observe(_export_status("e2", "nightly"))
    assert watcher.poll_export() == ExportRequest("nightly", "e2")


def test_export_and_termination_requests_are_read_from_one_status() -> None:
    watcher = TerminationWatcher(dict)
    both = _export_status("e1", "nightly")
    both["status"]["termination"] = {"mode": "SUSPEND_GRACEFUL", "requestId": "t1"}
    watcher.observe(both)
    request = watcher.poll()
    assert request is not None and request.mode is TerminationMode.SUSPEND_GRACEFUL
    assert watcher.poll_export() == ExportRequest("nightly", "e1")


def test_export_request_without_a_name_is_ignored() -> None:
    watcher = TerminationWatcher(dict)
    watcher.observe({"status": {"exportRequest": {"requestId": "e1"}}})
    assert watcher.poll_export() is None
