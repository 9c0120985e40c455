"""SnapshotJob's version: the one place it is written.

``hack/release.py stamp`` writes it here and into the chart's ``version`` and ``appVersion``;
``pyproject.toml`` reads it (``[tool.setuptools.dynamic]``), so the wheel, the image built from
it and the chart carry the same version. ``tests/unit/test_product_version.py`` fails when
any of them disagree. A plain constant, not ``importlib.metadata``: an editable install's
metadata keeps the version it was installed with.
"""

__version__ = "0.2.0"
