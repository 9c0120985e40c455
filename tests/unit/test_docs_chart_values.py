"""Tables in docs/ that restate the chart's values name real values with their real defaults.

A table whose header's first cell mentions ``values.yaml`` (e.g. docs/operations/sizing.md,
"The members' JVM") lists chart values in its first column (`` `hazelcast.heap` ``) and their
defaults in its second. Each value must exist in charts/snapshotjob-operator/values.yaml, and
a scalar default must be the one written there; an object's default (resources) is prose and
only its key is checked. The chart's own README table is generated (``charts/values_doc.py``,
checked by ``test_chart_values.py``).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
VALUES: dict[str, Any] = yaml.safe_load(
    (REPO / "charts" / "snapshotjob-operator" / "values.yaml").read_text()
)
KEY = re.compile(r"`([a-zA-Z][\w]*(?:\.[a-zA-Z][\w]*)+)`")


def _tables() -> list[tuple[str, list[str]]]:
    """Every row (page, cells) of a table of chart values in docs/."""
    rows: list[tuple[str, list[str]]] = []
    for page in sorted((REPO / "docs").rglob("*.md")):
        in_values_table = False
        for line in page.read_text(encoding="utf-8").splitlines():
            if not line.startswith("|"):
                in_values_table = False
                continue
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            if "values.yaml" in cells[0]:
                in_values_table = True
            elif in_values_table and KEY.fullmatch(cells[0]):
                rows.append((str(page.relative_to(REPO)), cells))
    return rows


ROWS = _tables()


def _lookup(key: str) -> Any:
    node: Any = VALUES
    for part in key.split("."):
        assert isinstance(node, dict) and part in node, f"values.yaml has no {key}"
        node = node[part]
    return node


def test_the_docs_have_a_table_of_chart_values() -> None:
    assert ROWS, "no table of chart values found: has the header lost its `values.yaml`?"


@pytest.mark.parametrize(("page", "cells"), ROWS, ids=[f"{p}:{c[0]}" for p, c in ROWS])
def test_each_value_exists_with_its_default(page: str, cells: list[str]) -> None:
    key = KEY.fullmatch(cells[0]).group(1)  # type: ignore[union-attr]
    value = _lookup(key)
    if isinstance(value, dict | list):
        return
    documented = cells[1].strip("`")
    expected = str(value).lower() if isinstance(value, bool) else str(value)
    if expected == "":
        expected = "empty"  # an empty string's default, as the tables write it
    assert documented == expected, f"{page}: {key} defaults to {expected!r}, not {documented!r}"
