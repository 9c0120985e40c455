"""docs/reference/api.md covers the whole API: a field, condition or export reason it omits fails.

Phases, Event reasons and exit codes are not restated in it: it links to their pages generated
from the code (docs/reference/conditions-and-events.md, exit-codes.md).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from snapshot_operator.api.crd import crd, export_crd
from snapshotjob_contract import ConditionType
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


STATUS = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]


@pytest.mark.parametrize("field", [f"status.{name}" for name in STATUS["properties"]])
def test_every_status_field_has_a_row(field: str) -> None:
    assert f"| `{field}` |" in DOC, f"docs/reference/api.md, 'Status': no row for {field}"


@pytest.mark.parametrize("condition", [condition.value for condition in ConditionType])
def test_every_condition_is_documented(condition: str) -> None:
    assert f"`{condition}`" in DOC


@pytest.mark.parametrize(
    ("page", "anchor"),
    [
        ("conditions-and-events.md", "snapshotjob-phases-statusphase"),
        ("conditions-and-events.md", "events"),
        ("exit-codes.md", ""),
    ],
)
def test_phases_events_and_exit_codes_link_to_their_generated_reference(
    page: str, anchor: str
) -> None:
    # Phases, Event reasons and exit codes are listed, each with its meaning, on pages
    # generated from the code (hack/render_reference_docs.py, tests/unit/test_reference_docs.py)
    # instead of by hand here.
    link = f"]({page}{'#' + anchor if anchor else ''})"
    assert link in DOC, f"docs/reference/api.md does not link to {page}{link[len(page) + 2 : -1]}"
