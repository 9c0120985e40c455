"""The Argo CD health check (docs/argocd/health.lua) run as Argo CD runs it, in lupa's Lua.

Shared by the unit tests of the check on the operator's statuses
(``tests/unit/operator/test_argocd_health.py``) and the GitOps test that applies the chart and
reads the live SnapshotJob (``tests/integration/test_gitops_apply.py``).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[3]
LUA_PATH = ROOT / "docs" / "argocd" / "health.lua"
ARGO_HEALTH = {"Healthy", "Progressing", "Degraded", "Suspended", "Missing", "Unknown"}
UNSAFE_GLOBALS = ("io", "os", "debug", "require", "dofile", "loadfile", "package")


@dataclass(frozen=True)
class Health:
    """What the Lua returned."""

    status: str
    message: str


def argo_health(job: dict[str, Any] | None, dialect: str = "lua51") -> Health:
    """Runs health.lua as Argo CD does: a fresh runtime, ``obj`` global, the returned table.

    The returned table must be a health Argo CD knows, with a message (asserted here).

    Args:
        job: The SnapshotJob as Argo CD reads it from the API server; None for a missing one.
        dialect: lupa's module for the Lua version: ``lua51`` (Argo CD's gopher-lua) or
            ``lua54``.

    Returns:
        The health the script returned.
    """
    lupa: Any = importlib.import_module(f"lupa.{dialect}")
    runtime = lupa.LuaRuntime()
    lua_globals = runtime.globals()
    for name in UNSAFE_GLOBALS:
        lua_globals[name] = None
    lua_globals.obj = runtime.table_from(job, recursive=True) if job is not None else None
    result = runtime.execute(LUA_PATH.read_text(encoding="utf-8"))
    assert lupa.lua_type(result) == "table", f"the check returned {result!r}, not a table"
    returned = dict(result.items())
    assert set(returned) == {"status", "message"}, returned
    status, message = returned["status"], returned["message"]
    assert isinstance(status, str) and status in ARGO_HEALTH, status
    assert isinstance(message, str) and message, "Argo CD shows the message: never empty"
    return Health(status, message)
