"""The guides' tables that name contract values name real ones, all of them where they list a set.

The generated reference pages (``test_reference_docs.py``) hold the full lists; the guides
keep a few short tables of their own where a reader needs them at hand: the ``snapshot``
subcommands' exit codes in the durable snapshots guide, the export phases and their reasons in
the exports guide. These tests read those tables and hold them to the contract's enums, so a
renamed reason or a renumbered exit code cannot leave a guide telling the reader something
the code no longer says.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.exports import ExportPhase, ExportReason

pytestmark = pytest.mark.unit

DOCS = Path(__file__).resolve().parents[2] / "docs"


def table_rows(page: Path, header: str) -> list[list[str]]:
    """The body rows of the table whose header row starts with ``header``."""
    rows: list[list[str]] = []
    inside = False
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith(header):
            inside = True
            continue
        if inside and line.startswith("|---"):
            continue
        if inside and line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif inside:
            break
    assert rows, f"{page.relative_to(DOCS)} has no table headed {header!r}"
    return rows


def test_the_snapshot_commands_exit_codes_are_driver_exits_with_their_meaning() -> None:
    rows = table_rows(DOCS / "guides" / "durable-snapshots.md", "| command | what it shows |")
    # What spark_runtime/snapshot_command.py returns on a failure.
    reported = {
        DriverExit.BAD_INPUT,
        DriverExit.SNAPSHOT_CORRUPTED,
        DriverExit.SNAPSHOT_NOT_FOUND,
        DriverExit.TRANSIENT_FAILURE,
        DriverExit.SNAPSHOT_INCOMPATIBLE,
    }
    seen: set[int] = set()
    for command, _, exits in rows:
        for code in (int(found) for found in re.findall(r"\b(\d+)\b", exits)):
            seen.add(code)
            assert code == 0 or code in {e.value for e in DriverExit}, (
                f"{command}: exit {code} is no DriverExit (snapshotjob_contract/exits.py)"
            )
    missing = {e.value for e in reported} - seen
    assert not missing, f"docs/guides/durable-snapshots.md: no row gives exit {sorted(missing)}"


def test_the_export_phase_table_lists_every_phase_and_only_real_reasons() -> None:
    rows = table_rows(DOCS / "guides" / "exports.md", "| Phase | When |")
    phases = {row[0].strip("`") for row in rows}
    assert phases == {phase.value for phase in ExportPhase}
    named = {name for row in rows for name in re.findall(r"`([A-Z][A-Za-z]+)`", " ".join(row))}
    unknown = named - {reason.value for reason in ExportReason} - phases
    assert not unknown, f"docs/guides/exports.md names reasons the code does not have: {unknown}"
