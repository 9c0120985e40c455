"""docs/reference/metrics.md lists every metric the programs serve, with its type and labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from snapshotjob_contract.observability import (
    DRIVER_METRICS,
    DRIVER_METRICS_PORT,
    OPERATOR_METRICS,
    Metric,
)

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "reference" / "metrics.md"
VALUES = yaml.safe_load((REPO / "charts" / "snapshotjob-operator" / "values.yaml").read_text())


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


def test_the_ports_are_the_charts_and_the_drivers() -> None:
    ports = {}
    for line in DOC.read_text().splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) > 1 and cells[0] in ("operator", "driver"):
            ports[cells[0]] = cells[1]
    expected = {"operator": str(VALUES["metrics"]["port"]), "driver": str(DRIVER_METRICS_PORT)}
    assert ports == expected, (
        "docs/reference/metrics.md's ports: the operator's is the chart's metrics.port, the "
        f"driver's DRIVER_METRICS_PORT: {expected}"
    )
