"""The README's first example is ``examples/first_pipeline.py``, which the laptop test runs.

Why: the README shows the code and ``tests/integration/test_laptop_loop.py`` runs the file; a
change to one that the other does not follow would show users code nobody ran.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_the_readmes_first_python_block_is_the_first_pipelines_code() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```python\n(.*?)```", readme, re.DOTALL)
    assert first_block is not None
    source = (REPO / "examples" / "first_pipeline.py").read_text(encoding="utf-8")
    code = source[source.index("from pyspark.sql") :]
    assert first_block.group(1) == code
    assert "python -m spark_runtime run first_pipeline.py" in readme
