"""Which class data sharing archive a driver's JVM is given (:mod:`spark_runtime.cds`).

A stale archive makes the JVM slower than none (it then drops the JDK's shared classes too),
so the archive is named only while its fingerprint matches the JVM and PySpark as they are.
These tests stat files only; the JVM mapping the archive is tested in
``tests/integration/test_spark_pipeline.py``.
"""

from __future__ import annotations

from pathlib import Path

import pyspark
import pytest

from spark_runtime import cds

pytestmark = pytest.mark.unit


@pytest.fixture
def archive_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv(cds.ARCHIVE_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(cds.DISABLE_ENV, raising=False)
    if cds.java_binary() is None:
        pytest.fail("No java on this machine: make install provides Java 17")
    return tmp_path


def _write_archive(fingerprint: str) -> Path:
    path = cds.archive_path()
    assert path is not None
    path.write_bytes(b"archive")
    path.with_suffix(".fingerprint").write_text(fingerprint + "\n")
    return path


def _fingerprint_now() -> str:
    java = cds.java_binary()
    assert java is not None
    return cds.fingerprint(java, Path(pyspark.__file__).parent)


def test_an_archive_with_a_matching_fingerprint_is_named(archive_dir: Path) -> None:
    path = _write_archive(_fingerprint_now())
    assert path.parent == archive_dir
    assert cds.java_options() == f"-XX:SharedArchiveFile={path}"


def test_no_archive_a_stale_one_or_one_without_fingerprint_is_not_named(
    archive_dir: Path,
) -> None:
    assert cds.java_options() == ""
    path = _write_archive("0" * 64)
    assert cds.java_options() == ""
    path.with_suffix(".fingerprint").unlink()
    assert cds.java_options() == ""


def test_sj_cds_off_disables_even_a_valid_archive(
    archive_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _write_archive(_fingerprint_now())
    monkeypatch.setenv(cds.DISABLE_ENV, "off")
    assert cds.java_options() == ""


def test_the_fingerprint_changes_with_a_jar(tmp_path: Path) -> None:
    java = cds.java_binary()
    assert java is not None
    (tmp_path / "jars").mkdir()
    jar = tmp_path / "jars" / "a.jar"
    jar.write_bytes(b"one")
    before = cds.fingerprint(java, tmp_path)
    jar.write_bytes(b"three")
    assert cds.fingerprint(java, tmp_path) != before


def test_the_users_driver_options_come_after_the_archive() -> None:
    option = "-XX:SharedArchiveFile=/a.jsa"
    assert cds.with_archive({}, option) == {cds.JAVA_OPTIONS_CONF: option}
    user = {cds.JAVA_OPTIONS_CONF: "-Xshare:off", "spark.x": "1"}
    assert cds.with_archive(user, option) == {
        cds.JAVA_OPTIONS_CONF: f"{option} -Xshare:off",
        "spark.x": "1",
    }
    assert user == {cds.JAVA_OPTIONS_CONF: "-Xshare:off", "spark.x": "1"}
    assert cds.with_archive(user, "") == user
