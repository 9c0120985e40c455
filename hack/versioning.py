"""The release's pure logic: versions, where they are written, the CHANGELOG cut, the manifest.

No I/O: every function takes text and returns text or data. ``hack/release.py`` (the adapter)
reads and writes the files and runs git, docker and helm. ``tests/unit/test_versioning.py``
checks this module; ``tests/unit/test_product_version.py`` checks that the repository's
versions agree.

The product's version is written once, in :data:`VERSION_MODULE`; ``pyproject.toml`` reads it
from there. The chart's ``version`` and ``appVersion`` are stamped to the same value, so one
number names the wheel, the released images' tag and the chart. The released images' names are
written once too, in :data:`IMAGES_ENV`; :func:`released_repositories` reads them from its text.
"""

# No `from __future__ import annotations`: tests load this file without registering it in
# sys.modules, where dataclasses would look string annotations up.
import re
from dataclasses import dataclass
from typing import Any

VERSION_MODULE = "snapshotjob_contract/version.py"
CHART_DIR = "charts/snapshotjob-operator"
CHART_FILE = f"{CHART_DIR}/Chart.yaml"
CHANGELOG = "CHANGELOG.md"
STAMPED_FILES = (VERSION_MODULE, CHART_FILE, CHANGELOG)
"""What a release changes and commits: the version's sites and the CHANGELOG."""

IMAGES_ENV = "hack/images/images.env"
"""The images' names, as ``NAME=value`` lines: ``hack/images/build.sh`` sources the file."""

RELEASED_IMAGES = {
    "OPERATOR_IMAGE": "operator",
    "SPARK_RUNTIME_IMAGE": "spark-runtime",
    "MEMBER_IMAGE": "member",
}
"""The product images a release builds and tags: :data:`IMAGES_ENV`'s variable -> the
``build.sh`` target that builds it (the operator; the Spark drivers' and executors' base, which
users' job images build ``FROM``; the snapshot store's Hazelcast members). The test-only images
named there are not released."""

# Semantic Versioning 2.0.0 without build metadata: a `+` is not allowed in an image tag.
_SEMVER = re.compile(
    r"(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)"
    r"(?:-((?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*)(?:\.(?:0|[1-9]\d*|\d*[a-zA-Z-][0-9a-zA-Z-]*))*))?"
)
_MODULE_LINE = re.compile(r'^__version__ = "([^"\n]*)"$', re.MULTILINE)
_CHART_VERSION = re.compile(r"^version:[ \t]*(\S*)[ \t]*$", re.MULTILINE)
_CHART_APP_VERSION = re.compile(r"^appVersion:[ \t]*(\S*)[ \t]*$", re.MULTILINE)
_HEADING = re.compile(r"^## .*$", re.MULTILINE)
_UNRELEASED = re.compile(r"^## \[?Unreleased\]?[ \t]*$", re.MULTILINE | re.IGNORECASE)
_RELEASE_HEADING = re.compile(r"^## \[?(\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)\]?", re.MULTILINE)
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_ENV_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(\S+)$")


class ReleaseError(ValueError):
    """A release refused or failed, with the reason as its message."""


@dataclass(frozen=True)
class SemVer:
    """A Semantic Versioning 2.0.0 version (no build metadata), ordered by precedence."""

    major: int
    minor: int
    patch: int
    prerelease: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> "SemVer":
        """Parses ``MAJOR.MINOR.PATCH`` with an optional ``-prerelease``.

        Raises:
            ReleaseError: If ``text`` is not such a version (a leading ``v``, a leading
                zero, build metadata or a missing part are refused).
        """
        match = _SEMVER.fullmatch(text)
        if match is None:
            raise ReleaseError(
                f"{text!r} is not a semantic version MAJOR.MINOR.PATCH[-PRERELEASE] "
                "(no leading 'v', no leading zeros, no '+build')"
            )
        major, minor, patch, pre = match.groups()
        return cls(int(major), int(minor), int(patch), tuple(pre.split(".")) if pre else ())

    def __str__(self) -> str:
        core = f"{self.major}.{self.minor}.{self.patch}"
        return f"{core}-{'.'.join(self.prerelease)}" if self.prerelease else core

    def _key(self) -> tuple[Any, ...]:
        # A release sorts after its pre-releases; numeric identifiers sort before alphanumeric
        # ones and numerically; a shorter identifier list sorts first when all else is equal.
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.prerelease)
        return (self.major, self.minor, self.patch, not self.prerelease, pre)

    def __lt__(self, other: "SemVer") -> bool:
        return self._key() < other._key()

    def __le__(self, other: "SemVer") -> bool:
        return self._key() <= other._key()

    def __gt__(self, other: "SemVer") -> bool:
        return self._key() > other._key()

    def __ge__(self, other: "SemVer") -> bool:
        return self._key() >= other._key()


def _one(pattern: re.Pattern[str], text: str, what: str) -> re.Match[str]:
    matches = list(pattern.finditer(text))
    if len(matches) != 1:
        raise ReleaseError(f"expected exactly one {what}, found {len(matches)}")
    return matches[0]


def module_version(text: str) -> str:
    """The version in the text of :data:`VERSION_MODULE`."""
    return _one(_MODULE_LINE, text, f"'__version__ = \"...\"' line in {VERSION_MODULE}").group(1)


def stamp_module(text: str, version: str) -> str:
    """The text of :data:`VERSION_MODULE` with its version set to ``version``."""
    match = _one(_MODULE_LINE, text, f"'__version__ = \"...\"' line in {VERSION_MODULE}")
    return f'{text[: match.start()]}__version__ = "{version}"{text[match.end() :]}'


def _unquote(value: str) -> str:
    return value[1:-1] if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'" else value


def chart_versions(text: str) -> tuple[str, str]:
    """The top-level ``version`` and ``appVersion`` of a Chart.yaml's text."""
    version = _one(_CHART_VERSION, text, f"top-level 'version:' in {CHART_FILE}").group(1)
    app = _one(_CHART_APP_VERSION, text, f"top-level 'appVersion:' in {CHART_FILE}").group(1)
    return _unquote(version), _unquote(app)


def stamp_chart(text: str, version: str) -> str:
    """A Chart.yaml's text with ``version`` and ``appVersion`` both set to ``version``.

    Only those two lines change, so the file's comments and layout stay as written.
    """
    chart_versions(text)  # exactly one of each, or refuse
    text = _CHART_VERSION.sub(f"version: {version}", text)
    return _CHART_APP_VERSION.sub(f'appVersion: "{version}"', text)


def released_versions(changelog: str) -> list[SemVer]:
    """The versions the CHANGELOG has a section for (``## [1.2.3] - ...`` or ``## 1.2.3 ...``)."""
    return [SemVer.parse(m.group(1)) for m in _RELEASE_HEADING.finditer(changelog)]


def tag_versions(tags: list[str]) -> list[SemVer]:
    """The versions of the git tags named ``v<semver>``; other tags are not releases."""
    found = []
    for tag in tags:
        if tag.startswith("v") and _SEMVER.fullmatch(tag[1:]):
            found.append(SemVer.parse(tag[1:]))
    return found


def check_new_version(
    candidate: str, current: str, released: list[SemVer], tagged: list[SemVer]
) -> SemVer:
    """The release's version, if it may be released after what exists.

    Args:
        candidate: The version asked for.
        current: The version the tree carries now (:data:`VERSION_MODULE`).
        released: The versions the CHANGELOG has sections for.
        tagged: The versions of the repository's ``v*`` tags.

    Raises:
        ReleaseError: If ``candidate`` is not a semantic version, or not newer than the
            tree's version and every version released or tagged before.
    """
    version = SemVer.parse(candidate)
    if not version > SemVer.parse(current):
        raise ReleaseError(f"{version} is not newer than the tree's version {current}")
    for what, versions in (("the CHANGELOG's", released), ("the tag", tagged)):
        for earlier in versions:
            if not version > earlier:
                raise ReleaseError(f"{version} is not newer than {what} {earlier}")
    return version


def cut_changelog(changelog: str, version: str, date: str) -> str:
    """The CHANGELOG with its Unreleased entries moved under ``## [version] - date``.

    A fresh, empty Unreleased section stays on top, in the heading's original spelling.

    Raises:
        ReleaseError: If there is no Unreleased section, it holds no entry, or ``date`` is
            not ``YYYY-MM-DD``.
    """
    if not _DATE.fullmatch(date):
        raise ReleaseError(f"the release date {date!r} is not YYYY-MM-DD")
    heading = _one(_UNRELEASED, changelog, "'## Unreleased' section in the CHANGELOG")
    following = _HEADING.search(changelog, heading.end())
    end = following.start() if following else len(changelog)
    entries = changelog[heading.end() : end].strip("\n")
    if not any(line.lstrip().startswith(("-", "*")) for line in entries.splitlines()):
        raise ReleaseError("the CHANGELOG's Unreleased section has no entry to release")
    rest = changelog[end:]
    section = f"{heading.group(0)}\n\n## [{version}] - {date}\n\n{entries}\n"
    return changelog[: heading.start()] + section + ("\n" + rest if rest else "")


def _untagged(name: str) -> str:
    # A colon before the last slash is a registry's port, not a tag.
    repository, colon, tag = name.rpartition(":")
    return repository if colon and "/" not in tag else name


def released_repositories(images_env: str) -> dict[str, str]:
    """The repositories a release tags, by ``build.sh`` target, in :data:`RELEASED_IMAGES`' order.

    :data:`IMAGES_ENV` names each image with the tag a developer's build gets (``dev``); a
    release builds the same repositories under its version instead, so only they are kept.

    Args:
        images_env: The text of :data:`IMAGES_ENV`.

    Raises:
        ReleaseError: If a line is neither blank, a comment nor ``NAME=value``, or a released
            image's variable is missing.
    """
    names: dict[str, str] = {}
    for number, line in enumerate(images_env.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        match = _ENV_LINE.match(stripped)
        if match is None:
            raise ReleaseError(f"{IMAGES_ENV}:{number}: not NAME=value: {line!r}")
        names[match.group(1)] = match.group(2)
    missing = [variable for variable in RELEASED_IMAGES if variable not in names]
    if missing:
        raise ReleaseError(f"{IMAGES_ENV} does not name {', '.join(missing)}")
    return {target: _untagged(names[variable]) for variable, target in RELEASED_IMAGES.items()}


def image_reference(version: str, repository: str) -> str:
    """The image a release tags in ``repository``: ``repository:version``."""
    return f"{repository}:{version}"


def chart_archive_name(chart_name: str, version: str) -> str:
    """The file ``helm package`` writes for a chart at ``version``."""
    return f"{chart_name}-{version}.tgz"


def release_manifest(
    *,
    version: str,
    revision: str,
    date: str,
    images: dict[str, str],
    chart_archive: str,
    chart_sha256: str,
    dry_run: bool,
) -> dict[str, Any]:
    """What a release produced, as the JSON of ``dist/release-<version>.json``.

    Args:
        version: The release's version.
        revision: The git commit the release is (a dry run: the commit it started from).
        date: The release's date, as in the CHANGELOG.
        images: Each released image's reference and its local image ID, in build order;
            empty when the images were skipped.
        chart_archive: The chart archive's file name in ``dist/``.
        chart_sha256: The archive's SHA-256, hex.
        dry_run: Whether nothing was committed or tagged.
    """
    return {
        "version": version,
        "tag": f"v{version}",
        "git_revision": revision,
        "date": date,
        "dry_run": dry_run,
        "images": [{"reference": ref, "id": image_id} for ref, image_id in images.items()],
        "chart": {"archive": chart_archive, "sha256": chart_sha256},
    }
