"""Each extra of pyproject.toml installs exactly what its program imports.

Why: the development virtualenv holds every extra at once, so a module that imports a
library its own extra lacks works there and fails in the image or on a user's machine (the
operator extra once lacked the Hazelcast client its store adapter imports). Each case here
installs the project with one extra into a fresh virtualenv (:mod:`tests.fixtures.fresh_venv`),
from the registry through pip's cache, and imports every module of the program that extra is
for, then runs its entry point.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from tests.fixtures.fresh_venv import install_fresh

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]

REPO = Path(__file__).resolve().parents[2]

# Imports every module of the given packages in one interpreter and prints how many it did.
IMPORT_ALL = """
import importlib, pkgutil, sys
count = 0
for name in sys.argv[1:]:
    package = importlib.import_module(name)
    count += 1
    for module in pkgutil.walk_packages(package.__path__, name + "."):
        if module.name.endswith(".__main__"):  # runs the program; the entry point test does
            continue
        importlib.import_module(module.name)
        count += 1
print(count)
"""

CASES = {
    # extra: (packages whose every module must import, entry point to run with --help)
    "": (["snapshotjob_contract", "snapshot_protocol"], None),
    "operator": (
        ["snapshotjob_contract", "snapshot_protocol", "snapshot_store", "snapshot_operator"],
        "snapshot_operator",
    ),
    "runtime": (
        ["snapshotjob_contract", "snapshot_protocol", "snapshot_store", "spark_runtime"],
        "spark_runtime",
    ),
}


@pytest.mark.parametrize("extra", list(CASES), ids=lambda e: e or "base")
def test_an_extra_alone_imports_its_program(
    extra: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    if extra == "runtime":
        # The session's runtime virtualenv, which the laptop loop's test also runs in.
        python: Path = request.getfixturevalue("runtime_venv")
    else:
        python = install_fresh(tmp_path / "venv", str(tmp_path), extra)
    packages, entry_point = CASES[extra]
    # Run outside the repository, so the installed copy is imported, not the source tree.
    imported = subprocess.run(
        [str(python), "-c", IMPORT_ALL, *packages],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
        cwd=tmp_path,
    )
    assert imported.returncode == 0, imported.stderr[-3000:]
    assert int(imported.stdout.strip()) > len(packages)
    if entry_point is not None:
        helped = subprocess.run(
            [str(python), "-m", entry_point, "--help"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd=tmp_path,
        )
        assert helped.returncode == 0, helped.stderr[-3000:]
        assert "usage" in helped.stdout.lower()


def test_the_wheel_ships_no_test_tooling(tmp_path: Path) -> None:
    built = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--quiet",
            "-w",
            str(tmp_path),
            str(REPO),
        ],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = tmp_path.glob("snapshotjob-*.whl")
    tops = {name.split("/", 1)[0] for name in zipfile.ZipFile(wheel).namelist()}
    packages = {top for top in tops if not top.endswith(".dist-info")}
    assert packages == {
        "snapshotjob_contract",
        "snapshot_protocol",
        "snapshot_store",
        "snapshot_operator",
        "spark_runtime",
    }
