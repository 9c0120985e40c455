"""The split images as built: their labels, their SBOMs, what each holds and what it lacks.

``hack/images/build.sh`` builds the five images of ``hack/images/images.env`` from their
Dockerfiles (cached by their inputs' hash: seconds when nothing changed) and writes an SPDX
SBOM of each with syft; these tests read the images and the SBOMs. They would fail on an
operator image that carried a JVM or PySpark, a runtime image without them, labels that do
not name the version and commit the image was built from, or an SBOM that misses a package.
"""

from __future__ import annotations

import json
import re
import subprocess
import time
from pathlib import Path

import pytest

from snapshotjob_contract.version import __version__
from testbed import images

REPO = Path(__file__).resolve().parents[2]
BUILD = REPO / "hack" / "images" / "build.sh"
OPERATOR_MAX_BYTES = 400_000_000
"""The operator image's size budget: Python and the operator's dependencies only."""


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, capture_output=True, text=True, timeout=300, check=False)


def _head() -> str:
    return _run("git", "-C", str(REPO), "rev-parse", "HEAD").stdout.strip()


HEADS: set[str] = set()
"""The commits checked out while the images were built (others may commit meanwhile)."""


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    """Builds every split image and its SBOM; target -> image name."""
    HEADS.add(_head())
    build = subprocess.run(
        ["bash", str(BUILD), "split"], capture_output=True, text=True, timeout=3600, check=False
    )
    assert build.returncode == 0, f"build.sh split failed:\n{build.stderr[-4000:]}"
    HEADS.add(_head())
    return images.split_images()


IMPORT_ALL = """
import importlib, pkgutil
import snapshot_operator, snapshot_protocol, snapshot_store, snapshotjob_contract
failed = []
for package in (snapshot_operator, snapshot_protocol, snapshot_store, snapshotjob_contract):
    for module in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
        try:
            importlib.import_module(module.name)
        except Exception as error:
            failed.append((module.name, repr(error)))
print(failed)
"""
"""Imports every module of the operator's packages; prints the ones that failed."""


def _labels(image: str) -> dict[str, str]:
    out = _run("docker", "image", "inspect", "--format", "{{json .Config.Labels}}", image)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _sbom_packages(target: str) -> set[str]:
    sbom = json.loads((images.SBOM_DIR / f"{target}.spdx.json").read_text(encoding="utf-8"))
    assert sbom["spdxVersion"].startswith("SPDX-")
    return {package["name"].lower() for package in sbom["packages"]}


def _locked(name: str) -> str:
    lock = (REPO / "requirements.lock").read_text(encoding="utf-8")
    match = re.search(rf"^{re.escape(name)}==(\S+)$", lock, re.M)
    assert match, f"{name} not in requirements.lock"
    return match.group(1)


def test_every_image_is_labelled_with_this_version_and_commit(built: dict[str, str]) -> None:
    for target, image in built.items():
        labels = _labels(image)
        assert labels["org.opencontainers.image.version"] == __version__, (image, labels)
        assert labels["org.opencontainers.image.revision"] in HEADS, (image, labels, HEADS)
        assert labels["org.opencontainers.image.licenses"] == "Apache-2.0"
        assert labels["org.opencontainers.image.title"] == f"snapshotjob-{target}"
        assert "org.opencontainers.image.source" in labels


def test_the_operator_image_has_no_jvm_and_no_spark(built: dict[str, str]) -> None:
    image = built["operator"]
    probe = _run(
        "docker", "run", "--rm", image, "sh", "-c",
        "python -m snapshot_operator --help >/dev/null && ! command -v java"
        " && ! python -c 'import pyspark' 2>/dev/null && echo ok",
    )  # fmt: skip
    assert probe.stdout.strip() == "ok", probe.stdout + probe.stderr
    # Every module the operator may load imports without PySpark or a JVM.
    imports = _run("docker", "run", "--rm", image, "python", "-c", IMPORT_ALL)
    assert imports.returncode == 0 and imports.stdout.strip() == "[]", (
        imports.stdout + imports.stderr
    )
    packages = _sbom_packages("operator")
    assert {"kopf", "kubernetes", "hazelcast-python-client", "boto3"} <= packages
    assert "pyspark" not in packages
    assert not {p for p in packages if p.startswith("openjdk")}, packages
    size = int(_run("docker", "image", "inspect", "--format", "{{.Size}}", image).stdout)
    assert size < OPERATOR_MAX_BYTES, f"{image} is {size} bytes"


def test_the_runtime_image_runs_the_locked_pyspark_on_java_17(built: dict[str, str]) -> None:
    probe = _run(
        "docker", "run", "--rm", built["spark-runtime"], "sh", "-c",
        "java -version 2>&1 | head -1; python -c 'import pyspark; print(pyspark.__version__)';"
        " ls /opt/snapshotjob/cds/ /opt/snapshotjob/jars/; command -v executor;"
        " command -v kafka-broker s3-server hazelcast-member || true",
    )  # fmt: skip
    lines = probe.stdout.splitlines()
    assert lines[0].startswith('openjdk version "17.'), probe.stdout + probe.stderr
    assert lines[1] == _locked("pyspark")
    assert any(line.endswith(".jsa") for line in lines), "no CDS archive"
    assert "snapshotjob-chunks" in lines and "/usr/local/bin/executor" in lines
    assert not [line for line in lines if line.endswith(("kafka-broker", "s3-server", "member"))]
    packages = _sbom_packages("spark-runtime")
    assert {"pyspark", "pyarrow", "openjdk-17-jre-headless", "snapshotjob"} <= packages


def test_the_runtime_image_s_sessions_load_the_kafka_connector_and_the_chunk_jars(
    built: dict[str, str],
) -> None:
    """What every driver session puts on its classpath (``spark_runtime.session``) from the
    image's ``SJ_JARS_DIR``: without the connector no job reads Kafka ("Failed to find data
    source: kafka"), without the chunk jars executors write through Python workers."""
    probe = _run(
        "docker", "run", "--rm", built["spark-runtime"], "python", "-c",
        "import json; from spark_runtime import session as s;"
        " print(json.dumps([s.kafka_connector_jars(), s.state_chunk_jars()]))",
    )  # fmt: skip
    assert probe.returncode == 0, probe.stderr
    kafka, chunks = json.loads(probe.stdout.splitlines()[-1])
    names = {path.rsplit("/", 1)[-1] for path in kafka + chunks}
    assert any(name.startswith("spark-sql-kafka-0-10_") for name in names), kafka
    assert any(name.startswith("kafka-clients-") for name in names), kafka
    assert "snapshotjob-chunks.jar" in names and any(n.startswith("hazelcast-") for n in names), (
        chunks
    )


def test_the_member_image_holds_hazelcast_and_no_python(built: dict[str, str]) -> None:
    probe = _run(
        "docker", "run", "--rm", built["member"], "sh", "-c",
        "command -v hazelcast-member && ! command -v python3 && echo ok",
    )  # fmt: skip
    assert probe.stdout.splitlines()[-1:] == ["ok"], probe.stdout + probe.stderr
    packages = _sbom_packages("member")
    assert "hazelcast" in packages and "pyspark" not in packages


SERVERS = {
    "member": (5701, ()),
    "test-kafka-broker": (9092, ("SJ_KAFKA_ADVERTISED_HOST=localhost", "SJ_KAFKA_DATA=/tmp/k")),
    "test-s3proxy": (8080, ("SJ_S3_ACCESS_KEY=a", "SJ_S3_SECRET_KEY=b", "SJ_S3_DATA=/tmp/s")),
}
"""Target -> the port its image's default command listens on, and the environment it needs."""


@pytest.mark.parametrize("target", sorted(SERVERS))
def test_the_servers_images_listen_with_their_default_command(
    built: dict[str, str], target: str
) -> None:
    port, env = SERVERS[target]
    name = f"sj-image-test-{target}"
    _run("docker", "rm", "-f", name)
    env_args = [arg for pair in env for arg in ("-e", pair)]
    started = _run("docker", "run", "-d", "--name", name, *env_args, built[target])
    assert started.returncode == 0, started.stderr
    # /proc/net/tcp: a socket on the port in state 0A (LISTEN); the images have no ss/netstat.
    listening = re.compile(rf"^\s*\d+: [0-9A-F]+:{port:04X} [0-9A-F]+:0000 0A ", re.M)
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            table = _run("docker", "exec", name, "cat", "/proc/net/tcp", "/proc/net/tcp6")
            if listening.search(table.stdout):
                break
            running = _run("docker", "inspect", "--format", "{{.State.Running}}", name)
            assert running.stdout.strip() == "true", _run("docker", "logs", name).stdout
            time.sleep(2)
        else:
            pytest.fail(f"{target} never listened on {port}: {_run('docker', 'logs', name).stdout}")
    finally:
        _run("docker", "rm", "-f", name)
