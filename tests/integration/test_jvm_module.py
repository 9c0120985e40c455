"""The executors' chunk code builds offline and its JUnit tests pass (``jvm/``, Maven).

``make install`` resolved the module's dependencies and plugins into Maven's local repository;
this runs ``mvn -o test`` on a copy of the module, so a failing JUnit test shows in the pytest
report, and the JUnit tests read the chunk vectors the Python side wrote
(``tests/unit/chunk_vectors.py``). A second build of a copy whose chunk writer departs from the
Hazelcast client's serialised form shows that the tests catch it.
"""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEST_CLASSES = ("ChunkBufferTest", "ChunkDescriptorTest", "PythonChunkTest")


def copy_module(into: Path) -> Path:
    """A copy of ``jvm/`` without its build output."""
    module = into / "jvm"
    shutil.copytree(REPO / "jvm", module, ignore=shutil.ignore_patterns("target"))
    return module


def mvn_test(
    module: Path, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, dict[str, int]]]:
    """Runs ``mvn -B -o test`` in ``module``; returns the run and, per test class, surefire's
    counts (``tests``, ``failures``, ``errors``, ``skipped``)."""
    if shutil.which("mvn") is None:
        pytest.fail("mvn is not on PATH: run 'make install'")
    run = subprocess.run(
        ["mvn", "-B", "-q", "-o", "test", *args],
        cwd=module,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    reports = {}
    for report in (module / "target" / "surefire-reports").glob("TEST-*.xml"):
        suite = ET.parse(report).getroot()
        name = suite.attrib["name"].rsplit(".", 1)[-1]
        reports[name] = {
            k: int(suite.attrib[k]) for k in ("tests", "failures", "errors", "skipped")
        }
    return run, reports


def test_the_junit_tests_pass_offline(tmp_path: Path) -> None:
    run, reports = mvn_test(copy_module(tmp_path))
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert sorted(reports) == sorted(TEST_CLASSES)
    for name, counts in reports.items():
        assert counts["tests"] >= 3, name
        assert counts["failures"] == counts["errors"] == counts["skipped"] == 0, (name, counts)


def test_the_junit_tests_catch_a_chunk_value_the_python_client_would_not_put(
    tmp_path: Path,
) -> None:
    """A writer whose byte[] header carries another type id than the client's (-12): the
    members would hold values the Python side reads as something else."""
    module = copy_module(tmp_path)
    source = module / "src/main/java/io/snapshotjob/chunks/ChunkBuffer.java"
    text = source.read_text()
    assert "BYTE_ARRAY_TYPE = -12;" in text
    source.write_text(text.replace("BYTE_ARRAY_TYPE = -12;", "BYTE_ARRAY_TYPE = -13;"))
    run, reports = mvn_test(module, "-Dtest=ChunkBufferTest#theValueIsTheBytesThePythonClientPuts")
    assert run.returncode != 0
    assert reports["ChunkBufferTest"]["failures"] >= 1, reports
