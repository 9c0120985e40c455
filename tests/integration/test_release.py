"""hack/release.py on a clone of this repository: a dry run stamps, cuts and packages, and
commits nothing; a tree with untracked files is refused; the images are built and checked.

The real ``git`` and ``helm`` (built by ``hack/kube/build.sh``) run. The image build is left
out with ``--skip-images``, or done by a stand-in ``build.sh`` and ``docker`` that record what
they are asked: a release builds ``snapshotjob/operator``, ``snapshotjob/spark-runtime`` and
``snapshotjob/member`` at its version with ``hack/images/build.sh``, which ``make release``
exercises. The file transformations themselves are unit-tested in
``tests/unit/test_versioning.py``.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.fixtures.kube import binary

pytestmark = pytest.mark.helm

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "hack" / "release.py"
DATE = "2026-12-07"
ENTRY = "- An entry the release test adds."
VERSION_MODULE = "snapshotjob_contract/version.py"


def git(repo: Path, *args: str) -> str:
    """Runs git in ``repo``; its stdout."""
    return subprocess.run(
        ["git", *args], cwd=repo, capture_output=True, text=True, check=True, timeout=60
    ).stdout


def release(
    repo: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Runs this checkout's hack/release.py against ``repo`` (in ``env``, if given)."""
    return subprocess.run(
        [sys.executable, str(SCRIPT), "release", *args, "--repo", str(repo)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=env,
    )


def tree_version(repo: Path) -> str:
    """The version ``repo``'s tree carries."""
    found = re.search(r'^__version__ = "(.+)"$', (repo / VERSION_MODULE).read_text(), re.M)
    assert found is not None
    return found.group(1)


@pytest.fixture
def clone(tmp_path: Path) -> Path:
    """A clone of this repository's HEAD with one more CHANGELOG entry, committed."""
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "--quiet", str(REPO), str(repo)], check=True, timeout=60)
    changelog = repo / "CHANGELOG.md"
    text = changelog.read_text()
    changelog.write_text(
        re.sub(r"^## Unreleased\n", f"## Unreleased\n\n{ENTRY}\n", text, count=1, flags=re.M)
    )
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "An entry")
    return repo


def next_minor(repo: Path) -> str:
    """The version after ``repo``'s tree's, one minor up."""
    major, minor, _ = tree_version(repo).split("-")[0].split(".")
    return f"{major}.{int(minor) + 1}.0"


def test_a_dry_run_stamps_cuts_and_packages_in_a_clone_and_commits_nothing(
    clone: Path, tmp_path: Path
) -> None:
    """The chart archive, the CHANGELOG and the manifest carry the new version; the source
    repository keeps its commit, its tags and its files."""
    version = next_minor(clone)
    unreleased = (clone / "CHANGELOG.md").read_text().split("## Unreleased\n", 1)[1]
    entries = unreleased.split("\n## ", 1)[0].strip("\n")
    head, tags = git(clone, "rev-parse", "HEAD"), git(clone, "tag")
    work = tmp_path / "work"
    work.mkdir()

    result = release(
        clone, version, "--dry-run", "--skip-images", "--work-dir", str(work),
        "--helm", str(binary("helm")), "--date", DATE,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr

    assert (git(clone, "rev-parse", "HEAD"), git(clone, "tag")) == (head, tags)
    assert git(clone, "status", "--porcelain") == ""
    released = work / "snapshotjob"
    assert git(released, "rev-parse", "HEAD") == head, "a dry run commits nothing"
    assert f"v{version}" not in git(released, "tag").split()

    archive = released / "dist" / f"snapshotjob-operator-{version}.tgz"
    shown = yaml.safe_load(
        subprocess.run(
            [str(binary("helm")), "show", "chart", str(archive)],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
        ).stdout
    )
    assert (shown["version"], shown["appVersion"]) == (version, version)
    assert (
        f'__version__ = "{version}"' in (released / "snapshotjob_contract/version.py").read_text()
    )

    changelog = (released / "CHANGELOG.md").read_text()
    assert f"## Unreleased\n\n## [{version}] - {DATE}\n\n{entries}\n\n## " in changelog
    assert ENTRY in entries

    manifest = json.loads((released / "dist" / f"release-{version}.json").read_text())
    assert manifest == {
        "version": version,
        "tag": f"v{version}",
        "git_revision": head.strip(),
        "date": DATE,
        "dry_run": True,
        "images": [],
        "chart": {
            "archive": archive.name,
            "sha256": hashlib.sha256(archive.read_bytes()).hexdigest(),
        },
    }


def test_a_tree_with_untracked_files_or_an_old_version_is_refused(clone: Path) -> None:
    """The image would be built from files no commit holds; equal is not newer."""
    refused = release(clone, tree_version(clone), "--dry-run", "--skip-images", "--helm", "helm")
    assert refused.returncode == 2
    assert "is not newer than the tree's version" in refused.stderr

    (clone / "stray.py").write_text("")
    refused = release(clone, "99.0.0", "--dry-run", "--skip-images", "--helm", "helm")
    assert refused.returncode == 2
    assert "untracked" in refused.stderr and "stray.py" in refused.stderr
    assert git(clone, "status", "--porcelain") == "?? stray.py\n"


# Stands in for hack/images/build.sh in the clone: records its targets and environment.
FAKE_BUILD_SH = """#!/usr/bin/env bash
echo "SJ_IMAGE_TAG=${SJ_IMAGE_TAG:-} VENV=${VENV:-} $*" >>"${FAKE_LOG}"
"""

# Stands in for docker: an image says the version it is tagged with, the member has no python,
# and FAKE_MEMBER_LABEL overrides the member's version label.
FAKE_DOCKER = """#!PYTHON
import os, sys
args = sys.argv[1:]
with open(os.environ["FAKE_LOG"], "a") as log:
    print("docker", *args, file=log)
reference = args[-1] if args[0] == "image" else args[2]
tag = reference.rpartition(":")[2]
if args[0] == "run" and "member" in reference:
    sys.exit("exec: python: not found")
if args[:3] == ["image", "inspect", "--format"] and args[3] != "{{.Id}}":
    member = "member" in reference and os.environ.get("FAKE_MEMBER_LABEL")
    print(member or tag)
else:
    print(f"sha256:{reference}" if args[0] == "image" else tag)
"""


def test_a_release_builds_and_checks_the_three_product_images(clone: Path, tmp_path: Path) -> None:
    """build.sh builds operator, spark-runtime and member at the version; the Python images'
    package and the member's label are checked, and a label saying another version refuses."""
    (clone / "hack/images/build.sh").write_text(FAKE_BUILD_SH)
    git(clone, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qam", "Fake build")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER.replace("PYTHON", sys.executable, 1))
    docker.chmod(0o755)
    log = tmp_path / "calls.log"
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "FAKE_LOG": str(log)}
    env.pop("VENV", None)
    version = next_minor(clone)
    work = tmp_path / "work"
    work.mkdir()
    options = ("--dry-run", "--helm", str(binary("helm")), "--date", DATE)

    result = release(clone, version, *options, "--work-dir", str(work), env=env)
    assert result.returncode == 0, result.stderr

    released = work / "snapshotjob"
    build, *calls = log.read_text().splitlines()
    tag, venv, targets = build.split(" ", 2)
    assert (tag, targets) == (f"SJ_IMAGE_TAG={version}", "operator spark-runtime member")
    assert (released / venv.removeprefix("VENV=")).resolve() == Path(sys.prefix).resolve()
    references = [f"snapshotjob/{t}:{version}" for t in ("operator", "spark-runtime", "member")]
    ran = [call.split()[3] for call in calls if call.startswith("docker run")]
    assert ran == references[:2], "only the images with Python run it"
    labels = [c.split()[-1] for c in calls if "org.opencontainers.image.version" in c]
    assert labels == references
    manifest = json.loads((released / "dist" / f"release-{version}.json").read_text())
    assert manifest["images"] == [{"reference": r, "id": f"sha256:{r}"} for r in references]

    env["FAKE_MEMBER_LABEL"] = "0.0.1"
    again = tmp_path / "again"
    again.mkdir()
    refused = release(clone, version, *options, "--work-dir", str(again), env=env)
    assert refused.returncode == 2
    assert (
        f"snapshotjob/member:{version}'s org.opencontainers.image.version label says '0.0.1'"
        in refused.stderr
    )
