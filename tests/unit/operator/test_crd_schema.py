"""The generated CRD: committed copies match the models, and the schema is structural."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from snapshot_operator.api.crd import (
    CRD_NAME,
    EXPORT_CRD_NAME,
    SchemaError,
    crd,
    export_crd,
    main,
    render,
    structural,
)
from snapshotjob_contract import SnapshotJobSpec
from snapshotjob_contract.base import ApiModel
from snapshotjob_contract.exports import EXPORT_NAME_RULE
from snapshotjob_contract.kafka import KafkaSpec
from snapshotjob_contract.resource import MAX_NAME_LENGTH, NAME_RULE
from snapshotjob_contract.spec import ExportSnapshotSpec, HazelcastSpec, RestartPolicy

REPO = Path(__file__).resolve().parents[3]
COMMITTED = (
    REPO / "crds" / "snapshotjob.yaml",
    REPO / "charts/snapshotjob-operator/crds/snapshotjob.yaml",
)
FORBIDDEN_IN_STRUCTURAL = ("$ref", "anyOf", "oneOf", "allOf", "not", "$defs", "definitions")


def _schema() -> Mapping[str, Any]:
    version = crd()["spec"]["versions"][0]
    schema: Mapping[str, Any] = version["schema"]["openAPIV3Schema"]
    return schema


def _nodes(node: Mapping[str, Any], path: str) -> Iterator[tuple[str, Mapping[str, Any]]]:
    yield path, node
    for name, sub in node.get("properties", {}).items():
        yield from _nodes(sub, f"{path}.{name}")
    if isinstance(node.get("items"), Mapping):
        yield from _nodes(node["items"], f"{path}[]")
    if isinstance(node.get("additionalProperties"), Mapping):
        yield from _nodes(node["additionalProperties"], f"{path}.*")


@pytest.mark.parametrize("path", COMMITTED, ids=lambda path: str(path.relative_to(REPO)))
def test_the_committed_crd_is_rendered_from_the_models(path: Path) -> None:
    assert path.read_text() == render(), (
        f"{path.relative_to(REPO)} drifted from the models: run "
        "`python -m snapshot_operator.api.crd -o crds/snapshotjob.yaml "
        "-o charts/snapshotjob-operator/crds/snapshotjob.yaml` (make crds)"
    )


def test_the_schema_is_structural() -> None:
    for path, node in _nodes(_schema(), "<root>"):
        assert not set(FORBIDDEN_IN_STRUCTURAL) & set(node), path
        assert "type" in node or node.get("x-kubernetes-preserve-unknown-fields"), path
        assert node.get("additionalProperties") is not False, path
        assert not ("properties" in node and "additionalProperties" in node), path


def test_every_field_has_a_description_for_kubectl_explain() -> None:
    undescribed = [
        path
        for path, node in _nodes(_schema(), "<root>")
        # metadata is the API server's own; map values are described by their map.
        if path != "<root>.metadata" and not path.endswith(".*") and not node.get("description")
    ]

    assert undescribed == []


def test_cross_field_rules_of_the_models_are_cel_rules_of_the_crd() -> None:
    spec = _schema()["properties"]["spec"]
    placed: dict[type[ApiModel], Mapping[str, Any]] = {
        SnapshotJobSpec: spec,
        ExportSnapshotSpec: spec["properties"]["exportSnapshot"],
        RestartPolicy: spec["properties"]["restartPolicy"],
        HazelcastSpec: spec["properties"]["hazelcast"],
        KafkaSpec: spec["properties"]["kafka"],
    }

    for model, node in placed.items():
        expected = [{"rule": r.cel, "message": r.message} for r in model.CROSS_FIELD_RULES]
        assert node["x-kubernetes-validations"] == expected, model.__name__


def test_the_name_rule_is_a_root_cel_rule_of_the_crd() -> None:
    assert _schema()["x-kubernetes-validations"] == [
        {"rule": f"size(self.metadata.name) <= {MAX_NAME_LENGTH}", "message": NAME_RULE.message}
    ]


def test_object_defaults_are_whole_so_cel_rules_hold_for_them() -> None:
    spec = _schema()["properties"]["spec"]["properties"]

    assert spec["restartPolicy"]["default"] == RestartPolicy().model_dump(mode="json")
    assert spec["spark"]["default"]["driver"] == {"cores": 1, "memory": "1g"}


def test_the_resource_is_namespaced_with_status_short_name_and_printer_columns() -> None:
    definition = crd()
    version = definition["spec"]["versions"][0]

    assert definition["metadata"]["name"] == CRD_NAME
    assert definition["spec"]["scope"] == "Namespaced"
    assert definition["spec"]["names"]["shortNames"] == ["sj"]
    assert version["subresources"] == {"status": {}}
    columns = [column["name"] for column in version["additionalPrinterColumns"]]
    assert columns == ["Phase", "Snapshot", "Last snapshot age", "Restarts", "Age"]


def test_a_union_without_structural_form_is_refused() -> None:
    with pytest.raises(SchemaError, match="union"):
        structural(
            {
                "type": "object",
                "properties": {
                    "x": {"description": "X", "anyOf": [{"type": "string"}, {"type": "integer"}]}
                },
            }
        )


def test_a_field_without_description_is_refused() -> None:
    with pytest.raises(SchemaError, match=r"spec\.x has no description"):
        structural({"type": "object", "properties": {"x": {"type": "string"}}}, path="spec")


def test_the_generator_writes_every_output_file(tmp_path: Path) -> None:
    first, second = tmp_path / "a" / "crd.yaml", tmp_path / "crd.yaml"

    assert main(["--output", str(first), "-o", str(second)]) == 0

    assert first.read_text() == second.read_text() == render()
    documents = list(yaml.safe_load_all(first.read_text()))
    assert [d["kind"] for d in documents] == ["CustomResourceDefinition"] * 2
    assert [d["metadata"]["name"] for d in documents] == [CRD_NAME, EXPORT_CRD_NAME]


def test_the_export_crd_checks_its_name_and_keeps_its_job() -> None:
    version = export_crd()["spec"]["versions"][0]
    root = version["schema"]["openAPIV3Schema"]

    (rule,) = root["x-kubernetes-validations"]
    assert rule["rule"] == EXPORT_NAME_RULE.cel
    assert EXPORT_NAME_RULE.holds("nightly-1") and not EXPORT_NAME_RULE.holds("Nightly.1")
    job_name = root["properties"]["spec"]["properties"]["jobName"]
    assert job_name["x-kubernetes-validations"] == [
        {"rule": "self == oldSelf", "message": "jobName cannot be changed"}
    ]
    columns = [c["name"] for c in version["additionalPrinterColumns"]]
    assert columns == ["Job", "Phase", "Snapshot", "Bytes", "Origin", "Age"]
    assert version["subresources"] == {"status": {}}


def test_the_generator_writes_to_standard_output_by_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main([]) == 0

    assert capsys.readouterr().out == render()
