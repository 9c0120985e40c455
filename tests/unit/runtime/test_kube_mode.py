"""Kubernetes mode: the job read from its SnapshotJob, exports listed in its status."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, cast

import pytest

from snapshot_protocol import ExportIdentity, TerminationMode
from snapshot_protocol.incremental import ChainPolicy
from snapshotjob_contract.spec import DEFAULT_STATE_PARTITIONS, ProcessingGuarantee
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.execution import BadInput
from spark_runtime.kube_mode import ENV_INITIAL_SNAPSHOT_NAME, KubernetesMode, kubernetes_config
from spark_runtime.kube_record_store import KubernetesRecordStore
from spark_runtime.kube_requests import OperatorRequestPoller


def _job(**spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": "u-1", "namespace": "team", "name": "sums"},
        "spec": {
            "image": "snapshotjob/runtime:dev",
            "pipeline": {"module": "examples.sequence_sum", "args": {"end": 5}},
            **spec,
        },
    }


def test_kubernetes_mode_reads_the_snapshotjob() -> None:
    config = kubernetes_config(
        _job(
            processingGuarantee="AT_LEAST_ONCE",
            snapshotIntervalSeconds=3,
            hazelcast={"address": "hz:5701", "clusterName": "prod", "backupCount": 3},
            statePartitions=16,
            incrementalSnapshots=True,
            snapshotChains={"maxDeltas": 32},
            spark={"master": "local[2]", "conf": {"snapshotjob.statePartitions": "4", "a": "b"}},
        )
    )
    # Incremental: the driver's snapshots go to the chain map and may build on each other,
    # in chains of at most 32 deltas (and the default half of the full version in bytes).
    assert config.settings.job.incremental
    assert config.settings.chain_policy == ChainPolicy(32, 0.5)
    assert config.settings.job.uid == "u-1"
    assert config.settings.job.namespace == "team"
    assert config.settings.guarantee is ProcessingGuarantee.AT_LEAST_ONCE
    assert config.settings.snapshot_interval_ms == 3000
    assert config.settings.state_partitions == 16
    # The backup count names the maps the driver writes, so the members give them 3 backups.
    assert config.settings.job.backup_count == 3
    # The old conf key means nothing any more: it is passed to Spark like any other.
    assert config.spark_conf == {"snapshotjob.statePartitions": "4", "a": "b"}
    assert config.master == "local[2]"
    assert config.args == {"end": 5}


def test_state_partitions_default_and_validation(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    assert kubernetes_config(_job()).settings.state_partitions == DEFAULT_STATE_PARTITIONS == 8
    assert kubernetes_config(_job()).settings.job.backup_count == 1
    assert not kubernetes_config(_job()).settings.job.incremental
    assert kubernetes_config(_job()).settings.chain_policy == ChainPolicy()
    with pytest.raises(BadInput, match="statePartitions"):
        kubernetes_config(_job(statePartitions="many"))
    with pytest.raises(
        BadInput, match="statePartitions: Input should be greater than or equal to 1"
    ):
        kubernetes_config(_job(statePartitions=-2))


def test_initial_snapshot_name_comes_from_the_operator_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    monkeypatch.delenv(ENV_INITIAL_SNAPSHOT_NAME, raising=False)
    assert kubernetes_config(_job()).settings.initial_snapshot_name is None
    monkeypatch.setenv(ENV_INITIAL_SNAPSHOT_NAME, "golden")
    assert kubernetes_config(_job()).settings.initial_snapshot_name == "golden"
    assert kubernetes_config(_job()).settings.initial_snapshot_identity is None
    monkeypatch.setenv("SJ_INITIAL_SNAPSHOT_JOB_UID", "0b5e-uid")
    monkeypatch.setenv("SJ_INITIAL_SNAPSHOT_ID", "7")
    identity = kubernetes_config(_job()).settings.initial_snapshot_identity
    assert identity == ExportIdentity("0b5e-uid", 7)


@pytest.mark.parametrize(
    ("job_uid", "snapshot_id"), [("0b5e-uid", ""), ("", "7"), ("0b5e-uid", "seven")]
)
def test_a_half_or_malformed_export_identity_is_bad_input(
    monkeypatch: pytest.MonkeyPatch, job_uid: str, snapshot_id: str
) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    monkeypatch.setenv("SJ_INITIAL_SNAPSHOT_JOB_UID", job_uid)
    monkeypatch.setenv("SJ_INITIAL_SNAPSHOT_ID", snapshot_id)
    with pytest.raises(BadInput, match="SJ_INITIAL_SNAPSHOT_ID must both be set"):
        kubernetes_config(_job())


def test_durable_storage_and_consent_come_from_the_operator_env(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    for name in ("SJ_DURABLE_BUCKET", "SJ_DURABLE_RESTORE"):
        monkeypatch.delenv(name, raising=False)
    settings = kubernetes_config(_job()).settings
    assert (settings.durable_storage, settings.durable_restore) == (None, None)
    monkeypatch.setenv("SJ_DURABLE_BUCKET", "snapshots")
    monkeypatch.setenv("SJ_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS", "30")
    monkeypatch.setenv("SJ_DURABLE_RESTORE", "12:17")
    settings = kubernetes_config(_job()).settings
    assert settings.durable_storage is not None
    assert (settings.durable_storage.bucket, settings.durable_storage.snapshot_copy_interval_s) == (
        "snapshots",
        30.0,
    )
    assert settings.durable_restore == (12, 17)
    monkeypatch.setenv("SJ_DURABLE_RESTORE", "12")
    with pytest.raises(BadInput, match="SJ_DURABLE_RESTORE must be <acceptSnapshotId>:"):
        kubernetes_config(_job())


def test_kubernetes_mode_needs_a_store_address(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SJ_HAZELCAST_ADDRESS", raising=False)
    with pytest.raises(BadInput, match="Hazelcast address"):
        kubernetes_config(_job())


class _Records:
    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []

    def append_exported_snapshot(self, **entry: Any) -> None:
        self.entries.append(entry)


def test_kubernetes_mode_lists_exports_in_the_status_and_polls_the_operator() -> None:
    records = _Records()
    requests = OperatorRequestPoller(dict)
    mode = KubernetesMode(
        kubernetes_config(_job(hazelcast={"address": "hz:5701"})),
        cast(KubernetesRecordStore, records),
        requests,
        "snapshotjob-team-sums",
    )
    assert mode.publish_export is not None
    mode.publish_export(
        ExportedSnapshot(
            name="nightly",
            snapshot_id=12,
            num_bytes=345,
            created_at=datetime(2026, 1, 1, tzinfo=UTC),
            terminal=True,
            durable_location="s3://snapshots/__sj.export.team.nightly/12",
        )
    )
    assert records.entries == [
        {
            "name": "nightly",
            "snapshot_id": 12,
            "num_bytes": 345,
            "created_at": datetime(2026, 1, 1, tzinfo=UTC),
            "terminal": True,
            "durable_location": "s3://snapshots/__sj.export.team.nightly/12",
        }
    ]
    termination = {
        "mode": "SUSPEND_GRACEFUL",
        "requestId": "t",
        "requestedAt": "2026-01-01T00:00:00Z",
        "reason": "SuspendRequested",
    }
    requests.observe({"status": {"termination": termination}})
    assert mode.poll_termination is not None
    request = mode.poll_termination()
    assert request is not None and request.mode is TerminationMode.SUSPEND_GRACEFUL


def test_snapshot_keys_come_from_the_operators_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    monkeypatch.delenv("SJ_SNAPSHOT_KEY_IDS", raising=False)
    assert kubernetes_config(_job()).settings.snapshot_keys is None
    monkeypatch.setenv("SJ_SNAPSHOT_KEY_IDS", "k2,k1")
    monkeypatch.setenv("SJ_SNAPSHOT_KEY_0", "n" * 48)
    monkeypatch.setenv("SJ_SNAPSHOT_KEY_1", "o" * 32)
    keys = kubernetes_config(_job()).settings.snapshot_keys
    assert keys is not None and keys.signing_key_id == "k2" and not keys.accept_unsigned
    assert dict(keys.keys) == {"k2": b"n" * 48, "k1": b"o" * 32}


@pytest.mark.parametrize(
    ("value", "named"),
    [("", "key 'k1' is empty"), ("short", "key 'k1' has 5 bytes; a key needs at least 32")],
)
def test_an_empty_or_short_snapshot_key_is_bad_input_naming_it(
    monkeypatch: pytest.MonkeyPatch, value: str, named: str
) -> None:
    monkeypatch.setenv("SJ_HAZELCAST_ADDRESS", "hz:5701")
    monkeypatch.setenv("SJ_SNAPSHOT_KEY_IDS", "k1")
    monkeypatch.setenv("SJ_SNAPSHOT_KEY_0", value)
    with pytest.raises(BadInput, match=named):
        kubernetes_config(_job())
