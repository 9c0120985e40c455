"""The commands' defaults are a default install's: what the chart's values.yaml sets.

``python -m spark_runtime snapshot`` run against a default install must reach its store with
``--hazelcast <members>`` alone: with another cluster name the client waits for its connect
timeout (20 s) and fails. The operator's own defaults, for a run outside the chart, are the
chart's too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from hazelcast.util import DEFAULT_PORT

from snapshot_operator.settings import parse_settings
from spark_runtime.cli import parser

pytestmark = pytest.mark.unit

VALUES_PATH = (
    Path(__file__).resolve().parents[2] / "charts" / "snapshotjob-operator" / "values.yaml"
)
VALUES: dict[str, Any] = yaml.safe_load(VALUES_PATH.read_text())
SNAPSHOT_ACTIONS = {
    "list": [],
    "inspect": [],
    "validate": [],
    "read": ["--operator", "sums"],
}


@pytest.mark.parametrize("action", list(SNAPSHOT_ACTIONS))
def test_the_snapshot_command_defaults_to_the_charts_store(action: str) -> None:
    ns = parser().parse_args(["snapshot", action, "--map", "m", *SNAPSHOT_ACTIONS[action]])

    assert ns.cluster_name == VALUES["hazelcast"]["clusterName"], (
        f"`snapshot {action} --cluster-name` defaults to {ns.cluster_name!r}, the chart's store "
        f"is {VALUES['hazelcast']['clusterName']!r}: change DEFAULT_CLUSTER_NAME in "
        "spark_runtime/snapshot_command.py"
    )
    assert ns.region == VALUES["durableStorage"]["region"]
    assert ns.prefix == VALUES["durableStorage"]["prefix"]


def test_a_member_given_without_a_port_is_the_charts_port() -> None:
    # `--hazelcast host` without `:port`: the Hazelcast client tries its default port.
    assert VALUES["hazelcast"]["port"] == DEFAULT_PORT


def test_the_operators_defaults_are_the_charts_values() -> None:
    settings = parse_settings(["--all-namespaces"], environ={})
    operator, durable = VALUES["operator"], VALUES["durableStorage"]

    assert settings.store_cluster_name == VALUES["hazelcast"]["clusterName"]
    assert settings.decision.graceful_timeout_seconds == operator["gracefulTimeoutSeconds"]
    assert (
        settings.decision.pipeline_start_timeout_seconds
        == (operator["pipelineStartTimeoutSeconds"])
    )
    assert settings.decision.store_retry_seconds == operator["storeRetrySeconds"]
    assert settings.decision.resync_seconds == operator["resyncSeconds"]
    assert settings.decision.driver_lost_seconds == operator["driverLostSeconds"]
    assert settings.log_level == operator["logLevel"]
    assert settings.log_format.value == operator["logFormat"]
    assert settings.peering_name == VALUES["peering"]["name"]
    assert settings.peering_lifetime_seconds == VALUES["peering"]["lifetimeSeconds"]
    with_bucket = parse_settings(
        ["--all-namespaces", "--durable-bucket", "copies", "--durable-credentials-secret", "s"],
        environ={},
    )
    assert with_bucket.durable_storage is not None
    assert with_bucket.durable_storage.region == durable["region"]
    assert with_bucket.durable_storage.prefix == durable["prefix"]
