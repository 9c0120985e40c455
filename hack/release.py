#!/usr/bin/env python3
"""Cuts a SnapshotJob release: the thin adapter over git, docker and helm.

Usage::

    hack/release.py check                 # print the version; fail if its sites disagree
    hack/release.py stamp X.Y.Z           # write X.Y.Z into the version's sites only
    hack/release.py release X.Y.Z [--dry-run] [--skip-images] [--work-dir DIR]

``release`` (``make release VERSION=X.Y.Z``) refuses a tree with changes or untracked files
and a version that is not semver or not newer than the tree's, the CHANGELOG's and the tags';
stamps the version (``snapshotjob_contract/version.py``, the chart's ``version`` and
``appVersion``); moves the CHANGELOG's Unreleased entries under ``## [X.Y.Z] - <date>``; builds
the product images ``snapshotjob/operator:X.Y.Z``, ``snapshotjob/spark-runtime:X.Y.Z`` and
``snapshotjob/member:X.Y.Z`` (the repositories of ``hack/images/images.env``) with
``hack/images/build.sh`` and checks the version each carries; ``helm package``s the chart into
``dist/``; commits "Release X.Y.Z", creates the annotated tag ``vX.Y.Z`` and writes
``dist/release-X.Y.Z.json``, which lists the images. ``--dry-run`` does the same in a fresh
clone in a temporary directory (or ``--work-dir``) and commits and tags nothing.
``--skip-images`` is for tests: it leaves the images out. The logic is in
``hack/versioning.py``.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import yaml

# The repository (for testbed's helm) and this folder (for versioning), however it is started.
sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]

import versioning  # noqa: E402
from versioning import ReleaseError  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
VERSION_LABEL = "org.opencontainers.image.version"
"""The OCI label ``build.sh`` sets on every image to the version in ``VERSION_MODULE``."""
WITHOUT_PYTHON = frozenset({"member"})
"""The released images with no Python (Java and the Hazelcast jar only): only their label can
say their version."""


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    """Runs a command in ``cwd``; its stdout, or ReleaseError with its stderr."""
    result = subprocess.run(
        list(args), cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise ReleaseError(f"{' '.join(args)} failed ({result.returncode}): {result.stderr}")
    return result.stdout


def read_versions(repo: Path) -> dict[str, str]:
    """Every site's version: the package's and the chart's ``version`` and ``appVersion``."""
    chart_version, app_version = versioning.chart_versions(
        (repo / versioning.CHART_FILE).read_text()
    )
    return {
        versioning.VERSION_MODULE: versioning.module_version(
            (repo / versioning.VERSION_MODULE).read_text()
        ),
        f"{versioning.CHART_FILE} version": chart_version,
        f"{versioning.CHART_FILE} appVersion": app_version,
    }


def check(repo: Path) -> str:
    """The tree's version, if every site carries the same one."""
    versions = read_versions(repo)
    if len(set(versions.values())) != 1:
        raise ReleaseError(f"the version's sites disagree: {versions}")
    return next(iter(versions.values()))


def stamp(repo: Path, version: str) -> None:
    """Writes ``version`` into the package's version module and the chart."""
    versioning.SemVer.parse(version)
    module = repo / versioning.VERSION_MODULE
    module.write_text(versioning.stamp_module(module.read_text(), version))
    chart = repo / versioning.CHART_FILE
    chart.write_text(versioning.stamp_chart(chart.read_text(), version))


def find_helm(given: str | None) -> str:
    """``--helm``, ``$HELM``, ``helm`` on the PATH, or the test bed's (``hack/kube/build.sh``)."""
    if given or os.environ.get("HELM"):
        return given or os.environ["HELM"]
    on_path = shutil.which("helm")
    if on_path:
        return on_path
    from testbed.kube_binaries import binary_path

    built = binary_path("helm")
    if not built.exists():
        raise ReleaseError("no helm: put it on the PATH, set HELM, or run hack/kube/build.sh")
    return str(built)


def refuse_changes(repo: Path) -> None:
    """Refuses a tree with changes or untracked files: the images are built from the tree."""
    status = run("git", "status", "--porcelain", cwd=repo)
    if status.strip():
        raise ReleaseError(f"the tree has changes or untracked files:\n{status}")


def build_images(repo: Path, version: str) -> dict[str, str]:
    """Builds the released images tagged ``version``; each one's reference and image ID.

    Also checks that each image says ``version``: its ``VERSION_LABEL`` and, where the image
    has Python, the version of the ``snapshotjob`` package installed in it.

    Raises:
        ReleaseError: If ``build.sh`` fails or an image says another version.
    """
    repositories = versioning.released_repositories(
        (repo / versioning.IMAGES_ENV).read_text(encoding="utf-8")
    )
    env = {**os.environ, "SJ_IMAGE_TAG": version}
    if "VENV" not in env and sys.prefix != sys.base_prefix:
        # build.sh pins the images' wheels to a virtualenv it finds relative to the tree: the
        # one running this script (a dry run's clone has none of its own).
        env["VENV"] = os.path.relpath(sys.prefix, repo)
    command = ["bash", "hack/images/build.sh", *repositories]
    # Not run(): the build's progress streams to the terminal, for the minutes it takes.
    if subprocess.run(command, cwd=repo, env=env, check=False).returncode != 0:
        raise ReleaseError(f"{' '.join(command)} failed; its output is above")
    images: dict[str, str] = {}
    for target, repository in repositories.items():
        reference = versioning.image_reference(version, repository)
        image_id = run("docker", "image", "inspect", "--format", "{{.Id}}", reference, cwd=repo)
        labelled = run(
            "docker", "image", "inspect", "--format",
            f'{{{{index .Config.Labels "{VERSION_LABEL}"}}}}', reference,
            cwd=repo,
        ).strip()  # fmt: skip
        if labelled != version:
            raise ReleaseError(
                f"{reference}'s {VERSION_LABEL} label says {labelled!r}, not {version}"
            )
        if target not in WITHOUT_PYTHON:
            inside = run(
                "docker", "run", "--rm", reference, "python", "-c",
                "import importlib.metadata as m; print(m.version('snapshotjob'))",
                cwd=repo,
            ).strip()  # fmt: skip
            if inside != version:
                raise ReleaseError(f"the package in {reference} says {inside}, not {version}")
        images[reference] = image_id.strip()
    return images


def package_chart(repo: Path, helm: str, version: str) -> Path:
    """``helm package``s the chart into ``dist/``; the archive, checked to carry ``version``."""
    dist = repo / "dist"
    dist.mkdir(exist_ok=True)
    run(helm, "package", versioning.CHART_DIR, "--destination", str(dist), cwd=repo)
    name: str = yaml.safe_load((repo / versioning.CHART_FILE).read_text())["name"]
    archive = dist / versioning.chart_archive_name(name, version)
    shown = yaml.safe_load(run(helm, "show", "chart", str(archive), cwd=repo))
    if (shown["version"], shown["appVersion"]) != (version, version):
        raise ReleaseError(f"{archive.name} says {shown['version']}/{shown['appVersion']}")
    return archive


def release(args: argparse.Namespace) -> Path:
    """Cuts the release (see the module's docstring); the manifest's path."""
    source = Path(args.repo).resolve()
    helm = find_helm(args.helm)
    refuse_changes(source)
    current = check(source)
    changelog = (source / versioning.CHANGELOG).read_text()
    tags = run("git", "tag", "--list", "v*", cwd=source).split()
    version = str(
        versioning.check_new_version(
            args.version,
            current,
            versioning.released_versions(changelog),
            versioning.tag_versions(tags),
        )
    )
    date = args.date or datetime.datetime.now(datetime.UTC).date().isoformat()
    repo = source
    if args.dry_run:
        work = Path(args.work_dir or tempfile.mkdtemp(prefix="snapshotjob-release-"))
        repo = work / "snapshotjob"
        run("git", "clone", "--quiet", str(source), str(repo), cwd=work)
    log(f"releasing {version} (from {current}) in {repo}")
    new_changelog = versioning.cut_changelog(changelog, version, date)
    stamp(repo, version)
    (repo / versioning.CHANGELOG).write_text(new_changelog)
    if check(repo) != version:
        raise ReleaseError(f"stamping left the versions at {read_versions(repo)}")
    images = {} if args.skip_images else build_images(repo, version)
    archive = package_chart(repo, helm, version)
    if not args.dry_run:
        files = list(versioning.STAMPED_FILES)
        run("git", "add", "--", *files, cwd=repo)
        run("git", "commit", "--quiet", "-m", f"Release {version}", "--", *files, cwd=repo)
        run("git", "tag", "--annotate", f"v{version}", "-m", f"SnapshotJob {version}", cwd=repo)
    revision = run("git", "rev-parse", "HEAD", cwd=repo).strip()
    manifest = versioning.release_manifest(
        version=version,
        revision=revision,
        date=date,
        images=images,
        chart_archive=archive.name,
        chart_sha256=hashlib.sha256(archive.read_bytes()).hexdigest(),
        dry_run=args.dry_run,
    )
    path = repo / "dist" / f"release-{version}.json"
    path.write_text(json.dumps(manifest, indent=2) + "\n")
    log(f"released {version}: {'nothing committed (dry run)' if args.dry_run else f'v{version}'}")
    log(f"manifest {path}")
    return path


def log(message: str) -> None:
    """One line of progress on stderr."""
    print(f"release: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> int:
    """The command line; 2 when the release is refused, with the reason."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("check", help="print the version; fail if its sites disagree")
    stamp_cmd = sub.add_parser("stamp", help="write a version into its sites only")
    stamp_cmd.add_argument("version")
    cut = sub.add_parser("release", help="stamp, CHANGELOG, images, chart, commit and tag")
    cut.add_argument("version")
    cut.add_argument("--dry-run", action="store_true", help="in a temporary clone; no commit")
    cut.add_argument("--work-dir", help="where a dry run clones (default: a new temp dir)")
    cut.add_argument("--skip-images", action="store_true", help="no images (tests; --dry-run only)")
    cut.add_argument("--repo", default=str(REPO), help="the repository (default: this one)")
    cut.add_argument("--helm", help="the helm binary (default: $HELM, PATH, the test bed's)")
    cut.add_argument("--date", help="the CHANGELOG's release date (default: today, UTC)")
    args = parser.parse_args(argv)
    if args.command == "release" and args.skip_images and not args.dry_run:
        parser.error("--skip-images only with --dry-run: a release without its images is none")
    try:
        if args.command == "check":
            print(check(REPO))
        elif args.command == "stamp":
            stamp(REPO, args.version)
        else:
            release(args)
    except ReleaseError as refused:
        log(f"refused: {refused}")
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
