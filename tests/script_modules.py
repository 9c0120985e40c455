"""Loads a script of the repository that is not in a package (hack/, charts/) as a module.

Several tests check a script's functions directly (the docs renderers, the link check, the
chart's values table): this is the one way they load it, under the name given.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType


def load_script(name: str, path: Path) -> ModuleType:
    """Executes the file at ``path`` as a module named ``name`` and returns it.

    Args:
        name: The module's name (what its functions' ``__module__`` says).
        path: The script.
    """
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None, f"cannot load {path}"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
