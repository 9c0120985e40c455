"""The virtualenv's packages are byte-compiled.

Why: every driver, Python worker and test process imports PySpark, pandas and pyarrow. Where
``PYTHONDONTWRITEBYTECODE`` is set, as in this machine's environment, nothing compiled at
import time is cached, so a venv whose packages were not byte-compiled compiles those modules
again in every process: about 3.4 s more CPU per process (5.5 s instead of 2.1 for those
imports, measured beside a test run). ``hack/install.sh`` compiles them after pip
(``compileall``); this test fails if a venv was left otherwise.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

HEAVY_PACKAGES = ("pyspark", "pandas", "pyarrow", "hazelcast", "kubernetes")


@pytest.mark.parametrize("package", HEAVY_PACKAGES)
def test_the_heavy_packages_are_byte_compiled(package: str) -> None:
    spec = importlib.util.find_spec(package)
    assert spec is not None and spec.origin is not None, f"{package} is not installed"
    init = Path(spec.origin)
    tag = sys.implementation.cache_tag
    compiled = init.parent / "__pycache__" / f"{init.stem}.{tag}.pyc"
    assert compiled.is_file(), (
        f"{package} is not byte-compiled (no {compiled}): every process compiles it again "
        "at import where PYTHONDONTWRITEBYTECODE is set. Run `make install`: "
        "hack/install.sh compiles a venv whose packages are not compiled"
    )
