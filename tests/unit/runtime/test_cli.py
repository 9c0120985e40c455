"""The driver's command line, SnapshotJob reading and termination requests."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from spark_runtime.cli import (
    STATE_PARTITIONS_CONF,
    BadInput,
    TerminationWatcher,
    kubernetes_config,
    load_build,
    local_config,
    parser,
)
from spark_runtime.pipeline import Guarantee
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
            spark={"master": "local[2]", "conf": {STATE_PARTITIONS_CONF: "16", "a": "b"}},
        )
    )
    assert config.settings.job.uid == "u-1"
    assert config.settings.job.namespace == "team"
    assert config.settings.guarantee is Guarantee.AT_LEAST_ONCE
    assert config.settings.snapshot_interval_ms == 3000
    assert config.settings.state_partitions == 16
    assert config.spark_conf == {"a": "b"}
    assert config.master == "local[2]"
    assert config.args == {"end": 5}


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
