"""Package attributes imported on first use (PEP 562), for ``spark_runtime.sources``/``sinks``.

User pipelines import every source and sink from the package (``from spark_runtime.sinks
import FileSink``), but each backend pulls in its own client library: psycopg for PostgreSQL,
the Hazelcast client for a map. Importing them all in the package's ``__init__`` would make
the file sink cost as much as the PostgreSQL one, and a pipeline would need every client
installed. So the ``__init__`` only names where each public name lives, and the backend
module is imported when the name is first looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    namespace: dict[str, Any], exports: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Returns a package's ``__getattr__`` and ``__dir__`` for its lazily imported names.

    Args:
        namespace: The package's ``globals()``.
        exports: Public name -> the module, relative to the package, that defines it.

    Returns:
        ``__getattr__``, which imports the defining module of a public name, caches the
        value in the package and returns it; and ``__dir__``, which lists the public names.
    """
    package = str(namespace["__name__"])

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        # Later lookups find the value directly and never call this again.
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *exports})

    return getattr_, dir_
