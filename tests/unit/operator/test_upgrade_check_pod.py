"""The upgrade check's Pod (upgrade_check_pod.py): the new driver's Pod with another command."""

from __future__ import annotations

import json

from snapshot_operator.reconcile import JobRef
from snapshot_operator.reconcile.actions import CreateUpgradeCheckPod
from snapshot_operator.reconcile.observation import PodPhase
from snapshot_operator.reconcile.observe import (
    LABEL_EXECUTION_ID,
    parse_driver_pod,
    parse_upgrade_check_pod,
)
from snapshot_operator.upgrade_check_pod import build_upgrade_check_pod
from snapshotjob_contract import SnapshotJobSpec
from snapshotjob_contract.observability import LogFormat
from snapshotjob_contract.pods import LABEL_STORE
from tests.unit.operator.decide_helpers import spec_of

JOB = JobRef(namespace="analytics", name="wordcount", uid="0b7e6c1a-uid")
ACTION = CreateUpgradeCheckPod(
    "wordcount-check-0123456789", "0123456789abcdef", ("__sj.m.1", "__sj.m.0")
)


def _pod(spec: SnapshotJobSpec) -> dict[str, object]:
    return build_upgrade_check_pod(
        JOB,
        spec,
        ACTION,
        store_address="store-hazelcast.sj:5701",
        store_cluster_name="snapshots",
        store_label="store",
        service_account=None,
        log_format=LogFormat.JSON,
        image_pull_secrets=["pull"],
        timeout_seconds=600,
    )


def test_it_validates_the_restore_point_with_the_new_image_and_pipeline() -> None:
    spec = spec_of(
        {
            "image": "registry.example/pipelines:2",
            "pipeline": {"module": "pipelines.v2", "args": {"dsn": "$(PG_DSN)", "keys": 5}},
            "podTemplate": {
                "spec": {
                    "containers": [{"name": "main", "env": [{"name": "PG_DSN", "value": "x"}]}]
                }
            },
        }
    )

    pod = _pod(spec)

    spec_part = pod["spec"]
    assert isinstance(spec_part, dict)
    (container,) = spec_part["containers"]
    assert container["image"] == "registry.example/pipelines:2"
    assert container["command"] == ["python", "-m", "spark_runtime", "snapshot", "validate"]
    assert "--compatibility-only" in container["args"]
    args = dict(a.removeprefix("--").split("=", 1) for a in container["args"] if "=" in a)
    assert args["map"] == "__sj.m.1,__sj.m.0"
    assert args["hazelcast"] == "store-hazelcast.sj:5701" and args["cluster-name"] == "snapshots"
    assert args["pipeline"] == "pipelines.v2"
    assert json.loads(args["args-json"]) == {"dsn": "$(PG_DSN)", "keys": 5}
    # The environment the driver would have, the template's included, for the definition.
    assert {"name": "PG_DSN", "value": "x"} in container["env"]
    assert spec_part["activeDeadlineSeconds"] == 600
    assert spec_part["restartPolicy"] == "Never"
    assert "ports" not in container


def test_it_is_no_driver_and_reads_back_as_the_check_of_its_spec() -> None:
    pod = _pod(spec_of())
    metadata = pod["metadata"]
    assert isinstance(metadata, dict)
    labels = metadata["labels"]

    assert LABEL_EXECUTION_ID not in labels
    assert labels[LABEL_STORE] == "store"
    assert parse_driver_pod(pod) is None
    ended = {
        **pod,
        "status": {
            "phase": "Failed",
            "containerStatuses": [
                {
                    "name": "check",
                    "state": {"terminated": {"exitCode": 78, "message": "operators differ"}},
                }
            ],
        },
    }
    check = parse_upgrade_check_pod(ended)
    assert check is not None
    assert (check.name, check.spec_hash, check.phase, check.exit_code) == (
        ACTION.pod_name,
        ACTION.spec_hash,
        PodPhase.FAILED,
        78,
    )
    assert check.message is not None and "operators differ" in check.message


def test_an_external_store_is_the_specs() -> None:
    spec = spec_of({"hazelcast": {"address": "hz.example:5701", "clusterName": "ext"}})
    spec_part = _pod(spec)["spec"]
    assert isinstance(spec_part, dict)

    args = spec_part["containers"][0]["args"]

    assert "--hazelcast=hz.example:5701" in args and "--cluster-name=ext" in args
