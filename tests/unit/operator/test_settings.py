"""The operator's settings from flags and the chart's environment: durable storage, the store."""

from __future__ import annotations

import pytest

from snapshot_operator.settings import parse_settings

pytestmark = pytest.mark.unit

BASE = ["--namespace", "jobs"]


def test_there_is_no_durable_storage_unless_a_bucket_is_given() -> None:
    assert parse_settings(BASE, {}).durable_storage is None
    assert parse_settings(BASE, {"SJ_OPERATOR_DURABLE_PREFIX": "x"}).durable_storage is None


def test_the_chart_s_environment_sets_the_default_durable_storage() -> None:
    settings = parse_settings(
        BASE,
        {
            "SJ_OPERATOR_DURABLE_BUCKET": "snapshots",
            "SJ_OPERATOR_DURABLE_PREFIX": "prod",
            "SJ_OPERATOR_DURABLE_ENDPOINT": "http://s3.storage:9000",
            "SJ_OPERATOR_DURABLE_CREDENTIALS_SECRET": "snapshots-s3",
        },
    )
    storage = settings.durable_storage
    assert storage is not None
    assert (storage.bucket, storage.prefix, storage.endpoint, storage.region) == (
        "snapshots",
        "prod",
        "http://s3.storage:9000",
        "us-east-1",
    )
    assert storage.credentials_secret == "snapshots-s3"


def test_durable_storage_without_a_secret_takes_the_sdks_default_credentials() -> None:
    settings = parse_settings(BASE, {"SJ_OPERATOR_DURABLE_BUCKET": "snapshots"})
    assert settings.durable_storage is not None
    assert settings.durable_storage.credentials_secret is None


@pytest.mark.parametrize(
    ("flags", "named"),
    [
        (["--durable-bucket", "Snapshots", "--durable-credentials-secret", "s3"], "bucket"),
        (["--durable-bucket", "snapshots", "--durable-credentials-secret", "S3"], "credentials"),
        (
            [
                "--durable-bucket",
                "b1",
                "--durable-credentials-secret",
                "s3",
                "--durable-prefix",
                "/x",
            ],
            "prefix",
        ),
    ],
)
def test_an_invalid_durable_storage_stops_the_start_naming_the_field(
    flags: list[str], named: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_settings([*BASE, *flags], {})
    error = capsys.readouterr().err
    assert "Invalid durable storage (--durable-*)" in error
    assert named in error


def test_metrics_and_the_log_format_come_from_flags_or_the_charts_environment() -> None:
    plain = parse_settings(BASE, {})
    assert plain.metrics_port is None
    assert plain.log_format == "text"
    from_env = parse_settings(
        BASE, {"SJ_OPERATOR_METRICS_PORT": "9400", "SJ_OPERATOR_LOG_FORMAT": "json"}
    )
    assert from_env.metrics_port == 9400
    assert from_env.log_format == "json"
    assert parse_settings([*BASE, "--metrics-port", "9500"], {}).metrics_port == 9500


def test_an_unknown_log_format_stops_the_start() -> None:
    with pytest.raises(SystemExit):
        parse_settings([*BASE, "--log-format", "xml"], {})


def test_the_store_label_comes_from_the_charts_environment() -> None:
    assert parse_settings(BASE, {}).store_label is None
    settings = parse_settings(BASE, {"SJ_OPERATOR_STORE_LABEL": "sj.r-snapshotjob-hazelcast"})
    assert settings.store_label == "sj.r-snapshotjob-hazelcast"


@pytest.mark.parametrize("label", ["-store", "store.", "a/b", "x" * 64])
def test_a_store_label_kubernetes_would_refuse_stops_the_start(
    label: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        parse_settings([*BASE, f"--store-label={label}"], {})
    assert "is not a Kubernetes label value" in capsys.readouterr().err
