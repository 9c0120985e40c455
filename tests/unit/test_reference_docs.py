"""The generated reference pages are current, and no other page restates what they hold.

``hack/render_reference_docs.py`` writes docs/reference/exit-codes.md,
conditions-and-events.md and cli.md from the code's one definitions; a committed page that
differs from a fresh rendering fails here, naming the command that regenerates it. The
operator's flag table in docs/reference/operator.md (its environment variables and defaults,
which ``--help`` does not print) is checked against the operator's parser, and no page but
the generated one and troubleshooting.md (checked by ``test_troubleshooting_docs.py``) may
hold a table of exit codes.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from snapshot_operator.settings import ENV_PREFIX, parse_settings
from snapshotjob_contract import DriverExit
from tests.script_modules import load_script

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[1].parent
DOCS = REPO / "docs"
RENDERER = REPO / "hack" / "render_reference_docs.py"
REGENERATE = ".venv/bin/python hack/render_reference_docs.py (make docs)"


def _renderer() -> ModuleType:
    return load_script("render_reference_docs", RENDERER)


render = _renderer()


@pytest.mark.parametrize("page", list(render.PAGES))
def test_the_committed_page_is_rendered_from_the_code(page: str) -> None:
    if page == "cli.md" and sys.version_info[:2] != (3, 11):
        pytest.skip("argparse formats help differently in each Python; the project's is 3.11")
    committed = (DOCS / "reference" / page).read_text(encoding="utf-8")
    assert committed == render.render(page), (
        f"docs/reference/{page} drifted from the code: run {REGENERATE}"
    )


@pytest.mark.parametrize("page", list(render.PAGES))
def test_the_page_says_who_it_is_for_after_its_title(page: str) -> None:
    lines = (DOCS / "reference" / page).read_text(encoding="utf-8").splitlines()
    assert lines[0].startswith("# ")
    assert re.fullmatch(r"\*\*Who this is for:\*\* [^:]+: .+\.", lines[2]), lines[2]


def test_every_exit_code_has_a_row_in_the_generated_page() -> None:
    page = (DOCS / "reference" / "exit-codes.md").read_text(encoding="utf-8")
    for code in DriverExit:
        assert f"| {code.value} | `{code.name}` |" in page


EXIT_ROW = re.compile(r"^\|\s*`?(\d{1,3})`?\s*\|\s*`?([A-Z][A-Z_]+)`?\s*\|", re.M)
OWNERS_OF_THE_EXIT_TABLE = {
    Path("reference/exit-codes.md"),  # generated
    Path("operations/troubleshooting.md"),  # every row checked by test_troubleshooting_docs.py
}


def test_no_other_page_restates_the_exit_code_table() -> None:
    names = {code.name for code in DriverExit}
    restating = {}
    for page in sorted(DOCS.rglob("*.md")):
        rows = [m.groups() for m in EXIT_ROW.finditer(page.read_text()) if m.group(2) in names]
        if rows and page.relative_to(DOCS) not in OWNERS_OF_THE_EXIT_TABLE:
            restating[str(page.relative_to(REPO))] = rows
    assert not restating, (
        f"exit-code tables outside docs/reference/exit-codes.md: {restating}; link to that "
        "page instead"
    )


# --- docs/reference/operator.md, "Running it": the operator's flags --------------------------

OPERATOR_DOC = DOCS / "reference" / "operator.md"
NO_DEFAULT = {"", "off", "random", "AWS S3"}
"""How the table says a flag has no value of its own (None, False or an empty string)."""


def _flag_rows() -> dict[str, list[str]]:
    section = OPERATOR_DOC.read_text().split("## Running it", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, list[str]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if line.startswith("| `-"):
            rows[cells[0]] = cells
    return rows


def _flags(cell: str) -> set[str]:
    """``-n/--namespace` (repeatable)`` -> {"-n", "--namespace"}."""
    return set(cell.split("`")[1].split("/"))


def _action(parser: argparse.ArgumentParser, flag: str) -> argparse.Action:
    (action,) = [action for action in parser._actions if flag in action.option_strings]
    return action


def test_the_flag_table_lists_every_flag_of_the_operator() -> None:
    parser = render.operator_parser()
    defined = {flag for action in parser._actions for flag in action.option_strings} - {
        "-h",
        "--help",
    }
    documented = set().union(*(_flags(cell) for cell in _flag_rows()))
    assert documented == defined, (
        f"docs/reference/operator.md's flag table: missing {sorted(defined - documented)}, "
        f"unknown {sorted(documented - defined)}"
    )


@pytest.mark.parametrize("row", list(_flag_rows().values()), ids=lambda row: row[0])
def test_each_flag_reads_the_environment_variable_its_row_names(row: list[str]) -> None:
    flag = sorted(_flags(row[0]))[-1]
    variables = re.findall(r"`([A-Z_]+)(?:=\w+)?`", row[1])
    base = _action(render.operator_parser(), flag).default
    for variable in variables:
        if variable == f"{ENV_PREFIX}NAMESPACES":  # read after parsing, when no flag is given
            settings = parse_settings([], environ={variable: "a,b"})
            assert settings.namespaces == ("a", "b")
            continue
        sample = "true" if isinstance(base, bool) else "17"
        changed = _action(render.operator_parser({variable: sample}), flag).default
        assert changed != base and str(changed).lower() == sample, (
            f"docs/reference/operator.md: {flag} does not read {variable}"
        )


@pytest.mark.parametrize("row", list(_flag_rows().values()), ids=lambda row: row[0])
def test_each_flag_has_the_default_its_row_gives(row: list[str]) -> None:
    flag = sorted(_flags(row[0]))[-1]
    default: Any = _action(render.operator_parser(), flag).default
    documented = row[2].strip("`") if row[2] != '`""`' else '""'
    if documented in NO_DEFAULT:
        assert default in (None, False, ""), f"{flag}: the default is {default!r}, not none"
    elif documented == '""':
        assert default == "", f"{flag}: the default is {default!r}"
    else:
        assert str(default) == documented, f"{flag}: the default is {default!r}, not {documented}"
