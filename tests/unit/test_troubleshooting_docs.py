"""docs/operations/troubleshooting.md has an entry for every reason and exit code a user can meet.

Each enum value must be the first cell of a table row in its own section, written as code
(`` `SnapshotCorrupted` ``): a condition reason in "Condition reasons", an Event reason in
"Event reasons", an export reason in "Export reasons", an exit code (number and name) in
"Driver exit codes". Several values are spelt alike in two enums (``Completed`` is a condition
reason and an Event reason), so a value found only in another section does not count. A row
for a value that no longer exists fails too.
"""

from __future__ import annotations

import re
from enum import Enum
from pathlib import Path

import pytest

from snapshot_operator.reconcile import EventReason
from snapshotjob_contract import ConditionReason, DriverExit
from snapshotjob_contract.exports import ExportReason

pytestmark = pytest.mark.unit

DOC = (
    Path(__file__).resolve().parents[2] / "docs" / "operations" / "troubleshooting.md"
).read_text()

SECTIONS: dict[str, type[Enum]] = {
    "Condition reasons": ConditionReason,
    "Event reasons": EventReason,
    "Export reasons": ExportReason,
}


def section(title: str) -> str:
    """The text under ``## <title>`` up to the next ``## `` heading."""
    match = re.search(rf"^## {re.escape(title)}\n(.*?)(?=^## |\Z)", DOC, re.M | re.S)
    assert match is not None, f"docs/operations/troubleshooting.md has no section '## {title}'"
    return match.group(1)


def first_cells(title: str) -> list[list[str]]:
    """The cells of every table row of a section whose first cell is written as code."""
    rows = []
    for line in section(title).splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("|") and re.fullmatch(r"`[^`]+`", cells[0]):
            rows.append(cells)
    return rows


@pytest.mark.parametrize(
    ("title", "value"),
    [(title, member.value) for title, enum in SECTIONS.items() for member in enum],
)
def test_every_reason_has_a_row_in_its_section(title: str, value: str) -> None:
    documented = {cells[0] for cells in first_cells(title)}
    assert f"`{value}`" in documented, (
        f"docs/operations/troubleshooting.md, '{title}': no row for {value}"
    )


@pytest.mark.parametrize("code", list(DriverExit), ids=lambda code: code.name)
def test_every_exit_code_has_a_row_with_its_number_and_name(code: DriverExit) -> None:
    rows = {(cells[0], cells[1]) for cells in first_cells("Driver exit codes")}
    assert (f"`{code.value}`", f"`{code.name}`") in rows, (
        "docs/operations/troubleshooting.md, 'Driver exit codes': "
        f"no row `{code.value}` | `{code.name}`"
    )


@pytest.mark.parametrize("title", list(SECTIONS))
def test_no_row_for_a_reason_that_does_not_exist(title: str) -> None:
    existing = {f"`{member.value}`" for member in SECTIONS[title]}
    stale = [cells[0] for cells in first_cells(title) if cells[0] not in existing]
    assert not stale, (
        f"docs/operations/troubleshooting.md, '{title}': rows for unknown reasons {stale}"
    )


def test_no_row_for_an_exit_code_that_does_not_exist() -> None:
    existing = {(f"`{code.value}`", f"`{code.name}`") for code in DriverExit}
    stale = [
        cells[:2] for cells in first_cells("Driver exit codes") if tuple(cells[:2]) not in existing
    ]
    assert not stale, f"docs/operations/troubleshooting.md: rows for unknown exit codes {stale}"


@pytest.mark.parametrize("reason", list(EventReason), ids=lambda reason: reason.value)
def test_every_event_reason_row_gives_the_type_the_operator_emits(reason: EventReason) -> None:
    types = {cells[0]: cells[1] for cells in first_cells("Event reasons")}
    assert types.get(f"`{reason.value}`") == reason.event_type.value, (
        f"docs/operations/troubleshooting.md, 'Event reasons': {reason.value} is a "
        f"{reason.event_type.value} Event (EventReason.event_type)"
    )
