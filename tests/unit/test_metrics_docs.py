"""docs/reference/metrics.md lists every metric the programs serve, with its type and labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snapshotjob_contract.observability import DRIVER_METRICS, OPERATOR_METRICS, Metric

pytestmark = pytest.mark.unit

DOC = Path(__file__).resolve().parents[2] / "docs" / "reference" / "metrics.md"


def rows() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells and re.fullmatch(r"`snapshotjob_\w+`", cells[0]):
            found[cells[0].strip("`")] = cells
    return found


@pytest.mark.parametrize("metric", [*OPERATOR_METRICS, *DRIVER_METRICS], ids=lambda m: m.name)
def test_every_metric_has_a_row_with_its_type_and_labels(metric: Metric) -> None:
    row = rows().get(metric.name)
    assert row is not None, f"docs/reference/metrics.md has no row for {metric.name}"
    assert row[1] == metric.type.value
    assert row[2] == ", ".join(f"`{label}`" for label in metric.labels)
    assert row[3], "a meaning"


def test_the_docs_list_no_metric_that_does_not_exist() -> None:
    defined = {metric.name for metric in (*OPERATOR_METRICS, *DRIVER_METRICS)}
    assert set(rows()) <= defined
