"""The installation's image pull Secrets reach every job's driver Pod and its executors."""

from __future__ import annotations

from typing import Any

import pytest

from snapshot_operator.manifests import PULL_SECRETS_CONF, build_driver_pod, driver_spark_conf
from snapshot_operator.reconcile import CreateDriverPod, JobRef
from snapshot_operator.settings import parse_settings
from snapshotjob_contract import SnapshotJobSpec

pytestmark = pytest.mark.unit

JOB = JobRef(namespace="analytics", name="wordcount", uid="0b7e6c1a-uid")
CREATE = CreateDriverPod("wordcount-driver-3", "0b7e6c1a-uid-3", 3, None)
SECRETS = ("registry-a", "registry-b")


def spec(**fields: Any) -> SnapshotJobSpec:
    return SnapshotJobSpec.model_validate(
        {"image": "registry.example/sj:1", "pipeline": {"module": "pipelines.wordcount"}, **fields}
    )


def test_the_chart_s_environment_and_the_flag_name_the_secrets() -> None:
    env = {"SJ_OPERATOR_JOB_IMAGE_PULL_SECRETS": "registry-a, registry-b"}
    assert parse_settings(["-A"], env).job_image_pull_secrets == SECRETS
    flag = ["-A", "--job-image-pull-secrets", "registry-c"]
    assert parse_settings(flag, env).job_image_pull_secrets == ("registry-c",)
    assert (
        parse_settings(["-A"], {"SJ_OPERATOR_JOB_IMAGE_PULL_SECRETS": ""}).job_image_pull_secrets
        == ()
    )


def test_the_driver_pod_and_the_executors_get_the_installation_s_secrets() -> None:
    pod = build_driver_pod(JOB, spec(), CREATE, image_pull_secrets=SECRETS)
    assert pod["spec"]["imagePullSecrets"] == [{"name": "registry-a"}, {"name": "registry-b"}]
    assert driver_spark_conf(JOB, spec(), CREATE.pod_name, SECRETS)[PULL_SECRETS_CONF] == (
        "registry-a,registry-b"
    )


def test_without_secrets_nothing_is_added() -> None:
    pod = build_driver_pod(JOB, spec(), CREATE)
    assert "imagePullSecrets" not in pod["spec"]
    assert PULL_SECRETS_CONF not in driver_spark_conf(JOB, spec(), CREATE.pod_name)


def test_the_pod_templates_secrets_come_first_and_none_is_listed_twice() -> None:
    job = spec(
        podTemplate={"spec": {"imagePullSecrets": [{"name": "team"}, {"name": "registry-b"}]}},
        spark={"driver": {"podTemplate": {"spec": {"imagePullSecrets": [{"name": "driver"}]}}}},
    )
    pod = build_driver_pod(JOB, job, CREATE, image_pull_secrets=SECRETS)
    assert [item["name"] for item in pod["spec"]["imagePullSecrets"]] == [
        "team",
        "registry-b",
        "driver",
        "registry-a",
    ]


def test_executors_get_the_secrets_their_templates_lack_after_those_of_spark_conf() -> None:
    job = spec(
        podTemplate={"spec": {"imagePullSecrets": [{"name": "registry-a"}]}},
        spark={
            "conf": {PULL_SECRETS_CONF: "own, registry-b"},
            "executor": {"podTemplate": {"spec": {"imagePullSecrets": [{"name": "exec"}]}}},
        },
    )
    conf = driver_spark_conf(JOB, job, CREATE.pod_name, (*SECRETS, "exec"))
    # Spark adds the conf's Secrets to its executor pod template's (spec.podTemplate and the
    # executor's): registry-a and exec are there already.
    assert conf[PULL_SECRETS_CONF] == "own,registry-b"


def test_a_local_master_starts_no_executor_pods_so_gets_no_conf() -> None:
    conf = driver_spark_conf(JOB, spec(spark={"master": "local[2]"}), CREATE.pod_name, SECRETS)
    assert PULL_SECRETS_CONF not in conf
