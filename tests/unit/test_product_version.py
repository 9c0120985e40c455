"""One version: the package, the wheel's metadata and the chart's version and appVersion agree.

``snapshotjob_contract/version.py`` is the one place the version is written;
``hack/release.py stamp`` writes the chart's ``version`` and ``appVersion`` from the same
value and ``pyproject.toml`` reads it. These tests read each site the way its consumer does
(setuptools for the wheel, YAML for helm) and fail when one of them drifts.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from setuptools.config.pyprojecttoml import read_configuration

from snapshotjob_contract.version import __version__
from tests.script_modules import load_script

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
VERSIONING = load_script("versioning", REPO / "hack" / "versioning.py")
PRODUCT = ("snapshotjob_contract", "snapshot_protocol", "snapshot_store", "spark_runtime")


def test_the_package_version_is_a_semantic_version() -> None:
    """Image tags and chart versions take it as it is."""
    assert str(VERSIONING.SemVer.parse(__version__)) == __version__


def test_the_wheel_takes_the_package_version() -> None:
    """setuptools resolves pyproject's dynamic version to the module's, with no copy of it."""
    config = read_configuration(REPO / "pyproject.toml")
    assert config["project"]["version"] == __version__
    assert "version" in config["project"]["dynamic"]


def test_the_chart_version_and_app_version_are_the_package_version() -> None:
    """What helm reads from Chart.yaml: its version and appVersion, as strings."""
    chart = yaml.safe_load((REPO / VERSIONING.CHART_FILE).read_text())
    assert (chart["version"], chart["appVersion"]) == (__version__, __version__)


def test_the_product_writes_its_version_nowhere_else() -> None:
    """A second ``__version__`` in a product package would drift from the stamped one."""
    found = [
        str(path.relative_to(REPO))
        for package in (*PRODUCT, "operator/snapshot_operator")
        for path in sorted((REPO / package).rglob("*.py"))
        if re.search(r"^__version__\s*=", path.read_text(), re.MULTILINE)
    ]
    assert found == [VERSIONING.VERSION_MODULE]


def test_the_version_is_not_older_than_the_last_release_in_the_changelog() -> None:
    """The tree carries its last release's version or a later one, never an earlier one."""
    released = VERSIONING.released_versions((REPO / "CHANGELOG.md").read_text())
    assert released
    assert VERSIONING.SemVer.parse(__version__) >= max(released)
