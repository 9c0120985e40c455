"""The docs tree keeps its shape: every page says who it is for, is in the index, is no diary.

``docs/README.md`` is the index a reader starts from; a page it does not list is a page
nobody finds. Every page's first line after its title names its readers, so a reader knows
at once whether to read on. Pages state what is true now, with the command that measures a
figure: a date in a page's prose is a journal entry that will go stale. The README is the
front door: short, and linking to the pages a newcomer needs first. Broken links and anchors
are ``hack/check_docs_links.py``'s (``make check``), not this module's.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
INDEX = DOCS / "README.md"
AUDIENCE = re.compile(r"^\*\*Who this is for:\*\* \S")
# A calendar date or a journal's phrase in prose (code spans and fenced blocks are left out:
# a timestamp in an example status is not a diary).
DIARY = re.compile(
    r"\b20\d\d-\d\d-\d\d\b|\b(later|earlier) the same day\b|\bthe (evening|morning) of\b"
    r"|\bthis session\b|\blast session\b",
    re.IGNORECASE,
)
FRONT_DOOR_LINKS = (
    "docs/getting-started/quickstart.md",
    "docs/reference/api.md",
    "docs/operations/troubleshooting.md",
    "docs/operations/security.md",
)
USER_FILES = ("README.md", "CONTRIBUTING.md", "SECURITY.md")


def pages() -> list[Path]:
    """Every Markdown page under docs/."""
    return sorted(DOCS.rglob("*.md"))


def prose(path: Path) -> list[tuple[int, str]]:
    """A page's lines with their numbers, fenced blocks and code spans left out."""
    kept: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if re.match(r"^\s*(```|~~~)", line):
            fenced = not fenced
            continue
        if not fenced:
            kept.append((number, re.sub(r"`[^`]*`", "", line)))
    return kept


@pytest.mark.parametrize("page", pages(), ids=lambda p: str(p.relative_to(DOCS)))
def test_every_page_says_who_it_is_for_right_under_its_title(page: Path) -> None:
    lines = [line for line in page.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert lines[0].startswith("# "), f"{page.relative_to(ROOT)}: the first line is its title"
    assert AUDIENCE.match(lines[1]), (
        f"{page.relative_to(ROOT)}: the line after the title must start with "
        f"'**Who this is for:** ', found {lines[1][:60]!r}"
    )


def test_the_index_lists_every_page() -> None:
    index = INDEX.read_text(encoding="utf-8")
    linked = {(DOCS / target).resolve() for target in re.findall(r"\]\(([^)#\s]+)", index)}
    missing = [str(p.relative_to(DOCS)) for p in pages() if p != INDEX and p not in linked]
    assert not missing, f"docs/README.md does not list {missing}: add each under its audience"


@pytest.mark.parametrize(
    "page",
    [*pages(), *(ROOT / name for name in USER_FILES)],
    ids=lambda p: str(p.relative_to(ROOT)),
)
def test_no_page_is_a_diary(page: Path) -> None:
    entries = [f"{n}: {line.strip()[:80]}" for n, line in prose(page) if DIARY.search(line)]
    assert not entries, (
        f"{page.relative_to(ROOT)} reads like a journal; state what is true now, with the "
        f"command that measures a figure, and put what changed in CHANGELOG.md: {entries}"
    )


def test_the_readme_is_a_short_front_door() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert len(readme.splitlines()) <= 150, "README.md: at most about 150 lines"
    for target in FRONT_DOOR_LINKS:
        assert f"]({target})" in readme, f"README.md links to {target}"
    for command in ("make demo", "make test"):
        assert f"`{command}`" in readme


@pytest.mark.parametrize("name", ["LICENSE", "CHANGELOG.md", "CONTRIBUTING.md", "SECURITY.md"])
def test_the_project_files_a_newcomer_looks_for_exist(name: str) -> None:
    assert (ROOT / name).read_text(encoding="utf-8").strip(), f"{name} is missing or empty"


def test_the_license_is_the_one_pyproject_declares() -> None:
    declared = re.search(r'^license = "([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert declared is not None and declared.group(1) == "Apache-2.0"
    assert "Apache License" in (ROOT / "LICENSE").read_text(encoding="utf-8").splitlines()[1]
    assert "Version 2.0, January 2004" in (ROOT / "LICENSE").read_text(encoding="utf-8")
