"""Every binary, image and jar a test tier needs has a producer that really produces it.

Why: the cache of a machine that ran the tests before holds whatever was once built by hand,
so a missing build step only shows on a fresh machine. These tests read the producer scripts
instead of the cache: they fail on any machine, warm or cold, naming the artifact whose
producer does not make it. :func:`tests.fixtures.kube.binary` complements them at run time:
a test that runs a binary its markers do not declare fails even when the binary is cached.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from testbed import artifacts
from testbed.artifacts import Artifact, ArtifactKind

REPO = Path(__file__).resolve().parents[2]
ALL_ARTIFACTS = sorted(
    {a for needs in artifacts.MARKER_NEEDS.values() for a in needs},
    key=lambda a: (a.kind.value, a.name),
)


def _shell_function(script: str, name: str) -> str:
    """The body of ``name() { ... }`` in a shell script (up to the closing brace at col 0)."""
    match = re.search(rf"^{re.escape(name)}\(\) \{{\n(.*?)^\}}", script, re.S | re.M)
    assert match, f"no function {name}() in the script"
    return match.group(1)


def _built_by_group(group: str) -> set[str]:
    """The binary names that ``hack/kube/build.sh <group>`` passes to ``build_one``."""
    script = (REPO / artifacts.BUILD_SCRIPT).read_text()
    body = _shell_function(script, f"build_{group.replace('-', '_')}")
    names = set(re.findall(r"build_one ([a-z][a-z0-9-]+) ", body))
    loop = re.search(r"for name in (.*?); do", body, re.S)
    if loop and 'build_one "${name}"' in body:
        names |= set(loop.group(1).replace("\\\n", " ").split())
    return names


def _build_groups_accepted() -> set[str]:
    script = (REPO / artifacts.BUILD_SCRIPT).read_text()
    case = re.search(r"case \"\$\{g\}\" in\n(.*?)esac", script, re.S)
    assert case
    return set(re.findall(r"([a-z][a-z-]*)(?=[|)])", case.group(1)))


@pytest.mark.parametrize("group", sorted(artifacts.BINARY_GROUPS))
def test_each_build_group_builds_exactly_the_binaries_declared_for_it(group: str) -> None:
    assert group in _build_groups_accepted(), f"hack/kube/build.sh accepts no group {group}"
    assert _built_by_group(group) == set(artifacts.BINARY_GROUPS[group])


@pytest.mark.parametrize("artifact", ALL_ARTIFACTS, ids=lambda a: f"{a.kind.value}:{a.name}")
def test_every_needed_artifact_has_a_producer_that_makes_it(artifact: Artifact) -> None:
    producer = REPO / artifact.producer
    assert producer.is_file(), f"{artifact.name}: producer {artifact.producer} does not exist"
    text = producer.read_text()
    if artifact.kind is ArtifactKind.BINARY:
        assert artifact.name in _built_by_group(artifact.step), (
            f"{artifact.name}: hack/kube/build.sh {artifact.step} does not build it"
        )
    elif artifact.kind is ArtifactKind.IMAGE:
        repository = artifact.name.split(":", 1)[0]
        lib = (REPO / "hack/kube/lib.sh").read_text()
        assert repository in text or repository in lib, (
            f"{artifact.name}: {artifact.producer} never names the image"
        )
        if artifact.step:
            assert re.search(rf"^\s*{artifact.step}\)", text, re.M), (
                f"{artifact.name}: {artifact.producer} takes no argument {artifact.step}"
            )
    elif artifact.kind is ArtifactKind.WHEELS:
        assert f"$REPO/{artifact.name}" in text and 'pip" download' in text, (
            f"{artifact.name}: {artifact.producer} downloads no wheels of it"
        )
    elif artifact.kind is ArtifactKind.CLASS_ARCHIVE:
        assert f'python" -m {artifact.step}' in text, (
            f"{artifact.name}: {artifact.producer} never runs {artifact.step}"
        )
    else:
        assert f":{artifact.name}:" in text, (
            f"{artifact.name}: {artifact.producer} fetches no jar with that artifact id"
        )


def test_the_cluster_scripts_need_no_binary_the_cluster_marker_leaves_out() -> None:
    declared, _ = artifacts.binaries_of(["cluster"])
    scripts = ("cluster.sh", "node-image.sh", "images.sh", "registry.sh")
    for script in (f"hack/kube/{name}" for name in scripts):
        text = (REPO / script).read_text().replace("\\\n", " ")
        for line in re.findall(r"^\s*need_bins (.*)$", text, re.M):
            missing = set(line.split()) - set(declared)
            assert not missing, f"{script} needs {sorted(missing)}, undeclared for 'cluster'"


def test_every_binary_of_the_tests_is_declared_for_a_marker() -> None:
    """Static twin of the run-time check in ``binary()``: names passed to it are declared."""
    declared = {a.name for needs in artifacts.MARKER_NEEDS.values() for a in needs}
    used: set[str] = set()
    for path in (*(REPO / "tests").rglob("*.py"), *(REPO / "testbed").rglob("*.py")):
        used |= set(re.findall(r"\bbinary\(\"([a-z0-9-]+)\"\)", path.read_text()))
    assert used, "no test runs a testbed binary: the scan is broken"
    assert used <= declared, f"undeclared binaries: {sorted(used - declared)}"


def test_helm_is_declared_for_the_end_to_end_tests() -> None:
    """The regression this table was made for: e2e ran helm, nothing built it."""
    names, groups = artifacts.binaries_of(["e2e", "cluster", "slow"])
    assert "helm" in names and "helm" in groups


def test_the_node_image_carries_the_image_its_default_cni_runs() -> None:
    """No registry: the CNI DaemonSet's image must be imported into the node image."""
    manifest = (REPO / "hack/kube/flannel/manifest.yaml").read_text()
    images = set(re.findall(r"^\s*image: (\S+)$", manifest, re.M))
    assert images == {"snapshotjob/flannel:FLANNEL_VERSION"}, images
    assert "imagePullPolicy: Never" in manifest
    lib = (REPO / "hack/kube/lib.sh").read_text()
    assert 'FLANNEL_IMAGE="snapshotjob/flannel:${FLANNEL_VERSION}"' in lib
    images_sh = (REPO / "hack/kube/images.sh").read_text()
    assert 'echo "${FLANNEL_IMAGE}"' in _shell_function(images_sh, "list_components")
    assert "build_flannel" in _shell_function(images_sh, "build_components")
    declared = {a.name for a in artifacts.MARKER_NEEDS["cluster"]}
    assert "snapshotjob/flannel:{FLANNEL_VERSION}" in declared


def test_every_end_to_end_module_is_in_the_cluster_tier() -> None:
    """A module under tests/e2e without the ``cluster`` marker would run in the first session,
    beside the integration tier, and start the kind cluster and the release there."""
    e2e = Path(__file__).resolve().parents[1] / "e2e"
    unmarked = [
        module.name
        for module in sorted(e2e.glob("test_*.py"))
        if not re.search(r"^pytestmark = \[pytest\.mark\.cluster\b", module.read_text(), re.M)
    ]
    assert not unmarked, f"no pytestmark = [pytest.mark.cluster, ...] in {unmarked}"
