"""The split images' Dockerfiles, their names and their docs agree with each other.

Why: the names are written once (``hack/images/images.env``) and read by ``build.sh``, the
test bed and the docs; each Dockerfile must build from a base passed as a build argument (the
test bed passes its offline base, a user the public default), and carry the OCI labels a
registry and an SBOM tool read. These checks read the files, so they hold on any machine; the
built images themselves are checked by ``tests/integration/test_images.py``.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed import images

REPO = Path(__file__).resolve().parents[2]
IMAGES_DIR = REPO / "hack" / "images"
BUILD_SH = IMAGES_DIR / "build.sh"
DOCS = REPO / "docs" / "development" / "e2e.md"
OCI_LABELS = ("title", "version", "revision", "source", "licenses")
BASE_ARGS = {
    "BASE_IMAGE": "python:3.11-slim-bookworm",
    "JVM_BASE_IMAGE": "debian:bookworm-slim",
}


def _dockerfile(target: str) -> str:
    return (IMAGES_DIR / f"{target}.Dockerfile").read_text(encoding="utf-8")


def test_images_env_names_one_image_per_target() -> None:
    env = images.read_images_env()
    assert set(env) == set(images.TARGETS), "images.env and testbed/images.py TARGETS differ"
    assert len(set(env.values())) == len(env), f"two targets share an image name: {env}"
    assert all(re.fullmatch(r"[a-z0-9./-]+:[a-z0-9.-]+", name) for name in env.values()), env


def test_images_env_rejects_a_line_that_is_no_assignment(tmp_path: Path) -> None:
    bad = tmp_path / "images.env"
    bad.write_text("# ok\nOPERATOR_IMAGE=a:b\nexport X = y\n")
    with pytest.raises(ValueError, match=r"images\.env:3"):
        images.read_images_env(bad)


def test_build_sh_builds_every_target_under_its_images_env_name() -> None:
    script = BUILD_SH.read_text(encoding="utf-8")
    assert 'source "${IMAGES_DIR}/images.env"' in script
    body = re.search(r"^split_image\(\) \{\n(.*?)^\}", script, re.S | re.M)
    assert body, "no split_image() in build.sh"
    cases = dict(
        re.findall(r"^\s+([a-z0-9-]+)\) echo \"\$\{([A-Z0-9_]+)\}\" ;;", body.group(1), re.M)
    )
    assert cases == {target: variable for variable, target in images.TARGETS.items()}
    split = re.search(r"^SPLIT_TARGETS=\((.*)\)$", script, re.M)
    assert split and split.group(1).split() == list(images.TARGETS.values())


@pytest.mark.parametrize("target", list(images.TARGETS.values()))
def test_each_dockerfile_builds_its_target_from_a_base_build_argument(target: str) -> None:
    text = _dockerfile(target)
    first_from = text.index("\nFROM ")
    args = dict(re.findall(r"^ARG (\w*BASE_IMAGE)=(\S+)$", text[:first_from], re.M))
    assert len(args) == 1 and args.items() <= BASE_ARGS.items(), args
    (arg,) = args
    assert re.search(rf"^FROM \$\{{{arg}\}} AS \S+$", text, re.M), "the base is not the ARG"
    stages = re.findall(r"^FROM (\S+) AS (\S+)$", text, re.M)
    assert stages[-1][1] == target, f"the last stage is not {target}: {stages}"
    assert all(not source.startswith(("python:", "debian:")) for source, _ in stages)


@pytest.mark.parametrize("target", list(images.TARGETS.values()))
def test_each_dockerfile_labels_its_image_after_its_last_layer(target: str) -> None:
    text = _dockerfile(target)
    for label in OCI_LABELS:
        assert f"org.opencontainers.image.{label}=" in text, label
    assert 'org.opencontainers.image.version="${VERSION}"' in text
    assert 'org.opencontainers.image.revision="${REVISION}"' in text
    # Declared after the last RUN and COPY: a new commit changes the labels, not a layer.
    final = text[text.rindex("\nFROM ") :]
    assert final.index("ARG REVISION") > max(final.rfind("\nRUN "), final.rfind("\nCOPY ")), (
        "ARG REVISION before a layer: every commit would rebuild it"
    )


def test_the_operator_image_has_no_jvm_and_no_spark() -> None:
    text = _dockerfile("operator")
    assert "openjdk" not in text and "jars/" not in text
    runtime = _dockerfile("spark-runtime")
    assert "openjdk-17-jre-headless" in runtime and "spark_runtime.cds" in runtime


def test_the_product_images_carry_no_test_server() -> None:
    for target in set(images.TARGETS.values()) - images.TEST_ONLY:
        text = re.sub(r"^#.*$", "", _dockerfile(target), flags=re.M)
        assert "kafka" not in text and "s3proxy" not in text, target
        assert "examples/" not in text and "e2e" not in text, target


def test_the_docs_table_lists_every_image_with_its_dockerfile() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    rows = re.findall(r"^\| `([^`]+)` \| `hack/images/([a-z0-9-]+)\.Dockerfile` \|", docs, re.M)
    assert sorted(rows) == sorted(
        (name, target) for target, name in images.split_images().items()
    ), rows
