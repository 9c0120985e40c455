"""The chart's values: documented, typed by values.schema.json, and the README's table current.

Pure file checks (no helm; tests/integration/test_chart.py has helm validate and render): each
value in values.yaml has a comment, the schema names exactly the keys of values.yaml and
refuses others, the defaults and values-local.yaml meet the schema's types and bounds,
values-local.yaml fits a small kind cluster, the README's table is what
``python charts/values_doc.py`` writes, and the dashboard only queries served metrics.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

from snapshotjob_contract.observability import DRIVER_METRICS, OPERATOR_METRICS, MetricType
from tests.script_modules import load_script

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "snapshotjob-operator"


def _values_doc() -> ModuleType:
    return load_script("values_doc", REPO / "charts" / "values_doc.py")


values_doc = _values_doc()
SCHEMA: dict[str, Any] = json.loads((CHART / "values.schema.json").read_text())
VALUES: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text())
LOCAL: dict[str, Any] = yaml.safe_load((CHART / "values-local.yaml").read_text())


def resolve(node: dict[str, Any]) -> dict[str, Any]:
    ref = node.get("$ref")
    if isinstance(ref, str):
        resolved: dict[str, Any] = SCHEMA["definitions"][ref.removeprefix("#/definitions/")]
        return resolved
    return node


_TYPES: dict[str, Any] = {
    "object": dict,
    "array": list,
    "string": str,
    "boolean": bool,
    "null": type(None),
}


def _is(kind: str, value: Any) -> bool:
    if kind == "integer":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return isinstance(value, _TYPES[kind])


def problems(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """What of JSON Schema draft-07 the chart's schema uses, checked on one value."""
    node = resolve(node)
    if "anyOf" in node:
        if all(problems(option, value, path) for option in node["anyOf"]):
            return [f"{path}: {value!r} matches none of {node['anyOf']}"]
        return []
    found = []
    kinds = node.get("type")
    if kinds is not None:
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if not any(_is(kind, value) for kind in kinds):
            return [f"{path}: {value!r} is not {kinds}"]
    if "enum" in node and value not in node["enum"]:
        found.append(f"{path}: {value!r} not in {node['enum']}")
    if _is("number", value):
        if "minimum" in node and value < node["minimum"]:
            found.append(f"{path}: {value} < {node['minimum']}")
        if "maximum" in node and value > node["maximum"]:
            found.append(f"{path}: {value} > {node['maximum']}")
        if "exclusiveMinimum" in node and value <= node["exclusiveMinimum"]:
            found.append(f"{path}: {value} <= {node['exclusiveMinimum']}")
    if isinstance(value, str) and "pattern" in node and not re.search(node["pattern"], value):
        found.append(f"{path}: {value!r} does not match {node['pattern']}")
    if isinstance(value, dict):
        properties = node.get("properties", {})
        extra = node.get("additionalProperties", True)
        for key, item in value.items():
            where = f"{path}.{key}" if path else key
            if key in properties:
                found += problems(properties[key], item, where)
            elif extra is False:
                found.append(f"{where}: not allowed")
            elif isinstance(extra, dict):
                found += problems(extra, item, where)
        for key in node.get("required", []):
            if key not in value:
                found.append(f"{path}.{key}: required")
    if isinstance(value, list) and "items" in node:
        for index, item in enumerate(value):
            found += problems(node["items"], item, f"{path}[{index}]")
    return found


def test_every_value_has_a_comment() -> None:
    assert values_doc.undocumented() == []


def test_the_readme_table_is_generated_from_values_yaml() -> None:
    current = (CHART / "README.md").read_text()
    assert values_doc.readme(current) == current, (
        "charts/snapshotjob-operator/README.md is out of date: run python charts/values_doc.py"
    )


def _mappings(values: dict[str, Any], path: str = "") -> dict[str, dict[str, Any]]:
    """Every block mapping of values.yaml (not the one-line flow ones), by dotted path."""
    flow = values_doc.flow_keys((CHART / "values.yaml").read_text())
    out = {path: values}
    for key, value in values.items():
        where = f"{path}.{key}" if path else key
        if isinstance(value, dict) and value and where not in flow:
            out |= _mappings(value, where)
    return out


def test_the_schema_names_exactly_the_keys_of_values_yaml_and_refuses_others() -> None:
    for path, mapping in _mappings(VALUES).items():
        node = values_doc.schema_at(SCHEMA, path) if path else SCHEMA
        assert node is not None, f"{path} is not in values.schema.json"
        keys = set(node["properties"])
        assert keys == set(mapping), f"{path or 'the root'}: schema {keys} != values {set(mapping)}"
        # Helm's global values are shared with a parent chart, whose keys they may hold too.
        if path != "global":
            assert node.get("additionalProperties") is False, f"{path}: a typo would pass"
    for path in values_doc.leaves(
        VALUES, values_doc.flow_keys((CHART / "values.yaml").read_text())
    ):
        node = values_doc.schema_at(SCHEMA, path)
        assert node is not None and ("type" in node or "anyOf" in node), path
        assert node.get("description") or resolve(node).get("description"), path


@pytest.mark.parametrize("name", ["values.yaml", "values-local.yaml"])
def test_the_chart_values_files_meet_the_schema(name: str) -> None:
    values = yaml.safe_load((CHART / name).read_text())
    assert problems(SCHEMA, values) == []


def test_the_check_above_sees_what_helm_would_refuse() -> None:
    assert problems(SCHEMA, {"operator": {"replica": 2}}) == ["operator.replica: not allowed"]
    assert problems(SCHEMA, {"operator": {"logLevel": "TRACE"}})
    assert problems(SCHEMA, {"hazelcast": {"replicas": 0}})
    assert problems(SCHEMA, {"durableStorage": {"snapshotCopyIntervalSeconds": 5}})
    assert not problems(SCHEMA, {"durableStorage": {"snapshotCopyIntervalSeconds": 60}})


def _cpu(quantity: str | float) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def _bytes(quantity: str) -> float:
    units = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30}
    return (
        float(quantity[:-2]) * units[quantity[-2:]] if quantity[-2:] in units else float(quantity)
    )


def test_values_local_fits_a_small_kind_cluster() -> None:
    """Every kind node reports the machine's 2 CPUs and its control plane requests about one:
    with the production requests, members stayed Pending for CPU."""
    merged = {
        part: VALUES[part] | LOCAL.get(part, {}) for part in ("operator", "hazelcast", "tests")
    }
    operators, members = merged["operator"]["replicas"], merged["hazelcast"]["replicas"]
    operator, member = merged["operator"]["resources"], merged["hazelcast"]["resources"]
    cpu = operators * _cpu(operator["requests"]["cpu"]) + members * _cpu(member["requests"]["cpu"])
    memory = operators * _bytes(operator["requests"]["memory"]) + members * _bytes(
        member["requests"]["memory"]
    )
    assert cpu <= 0.25, cpu
    assert memory <= 2 * 2**30, memory
    assert members >= 3, "the majority quorum must survive one member's loss"
    heap = merged["hazelcast"]["heap"]
    assert _bytes(heap.upper().replace("M", "Mi").replace("G", "Gi")) < _bytes(
        member["limits"]["memory"]
    )
    for part in ("operator", "hazelcast"):
        assert merged[part]["image"]["pullPolicy"] == "Never"
    # The production defaults would not fit: the reason values-local.yaml exists.
    production = VALUES["hazelcast"]["replicas"] * _cpu(
        VALUES["hazelcast"]["resources"]["requests"]["cpu"]
    )
    assert production > 1


def _queries(node: Any) -> list[str]:
    """Every PromQL query in a Grafana dashboard: targets' expr, variables' query."""
    if isinstance(node, list):
        return [query for item in node for query in _queries(item)]
    if not isinstance(node, dict):
        return []
    found = [node["expr"]] if isinstance(node.get("expr"), str) else []
    if node.get("type") == "query" and isinstance(node.get("query"), dict):
        found.append(node["query"]["query"])
    return found + [query for value in node.values() for query in _queries(value)]


def test_the_dashboard_queries_only_metrics_the_programs_serve() -> None:
    known = set()
    for metric in (*OPERATOR_METRICS, *DRIVER_METRICS):
        known.add(metric.name)
        if metric.type == MetricType.HISTOGRAM:
            known |= {metric.name + suffix for suffix in ("_bucket", "_sum", "_count")}
    dashboard = json.loads((CHART / "dashboards" / "snapshotjob.json").read_text())
    used = {
        name
        for query in _queries(dashboard)
        for name in re.findall(r"\bsnapshotjob_[a-z0-9_]+", query)
    }
    assert used, "no metric in the dashboard"
    assert used <= known, used - known
    ids = [panel["id"] for panel in dashboard["panels"]]
    assert len(ids) == len(set(ids))
    assert dashboard["uid"] == "snapshotjob"
