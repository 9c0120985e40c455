"""docs/reference/api.md covers the whole API: a field, phase, reason or exit code it omits fails here."""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from snapshot_operator.api.crd import crd, export_crd
from snapshot_operator.reconcile import EventReason
from snapshotjob_contract import ConditionType, DriverExit, Phase
from snapshotjob_contract.exports import ExportOrigin, ExportPhase, ExportReason

DOC = (Path(__file__).resolve().parents[3] / "docs" / "reference" / "api.md").read_text()


def _spec_leaves(node: Mapping[str, Any], path: str) -> Iterator[str]:
    properties = node.get("properties", {})
    if not properties:
        yield path
    for name, sub in properties.items():
        yield from _spec_leaves(sub, f"{path}.{name}")


SPEC = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]


EXPORT = export_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]


@pytest.mark.parametrize(
    "field",
    [
        *_spec_leaves(EXPORT["spec"], "spec"),
        *(f"status.{name}" for name in EXPORT["status"]["properties"]),
        *(
            f"`{value.value}`"
            for enum in (ExportOrigin, ExportPhase, ExportReason)
            for value in enum
        ),
    ],
)
def test_every_export_field_phase_origin_and_reason_is_documented(field: str) -> None:
    section = DOC[DOC.index("## SnapshotJobExport") :]
    assert field.strip("`") in section and f"`{field.strip('`')}`" in section


@pytest.mark.parametrize("field", list(_spec_leaves(SPEC, "spec")))
def test_every_spec_field_is_documented(field: str) -> None:
    assert f"`{field}`" in DOC


@pytest.mark.parametrize(
    "name",
    [
        *(phase.value for phase in Phase),
        *(condition.value for condition in ConditionType),
        *(reason.value for reason in EventReason),
        *(exit_code.name for exit_code in DriverExit),
    ],
)
def test_every_phase_condition_event_reason_and_exit_code_is_documented(name: str) -> None:
    assert f"`{name}`" in DOC
