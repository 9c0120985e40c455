"""The driver runs Spark with the operator's settings: `master: k8s` becomes executor Pods."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from snapshot_operator.manifests import IN_CLUSTER_MASTER, build_driver_pod
from snapshot_operator.reconcile import CreateDriverPod, JobRef
from snapshotjob_contract.pods import EXECUTOR_POD_TEMPLATE_CONF, executor_pod_template
from snapshotjob_contract.spec import SnapshotJobSpec
from spark_runtime.cli import parser
from spark_runtime.execution import BadInput
from spark_runtime.kube_mode import kubernetes_config, with_executor_pod_template
from spark_runtime.local_mode import key_value_pairs

JOB = JobRef(namespace="team", name="sums", uid="u-1")
CREATE = CreateDriverPod("sums-driver-1", "u-1-1", 1, None)


def _job(**spark: Any) -> dict[str, Any]:
    return {
        "metadata": {"uid": JOB.uid, "namespace": JOB.namespace, "name": JOB.name},
        "spec": {
            "image": "snapshotjob/runtime:dev",
            "pipeline": {"module": "examples.sequence_sum"},
            "hazelcast": {"address": "hz:5701"},
            "spark": spark,
        },
    }


def _operator_conf(job: dict[str, Any]) -> dict[str, str]:
    """The ``--conf`` arguments of the driver Pod the operator builds, as the driver reads them."""
    spec = SnapshotJobSpec.model_validate(job["spec"])
    [container] = build_driver_pod(JOB, spec, CREATE)["spec"]["containers"]
    ns = parser().parse_args([*container["command"][3:], *container["args"]])
    return key_value_pairs(ns.conf, "--conf")


def test_master_k8s_runs_on_the_in_cluster_api_server_with_the_operators_settings() -> None:
    job = _job(master="k8s", conf={"spark.sql.shuffle.partitions": "2"})

    config = kubernetes_config(job, _operator_conf(job))

    assert config.master == IN_CLUSTER_MASTER
    assert "spark.master" not in config.spark_conf
    assert config.spark_conf["spark.kubernetes.driver.pod.name"] == CREATE.pod_name
    assert config.spark_conf["spark.kubernetes.namespace"] == JOB.namespace
    assert config.spark_conf["spark.executor.instances"] == "1"
    assert config.spark_conf["spark.sql.shuffle.partitions"] == "2"


def test_a_local_master_still_runs_in_the_driver() -> None:
    job = _job(master="local[2]")

    config = kubernetes_config(job, _operator_conf(job))

    assert config.master == "local[2]"
    assert "spark.kubernetes.namespace" not in config.spark_conf


def test_the_operators_settings_win_over_the_specs_own() -> None:
    job = _job(master="k8s", conf={"a": "spec", "b": "spec"})

    config = kubernetes_config(job, {"spark.master": "local[3]", "a": "operator"})

    assert config.master == "local[3]"
    assert config.spark_conf == {"a": "operator", "b": "spec"}


def test_without_the_operators_settings_the_spec_is_taken_as_it_is() -> None:
    config = kubernetes_config(_job(master="local[2]", conf={"a": "b"}))

    assert (config.master, config.spark_conf) == ("local[2]", {"a": "b"})


def test_executor_pods_get_the_contracts_template(tmp_path: Path) -> None:
    job = _job(master="k8s")

    config = with_executor_pod_template(kubernetes_config(job, _operator_conf(job)), tmp_path)

    template = Path(config.spark_conf[EXECUTOR_POD_TEMPLATE_CONF])
    assert template.parent == tmp_path
    assert json.loads(template.read_text()) == executor_pod_template()
    [container] = executor_pod_template()["spec"]["containers"]
    assert container["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_a_template_named_in_the_spec_is_kept(tmp_path: Path) -> None:
    job = _job(master="k8s", conf={EXECUTOR_POD_TEMPLATE_CONF: "/etc/mine.yaml"})

    config = with_executor_pod_template(kubernetes_config(job, _operator_conf(job)), tmp_path)

    assert config.spark_conf[EXECUTOR_POD_TEMPLATE_CONF] == "/etc/mine.yaml"
    assert list(tmp_path.iterdir()) == []


def test_a_local_master_needs_no_template(tmp_path: Path) -> None:
    config = with_executor_pod_template(kubernetes_config(_job(master="local[2]")), tmp_path)

    assert EXECUTOR_POD_TEMPLATE_CONF not in config.spark_conf
    assert list(tmp_path.iterdir()) == []


def test_master_k8s_without_the_operators_settings_is_bad_input(tmp_path: Path) -> None:
    with pytest.raises(BadInput, match="operator's Spark settings"):
        with_executor_pod_template(kubernetes_config(_job(master="k8s")), tmp_path)


def test_executor_pods_get_the_specs_templates(tmp_path: Path) -> None:
    secret_env = {"name": "PG_DSN", "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}}}
    job = _job(
        master="k8s",
        executor={"podTemplate": {"spec": {"nodeSelector": {"pool": "executors"}}}},
    )
    job["spec"]["podTemplate"] = {
        "spec": {
            "nodeSelector": {"pool": "spark"},
            "tolerations": [{"key": "spark", "operator": "Exists"}],
            "containers": [{"name": "main", "env": [secret_env]}],
        }
    }
    spec = SnapshotJobSpec.model_validate(job["spec"])

    config = with_executor_pod_template(
        kubernetes_config(job, _operator_conf(job)), tmp_path, spec=spec
    )

    template = json.loads(Path(config.spark_conf[EXECUTOR_POD_TEMPLATE_CONF]).read_text())
    assert template["spec"]["nodeSelector"] == {"pool": "executors"}
    assert template["spec"]["tolerations"] == [{"key": "spark", "operator": "Exists"}]
    [container] = template["spec"]["containers"]
    assert container["name"] == "executor"
    assert container["env"] == [secret_env]
    assert template["spec"]["automountServiceAccountToken"] is False


def test_pipeline_args_take_secrets_from_the_drivers_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    job = _job(master="local[2]")
    job["spec"]["pipeline"]["args"] = {"dsn": "$(PG_DSN)", "table": "sums"}
    monkeypatch.setenv("PG_DSN", "postgresql://u:secret@pg/db")
    config = kubernetes_config(job)
    assert config.args == {"dsn": "postgresql://u:secret@pg/db", "table": "sums"}

    monkeypatch.delenv("PG_DSN")
    with pytest.raises(BadInput, match=r"args\.dsn refers to \$\(PG_DSN\)"):
        kubernetes_config(job)
