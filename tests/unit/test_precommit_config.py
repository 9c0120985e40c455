"""The pre-commit hooks run what ``make check`` runs: the same commands, in the same order.

``.pre-commit-config.yaml`` restates the recipes of the targets ``make check`` depends on
(``lint``, ``typecheck``, ``contracts``, ``docs-check``); this reads both files and fails when
a target gains, loses or changes a command that the hooks do not, or the other way round. The
Makefile's variables are expanded, a tool under the virtualenv's ``bin`` is compared by its name
(the hooks find it on PATH), and a hook's ``bash -c '...'`` by the command it runs.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest
import yaml

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
MAKEFILE = ROOT / "Makefile"
PRE_COMMIT = ROOT / ".pre-commit-config.yaml"
VARIABLE = re.compile(r"^([A-Za-z_][A-Za-z0-9_]*)\s*(?:\?=|:=|=)\s*(.*)$")
REFERENCE = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def _logical_lines(text: str) -> list[str]:
    """The Makefile's lines with backslash continuations joined."""
    return text.replace("\\\n", " ").splitlines()


def _variables(lines: list[str]) -> dict[str, str]:
    return {m.group(1): m.group(2).strip() for line in lines if (m := VARIABLE.match(line))}


def _expand(text: str, variables: dict[str, str]) -> str:
    """Expands ``$(NAME)`` until none is left; the environment's (``HOME``) become ``$NAME``."""
    while REFERENCE.search(text):
        text = REFERENCE.sub(lambda m: variables.get(m.group(1), "$" + m.group(1)), text)
    return text


def _normalised(argv: list[str], venv: str) -> tuple[str, ...]:
    """A command as a tuple of words: a ``bash -c`` unwrapped, a venv tool by its name."""
    if argv[:2] == ["bash", "-c"] and len(argv) == 3:
        argv = shlex.split(argv[2])
    tool = argv[0].removeprefix(f"{venv}/bin/")
    return (tool, *argv[1:])


def make_check_commands() -> list[tuple[str, tuple[str, ...]]]:
    """What ``make check`` runs, as (target, command) in order, ``echo`` lines left out.

    Returns:
        One entry per recipe line of each prerequisite of ``check``.
    """
    lines = _logical_lines(MAKEFILE.read_text(encoding="utf-8"))
    variables = _variables(lines)
    [check] = [line for line in lines if line.startswith("check:")]
    targets = check.split(":", 1)[1].split("##")[0].split()
    commands = []
    for target in targets:
        [start] = [i for i, line in enumerate(lines) if line.startswith(f"{target}:")]
        for line in lines[start + 1 :]:
            if not line.startswith("\t"):
                break
            argv = shlex.split(_expand(line.strip().lstrip("@"), variables))
            if argv[0] != "echo":
                commands.append((target, _normalised(argv, variables["VENV"])))
    return commands


def hooks() -> list[dict[str, Any]]:
    """The hooks of ``.pre-commit-config.yaml``, in order."""
    config = yaml.safe_load(PRE_COMMIT.read_text(encoding="utf-8"))
    return [hook for repo in config["repos"] for hook in repo["hooks"]]


def test_make_check_depends_on_the_targets_the_hooks_stand_for() -> None:
    targets = [target for target, _ in make_check_commands()]

    assert list(dict.fromkeys(targets)) == ["lint", "typecheck", "contracts", "docs-check"]


def test_the_hooks_run_what_make_check_runs_in_its_order() -> None:
    venv = _variables(_logical_lines(MAKEFILE.read_text(encoding="utf-8")))["VENV"]
    made = [command for _, command in make_check_commands()]
    hooked = [_normalised(shlex.split(hook["entry"]), venv) for hook in hooks()]

    assert hooked == made, "update .pre-commit-config.yaml and the Makefile's check together"


def test_every_hook_runs_over_the_whole_repository_with_the_projects_tools() -> None:
    for hook in hooks():
        assert hook["language"] == "system", hook["id"]
        assert hook["pass_filenames"] is False, f"{hook['id']}: make check is not per file"
        assert hook["always_run"] is True, f"{hook['id']}: make check runs whatever changed"
