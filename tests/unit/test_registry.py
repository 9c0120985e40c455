"""The test bed registry's Python face (``testbed/registry.py``): what it hands to Kubernetes.

Why: a pull Secret the kubelet cannot read, or chart values that name the registry the wrong
way, fail only on kind, minutes into the cluster tier, as a Pod stuck in ``ErrImagePull``.
These tests pin the shapes here; ``tests/integration/test_cluster.py`` pulls with them.
"""

from __future__ import annotations

import base64
import json
from pathlib import Path

from testbed.registry import CHART_NAME, Registry, parse_env

ENV = """SJ_REGISTRY_PUSH=127.0.0.1:5000
SJ_REGISTRY_PULL=sj-registry:5000
SJ_REGISTRY_USER=snapshotjob
SJ_REGISTRY_PASSWORD_FILE={password}
SJ_REGISTRY_CA=/cache/registry/ca.crt
SJ_REGISTRY_SECRET=sj-registry
DOCKER_CONFIG=/cache/registry/docker
HELM_REGISTRY_CONFIG=/cache/registry/helm/registry.json
"""


def _registry(tmp_path: Path) -> Registry:
    password = tmp_path / "password"
    password.write_text("s3cret\n")
    return parse_env(ENV.format(password=password))


def test_the_pull_secret_is_a_dockerconfigjson_for_the_nodes_name_of_the_registry(
    tmp_path: Path,
) -> None:
    registry = _registry(tmp_path)

    secret = registry.pull_secret("jobs")

    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert secret["metadata"] == {"name": "sj-registry", "namespace": "jobs"}
    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    # The nodes pull from sj-registry:5000; a Secret for 127.0.0.1:5000 would never match.
    assert list(config["auths"]) == ["sj-registry:5000"]
    auth = config["auths"]["sj-registry:5000"]
    assert (auth["username"], auth["password"]) == ("snapshotjob", "s3cret")
    assert base64.b64decode(auth["auth"]).decode() == "snapshotjob:s3cret"


def test_a_wrong_password_makes_a_secret_of_another_name(tmp_path: Path) -> None:
    secret = _registry(tmp_path).pull_secret("jobs", name="wrong", password="nope")

    config = json.loads(base64.b64decode(secret["data"][".dockerconfigjson"]))
    assert secret["metadata"]["name"] == "wrong"
    assert config["auths"]["sj-registry:5000"]["password"] == "nope"


def test_chart_values_put_the_registry_before_the_images_and_the_secret_on_every_pod(
    tmp_path: Path,
) -> None:
    registry = _registry(tmp_path)

    values = registry.chart_values()

    assert values == {
        "global": {"imageRegistry": "sj-registry:5000"},
        "imagePullSecrets": [{"name": "sj-registry"}],
        "jobs": {"imagePullSecrets": [{"name": "sj-registry"}]},
    }
    ref = "sj-registry:5000/snapshotjob/runtime-e2e@sha256:" + "ab" * 32
    assert registry.repository(ref) == ("snapshotjob/runtime-e2e", "sha256:" + "ab" * 32)


def test_helm_reads_the_chart_from_this_machine_s_name_with_the_ca_and_the_login(
    tmp_path: Path,
) -> None:
    registry = _registry(tmp_path)

    assert registry.chart_url == f"oci://127.0.0.1:5000/charts/{CHART_NAME}"
    assert registry.helm_args() == [
        "--registry-config",
        "/cache/registry/helm/registry.json",
        "--ca-file",
        "/cache/registry/ca.crt",
    ]
