"""No module under tests/ imports a test module: shared helpers live in helper modules.

A test module (``test_*.py``) is a list of tests, not a library: importing one runs its
module-level code a second time, registers its fixtures in another module without saying so,
and ties two files that change for different reasons. What tests share lives in a
``conftest.py`` or in a helper module whose name does not start with ``test_`` (such as
``tests/unit/operator/decide_helpers.py`` or ``tests/integration/operator_fixtures.py``).

import-linter cannot state this rule: its wildcards replace whole module names only
(``tests.**.test_*`` is not an expression it accepts), so it is checked here, over every
module's syntax tree, relative imports included.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"


def _module_name(path: Path) -> str:
    """The dotted name of a module under the repository root (``tests.unit.x``)."""
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_test_module(name: str) -> bool:
    """Whether the dotted name is a module (file) under tests/ named ``test_*``."""
    parts = name.split(".")
    if parts[0] != "tests" or not parts[-1].startswith("test_"):
        return False
    return ROOT.joinpath(*parts).with_suffix(".py").is_file()


def _absolute(module: str | None, level: int, importer: Path) -> str:
    """The absolute name of the module an ``import from`` statement names."""
    if level == 0:
        return module or ""
    package = _module_name(importer).split(".")
    if importer.name != "__init__.py":
        package = package[:-1]
    base = package[: len(package) - (level - 1)]
    return ".".join([*base, module] if module else base)


def imported_test_modules(source: str, path: Path) -> list[str]:
    """The test modules one module imports, as ``line: module``.

    Args:
        source: The module's text.
        path: Where the module is (relative imports are resolved from it).

    Returns:
        One entry per imported test module: ``import tests.x.test_y``, ``from tests.x.test_y
        import z``, ``from tests.x import test_y`` and their relative forms.
    """
    found = []
    for node in ast.walk(ast.parse(source, str(path))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            module = _absolute(node.module, node.level, path)
            names = [module, *(f"{module}.{alias.name}" for alias in node.names)]
        else:
            continue
        found += [f"{node.lineno}: {name}" for name in names if _is_test_module(name)]
    return found


def test_no_module_under_tests_imports_a_test_module() -> None:
    offenders = {
        str(path.relative_to(ROOT)): imports
        for path in sorted(TESTS.rglob("*.py"))
        if (imports := imported_test_modules(path.read_text(encoding="utf-8"), path))
    }

    assert not offenders, (
        "Test modules are not libraries: move what is shared into a conftest.py or a helper "
        f"module not named test_*, and import it from there: {offenders}"
    )


@pytest.mark.parametrize(
    ("source", "importer", "expected"),
    [
        ("from tests.unit.protocol.test_chunks import MAP", "tests/unit/x.py", 1),
        ("import tests.unit.protocol.test_chunks", "tests/unit/x.py", 1),
        ("from tests.unit.protocol import test_chunks", "tests/unit/x.py", 1),
        ("from .test_chunks import MAP", "tests/unit/protocol/x.py", 1),
        ("from . import test_chunks", "tests/unit/protocol/x.py", 1),
        ("from ..protocol.test_chunks import MAP", "tests/unit/runtime/x.py", 1),
        ("from .snapshots import MAP", "tests/unit/protocol/x.py", 0),
        ("from tests.unit.protocol.snapshots import MAP", "tests/unit/x.py", 0),
        ("from tests.unit.protocol.test_no_such_module import x", "tests/unit/x.py", 0),
    ],
)
def test_the_check_sees_every_form_of_import(source: str, importer: str, expected: int) -> None:
    """The check itself, on each way Python allows to import a test module (or not)."""
    assert len(imported_test_modules(source, ROOT / importer)) == expected
