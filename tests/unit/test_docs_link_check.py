"""hack/check_docs_links.py, the link check of ``make check``, finds what it is there to find.

The check runs over the real tree in ``make check``; these tests give it small pages in a
temporary folder: a dead link, a dead anchor, a renamed module named in a code span, and the
things it must leave alone (other sites, fenced code, a repeated heading's numbered anchor).
"""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest

from tests.script_modules import load_script

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "hack" / "check_docs_links.py"


def load_check() -> ModuleType:
    """The script as a module (hack/ is not a package)."""
    return load_script("check_docs_links", SCRIPT)


CHECK = load_check()


def problems(root: Path, page: str, text: str) -> list[str]:
    """What the check says of one page written under ``root``."""
    path = root / page
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    found: list[str] = CHECK.broken_links(path, {}, root)
    return found


def test_a_link_to_a_missing_page_is_reported_with_its_line(tmp_path: Path) -> None:
    found = problems(tmp_path, "docs/a.md", "# A\n\nSee [b](b.md).\n")
    assert found == ["docs/a.md:3: b.md: no such file"]


def test_an_anchor_no_heading_makes_is_reported(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "b.md").write_text("# B\n\n## The `make demo` step\n", encoding="utf-8")
    good = problems(tmp_path, "docs/a.md", "[ok](b.md#the-make-demo-step)\n")
    bad = problems(tmp_path, "docs/a.md", "[gone](b.md#the-step)\n")
    assert good == []
    assert bad == ["docs/a.md:1: b.md#the-step: no heading makes #the-step"]


def test_a_repeated_heading_gets_a_numbered_anchor(tmp_path: Path) -> None:
    text = "# A\n\n## Run\n\n## Run\n\n[first](#run) [second](#run-1) [third](#run-2)\n"
    assert problems(tmp_path, "a.md", text) == ["a.md:7: #run-2: no heading makes #run-2"]


def test_a_repository_path_in_a_code_span_must_exist(tmp_path: Path) -> None:
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_real.py").write_text("", encoding="utf-8")
    text = "Checked by `tests/test_real.py` and `tests/test_renamed.py`.\n"
    assert problems(tmp_path, "a.md", text) == [
        "a.md:1: `tests/test_renamed.py`: no such file in the repository"
    ]


def test_other_sites_and_fenced_code_are_left_alone(tmp_path: Path) -> None:
    text = (
        "[site](https://example.org/x) [mail](mailto:a@b.c)\n"
        "```\n[not a link](nowhere.md) `tests/test_nowhere.py`\n```\n"
    )
    assert problems(tmp_path, "a.md", text) == []
