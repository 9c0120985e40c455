"""Checks every relative link and anchor in the repository's Markdown files.

Run by ``make check`` (``make docs-check``): a link to a file that does not exist, or to an
anchor no heading of the target page makes, fails the check with the file and line, so a page
moved or a heading renamed cannot leave a dead link behind. A repository path named in a code
span (`tests/unit/...py`, `spark_runtime/...`) must exist too, so a renamed module or test
cannot leave a page pointing at nothing. Links to other sites are not fetched (the machines
this runs on reach no web site); fenced blocks are skipped, since what they hold is code.
"""

from __future__ import annotations

import re
import subprocess
import sys
import unicodedata
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LINK = re.compile(r"!?\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
EXPLICIT_ANCHOR = re.compile(r"<a\s+(?:name|id)=\"([^\"]+)\"")
FENCE = re.compile(r"^\s*(```|~~~)")
CODE_SPAN = re.compile(r"`[^`]*`")
# A path from the repository's root in a code span: one of its top-level folders, then a file
# with a suffix (a bare folder or a glob is prose's business, not a reference to check).
# Not the folders .gitignore names (build/, dist/): what a build leaves there is no repository
# path, and a page naming one (`dist/release-x.y.z.json`) is not wrong when it is absent.
IGNORED_FOLDERS = set(re.findall(r"^/?([\w.-]+)/$", (ROOT / ".gitignore").read_text(), re.M))
TOP_LEVEL = sorted(
    p.name
    for p in ROOT.iterdir()
    if p.is_dir() and not p.name.startswith(".") and p.name not in IGNORED_FOLDERS
)
REPO_PATH = re.compile(r"`((?:" + "|".join(map(re.escape, TOP_LEVEL)) + r")/[\w./-]*\.[A-Za-z]+)`")


def markdown_files() -> list[Path]:
    """The Markdown files git tracks (a build's or a venv's are not the project's)."""
    listed = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard", "*.md"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    return sorted(ROOT / name for name in listed if (ROOT / name).is_file())


def slug(heading: str) -> str:
    """The anchor GitHub makes of a heading: lower case, punctuation out, spaces to dashes."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link in a heading: its text
    text = text.replace("`", "")
    text = unicodedata.normalize("NFKC", text).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def lines_outside_fences(path: Path) -> list[tuple[int, str]]:
    """The page's lines with their numbers, fenced code blocks left out."""
    kept: list[tuple[int, str]] = []
    fenced = False
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if FENCE.match(line):
            fenced = not fenced
            continue
        if not fenced:
            kept.append((number, line))
    return kept


def anchors(path: Path) -> set[str]:
    """Every anchor the page makes: its headings' slugs (numbered when repeated) and named ones."""
    found: set[str] = set()
    seen: dict[str, int] = {}
    for _, line in lines_outside_fences(path):
        found.update(EXPLICIT_ANCHOR.findall(line))
        match = HEADING.match(line)
        if match is None:
            continue
        base = slug(match.group(2))
        count = seen.get(base, 0)
        seen[base] = count + 1
        found.add(base if count == 0 else f"{base}-{count}")
    return found


def broken_links(path: Path, anchor_cache: dict[Path, set[str]], root: Path = ROOT) -> list[str]:
    """What is wrong with each relative link of one page, as 'file:line: message'.

    Args:
        path: The page.
        anchor_cache: The anchors of the pages read so far, filled as pages are read.
        root: The repository's root, which code spans' paths start from.
    """
    problems: list[str] = []
    for number, line in lines_outside_fences(path):
        for named in REPO_PATH.findall(line):
            if not (root / named).exists():
                where = f"{path.relative_to(root)}:{number}"
                problems.append(f"{where}: `{named}`: no such file in the repository")
        for target in LINK.findall(CODE_SPAN.sub("", line)):
            if re.match(r"^[a-zA-Z][a-zA-Z0-9+.-]*:", target):
                continue  # https:, mailto: and the like: not checked offline
            file_part, _, anchor = target.partition("#")
            resolved = (path.parent / file_part).resolve() if file_part else path
            where = f"{path.relative_to(root)}:{number}"
            if not resolved.exists():
                problems.append(f"{where}: {target}: no such file")
                continue
            if anchor and resolved.suffix == ".md":
                if resolved not in anchor_cache:
                    anchor_cache[resolved] = anchors(resolved)
                if anchor not in anchor_cache[resolved]:
                    problems.append(f"{where}: {target}: no heading makes #{anchor}")
    return problems


def main() -> int:
    """Checks every page; prints each broken link and exits 1 when there is one."""
    anchor_cache: dict[Path, set[str]] = {}
    problems = [p for page in markdown_files() for p in broken_links(page, anchor_cache)]
    for problem in problems:
        print(problem)
    pages = len(markdown_files())
    if problems:
        print(f"{len(problems)} broken links in {pages} Markdown files: fix the link or the page")
        return 1
    print(f"docs links: {pages} Markdown files, every relative link and anchor resolves")
    return 0


if __name__ == "__main__":
    sys.exit(main())
