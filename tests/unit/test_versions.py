"""One Spark version, one lock: the places that name a JVM or Python version agree.

``hack/versions.env`` writes ``SPARK_VERSION`` and ``HAZELCAST_VERSION`` once;
``hack/install.sh`` and ``hack/images/build.sh`` source it (so the Kafka connector they fetch
and ship is ``SPARK_VERSION``'s), ``jvm/pom.xml`` builds against the same Spark and Hazelcast,
``pyproject.toml`` bounds PySpark to that minor and ``requirements.lock`` pins that release.
These tests read each file as its consumer does and fail when one of them drifts.
"""

from __future__ import annotations

import re
import shlex
import tomllib
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
POM_NS = {"m": "http://maven.apache.org/POM/4.0.0"}


def versions_env() -> dict[str, str]:
    """The ``KEY=value`` lines of ``hack/versions.env``."""
    pairs = {}
    for line in (REPO / "hack" / "versions.env").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, _, value = line.partition("=")
            pairs[key] = shlex.split(value)[0]
    return pairs


def lock_pins() -> dict[str, str]:
    """``requirements.lock`` as ``{canonical name: version}``; every line an exact pin."""
    pins: dict[str, str] = {}
    for line in (REPO / "requirements.lock").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            req = Requirement(line)
            (spec,) = req.specifier
            assert spec.operator == "==", line
            pins[canonicalize_name(req.name)] = spec.version
    return pins


def pom() -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """``jvm/pom.xml``'s properties, and its dependencies as ``{artifactId: (version, scope)}``
    with the properties substituted."""
    root = ET.parse(REPO / "jvm" / "pom.xml").getroot()
    props = {el.tag.split("}")[1]: el.text or "" for el in root.find("m:properties", POM_NS) or []}

    def resolve(text: str) -> str:
        return re.sub(r"\$\{([^}]+)\}", lambda m: props[m.group(1)], text)

    deps = {}
    for dep in root.findall("m:dependencies/m:dependency", POM_NS):
        artifact = resolve(dep.findtext("m:artifactId", "", POM_NS))
        deps[artifact] = (
            resolve(dep.findtext("m:version", "", POM_NS)),
            dep.findtext("m:scope", "compile", POM_NS),
        )
    return props, deps


def project_requirements() -> list[Requirement]:
    """Every third-party requirement of pyproject.toml: dependencies and all extras."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    lines = list(project["dependencies"])
    for extra in project["optional-dependencies"].values():
        lines.extend(extra)
    reqs = [Requirement(line) for line in lines]
    return [r for r in reqs if canonicalize_name(r.name) != "snapshotjob"]


def test_the_lock_pins_the_spark_version() -> None:
    assert lock_pins()["pyspark"] == versions_env()["SPARK_VERSION"]


def test_pyproject_bounds_pyspark_to_the_spark_minor() -> None:
    """Library users may take another patch release, never another minor: jvm/ is built
    against that minor's internals and the Kafka connector is that minor's."""
    spark = Version(versions_env()["SPARK_VERSION"])
    (pyspark,) = [r for r in project_requirements() if r.name == "pyspark"]
    assert spark in pyspark.specifier
    assert Version(f"{spark.major}.{spark.minor + 1}.0") not in pyspark.specifier
    assert Version(f"{spark.major}.{spark.minor}.0") in pyspark.specifier
    assert Version(f"{spark.major}.{spark.minor - 1}.99") not in pyspark.specifier


def test_the_lock_satisfies_every_requirement_of_pyproject() -> None:
    pins = lock_pins()
    for req in project_requirements():
        name = canonicalize_name(req.name)
        assert name in pins, f"{req} has no pin in requirements.lock: run hack/lock.sh"
        assert Version(pins[name]) in req.specifier, (
            f"requirements.lock pins {name}=={pins[name]}, outside {req}: run hack/lock.sh"
        )


def test_the_pom_builds_against_the_spark_and_hazelcast_versions() -> None:
    env = versions_env()
    props, deps = pom()
    assert deps["spark-sql_2.13"] == (env["SPARK_VERSION"], "provided")
    assert deps["hazelcast"] == (env["HAZELCAST_VERSION"], "provided")
    assert props["spark.version"] == env["SPARK_VERSION"]
    # The executors take Spark from PySpark's jars: the version pip installs from the lock.
    assert props["spark.version"] == lock_pins()["pyspark"]


@pytest.mark.parametrize("script", ["hack/install.sh", "hack/images/build.sh"])
def test_the_scripts_take_the_versions_from_the_one_file(script: str) -> None:
    text = (REPO / script).read_text()
    assert re.search(r'^\s*source "\$\{?REPO(_ROOT)?\}?/hack/versions.env"', text, re.M)
    env = versions_env()
    for key, value in env.items():
        assert not re.search(rf"{key}=.*{re.escape(value)}", text), (
            f"{script} writes {key} itself; hack/versions.env is the one place"
        )


def test_the_kafka_connector_is_the_spark_version() -> None:
    """install.sh fetches spark-sql-kafka-0-10_2.13 at SPARK_VERSION; build.sh ships that
    directory."""
    install = (REPO / "hack" / "install.sh").read_text()
    assert re.search(r"^SPARK_KAFKA_VERSION=\$SPARK_VERSION$", install, re.M)
    assert "spark-sql-kafka-0-10_2.13:$SPARK_KAFKA_VERSION" in install
    build = (REPO / "hack" / "images" / "build.sh").read_text()
    assert 'SPARK_KAFKA_DIR="${SJ_CACHE}/jars/spark-kafka-${SPARK_VERSION}"' in build


def test_the_test_bed_starts_the_hazelcast_version() -> None:
    text = (REPO / "testbed" / "hazelcast.py").read_text()
    default = re.search(r'os\.environ\.get\("HAZELCAST_VERSION", "([^"]+)"\)', text)
    assert default and default.group(1) == versions_env()["HAZELCAST_VERSION"]


def test_the_supported_versions_page_names_the_locked_versions() -> None:
    """docs/operations/supported-versions.md: every ``name==version`` it shows is the lock's,
    and its Spark rows name SPARK_VERSION."""
    page = (REPO / "docs" / "operations" / "supported-versions.md").read_text()
    pins = lock_pins()
    shown = re.findall(r"`([A-Za-z0-9_.-]+)==([^`]+)`", page)
    assert {canonicalize_name(name) for name, _ in shown} >= {"pyspark", "hazelcast-python-client"}
    for name, version in shown:
        assert pins[canonicalize_name(name)] == version, f"the page shows {name}=={version}"
    spark = versions_env()["SPARK_VERSION"]
    rows = [line for line in page.splitlines() if line.startswith("| Spark")]
    assert len(rows) == 2 and all(spark in row for row in rows)
