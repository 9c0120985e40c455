"""Rendering the chart with the built ``helm``: the helpers of the chart's test modules."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import yaml

from tests.fixtures.kube import binary

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "snapshotjob-operator"
RELEASE = "sj"
NAMESPACE = "snapshots"


def run_helm(*args: str) -> subprocess.CompletedProcess[str]:
    """Runs the built helm binary."""
    return subprocess.run(
        [str(binary("helm")), *args], capture_output=True, text=True, timeout=60, check=False
    )


def helm(*args: str) -> str:
    """Runs the built helm binary; fails the test with helm's message if it fails."""
    result = run_helm(*args)
    assert result.returncode == 0, result.stderr
    return result.stdout


def render(*sets: str, values: tuple[Path, ...] = (), chart: Path = CHART) -> list[dict[str, Any]]:
    """Renders the chart's templates (the test hook included) with values files and ``--set``."""
    args = ["template", RELEASE, str(chart), "--namespace", NAMESPACE]
    for path in values:
        args += ["--values", str(path)]
    for value in sets:
        args += ["--set", value]
    return [doc for doc in yaml.safe_load_all(helm(*args)) if doc]


def covers(rules: list[dict[str, Any]], wanted: dict[str, Any]) -> bool:
    """Whether some rule grants every verb of ``wanted`` on each of its resources."""
    for resource in wanted["resources"]:
        for verb in wanted["verbs"]:
            if not any(
                set(wanted["apiGroups"]) <= set(rule["apiGroups"])
                and resource in rule["resources"]
                and verb in rule["verbs"]
                and "resourceNames" not in rule
                for rule in rules
            ):
                return False
    return True


def by_kind(objects: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    """The rendered objects of one kind."""
    return [obj for obj in objects if obj["kind"] == kind]


def operator(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The operator's Deployment."""
    [deployment] = by_kind(objects, "Deployment")
    return deployment


def pod_specs(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The Pod templates of the operator's Deployment and of the members' StatefulSet."""
    (statefulset,) = by_kind(objects, "StatefulSet")
    return {
        "operator": operator(objects)["spec"]["template"],
        "hazelcast": statefulset["spec"]["template"],
    }


def values_file(tmp_path: Path, name: str, values: dict[str, Any]) -> Path:
    """A values file with ``values``, for ``render(values=...)``."""
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return path


def member_config(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The members' rendered ``hazelcast.yaml``, parsed."""
    (config,) = [
        obj for obj in by_kind(objects, "ConfigMap") if "hazelcast.yaml" in (obj.get("data") or {})
    ]
    parsed: dict[str, Any] = yaml.safe_load(config["data"]["hazelcast.yaml"])
    return parsed


def member_env(objects: list[dict[str, Any]]) -> dict[str, Any]:
    """The member container's environment: a value, or its ``valueFrom``."""
    container = pod_specs(objects)["hazelcast"]["spec"]["containers"][0]
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def assert_schema_refuses(value: str, wrong: str) -> None:
    """``helm template --set value`` fails on the values schema, naming ``wrong``."""
    result = run_helm("template", RELEASE, str(CHART), "--set", value)
    assert result.returncode != 0, f"{value} was accepted"
    assert "schema" in result.stderr, result.stderr
    assert wrong in result.stderr, result.stderr
