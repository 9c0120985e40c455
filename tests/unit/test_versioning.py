"""hack/versioning.py, the release's pure logic: semver order, the stamps, the CHANGELOG cut,
the released images' names.

``hack/release.py`` only reads and writes what these functions return and runs git, docker
and helm around them; ``tests/integration/test_release.py`` runs it on a clone.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from testbed import images
from tests.script_modules import load_script

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
V = load_script("versioning", REPO / "hack" / "versioning.py")

CHANGELOG = """# Changelog

**Who this is for:** readers.

## Unreleased

### Added
- A thing.

### Fixed
- Another thing.

## [1.1.0] - 2026-01-02

### Added
- An old thing.

## 1.0.0 (chart 1.0.3), not published

- The first.
"""


def test_precedence_follows_semver() -> None:
    """The ordering example of semver.org, item 11, in order."""
    ordered = [
        "1.0.0-alpha",
        "1.0.0-alpha.1",
        "1.0.0-alpha.beta",
        "1.0.0-beta",
        "1.0.0-beta.2",
        "1.0.0-beta.11",
        "1.0.0-rc.1",
        "1.0.0",
        "1.0.1",
        "1.2.0",
        "1.10.0",
        "2.0.0",
    ]
    parsed = [V.SemVer.parse(v) for v in ordered]
    assert sorted(reversed(parsed)) == parsed
    assert [str(v) for v in parsed] == ordered


@pytest.mark.parametrize(
    "text", ["v1.2.3", "1.2", "1.2.3.4", "01.2.3", "1.2.3+build.1", "1.2.3-", "1.2.3-01", ""]
)
def test_what_is_not_a_semantic_version_is_refused(text: str) -> None:
    """A leading v, missing or extra parts, leading zeros and build metadata."""
    with pytest.raises(V.ReleaseError, match="not a semantic version"):
        V.SemVer.parse(text)


def test_a_version_must_be_newer_than_the_tree_the_changelog_and_the_tags() -> None:
    """Equal is not newer; a pre-release of the current version is older than it."""
    released = V.released_versions(CHANGELOG)
    tagged = V.tag_versions(["v1.1.0", "v1.2.0-rc.1", "latest", "vnext"])
    assert [str(v) for v in released] == ["1.1.0", "1.0.0"]
    assert [str(v) for v in tagged] == ["1.1.0", "1.2.0-rc.1"]
    assert str(V.check_new_version("1.2.0", "1.1.0", released, tagged)) == "1.2.0"
    refusals = {
        "1.1.0": "not newer than the tree's version 1.1.0",
        "1.1.0-rc.1": "not newer than the tree's version",
        "1.2.0-rc.1": "not newer than the tag 1.2.0-rc.1",
        "1.2": "not a semantic version",
    }
    for candidate, reason in refusals.items():
        with pytest.raises(V.ReleaseError, match=re.escape(reason)):
            V.check_new_version(candidate, "1.1.0", released, tagged)
    with pytest.raises(V.ReleaseError, match=re.escape("not newer than the CHANGELOG's 1.1.0")):
        V.check_new_version("1.1.0", "1.0.0", released, [])


def test_stamping_the_repository_files_changes_their_version_lines_only() -> None:
    """The real version module and Chart.yaml: the stamp reads back, nothing else changes."""
    module = (REPO / V.VERSION_MODULE).read_text()
    stamped = V.stamp_module(module, "7.8.9-rc.1")
    assert V.module_version(stamped) == "7.8.9-rc.1"
    assert _other_lines(module, stamped) == 1

    chart = (REPO / V.CHART_FILE).read_text()
    stamped = V.stamp_chart(chart, "7.8.9-rc.1")
    assert V.chart_versions(stamped) == ("7.8.9-rc.1", "7.8.9-rc.1")
    as_helm_reads_it = yaml.safe_load(stamped)
    assert (as_helm_reads_it["version"], as_helm_reads_it["appVersion"]) == (
        "7.8.9-rc.1",
        "7.8.9-rc.1",
    )
    assert {k: v for k, v in as_helm_reads_it.items() if "ersion" not in k} == {
        k: v for k, v in yaml.safe_load(chart).items() if "ersion" not in k
    }
    assert _other_lines(chart, stamped) == 2


def _other_lines(before: str, after: str) -> int:
    """How many lines differ (the texts keep their line count)."""
    assert len(before.splitlines()) == len(after.splitlines())
    return sum(a != b for a, b in zip(before.splitlines(), after.splitlines(), strict=True))


def test_a_chart_without_exactly_one_app_version_is_refused() -> None:
    """A nested or repeated key would make the stamp ambiguous."""
    with pytest.raises(V.ReleaseError, match="exactly one top-level 'appVersion:'"):
        V.stamp_chart("version: 1.0.0\nname: x\n", "1.0.1")
    with pytest.raises(V.ReleaseError, match="exactly one top-level 'version:'"):
        V.chart_versions("version: 1\nversion: 2\nappVersion: '1'\n")


def test_the_changelog_cut_moves_the_unreleased_entries_under_the_release() -> None:
    """A fresh, empty Unreleased on top; the entries under ``## [v] - date``; history kept."""
    cut = V.cut_changelog(CHANGELOG, "1.2.0", "2026-12-07")
    head, history = cut.split("## [1.1.0] - 2026-01-02")
    assert head == (
        "# Changelog\n\n**Who this is for:** readers.\n\n"
        "## Unreleased\n\n"
        "## [1.2.0] - 2026-12-07\n\n"
        "### Added\n- A thing.\n\n### Fixed\n- Another thing.\n\n"
    )
    assert history == CHANGELOG.split("## [1.1.0] - 2026-01-02")[1]
    assert [str(v) for v in V.released_versions(cut)] == ["1.2.0", "1.1.0", "1.0.0"]


def test_the_real_changelog_cuts() -> None:
    """The repository's CHANGELOG has the shape the cut expects, if it has entries."""
    text = (REPO / "CHANGELOG.md").read_text()
    try:
        cut = V.cut_changelog(text, "999.0.0", "2026-12-07")
    except V.ReleaseError as refused:
        assert "no entry" in str(refused)
        return
    assert "## Unreleased\n\n## [999.0.0] - 2026-12-07\n\n" in cut
    assert cut.replace("## [999.0.0] - 2026-12-07\n\n", "", 1) == text


def test_a_changelog_without_entries_or_with_a_bad_date_is_refused() -> None:
    """Releasing nothing, or under a date that is not ISO, stops the release."""
    empty = "# Changelog\n\n## Unreleased\n\n### Added\n\n## [1.0.0] - 2026-01-01\n\n- x\n"
    with pytest.raises(V.ReleaseError, match="no entry"):
        V.cut_changelog(empty, "1.1.0", "2026-12-07")
    with pytest.raises(V.ReleaseError, match="'## Unreleased' section"):
        V.cut_changelog("# Changelog\n\n## [1.0.0]\n\n- x\n", "1.1.0", "2026-12-07")
    with pytest.raises(V.ReleaseError, match="YYYY-MM-DD"):
        V.cut_changelog(CHANGELOG, "1.2.0", "07.12.2026")


def test_an_unreleased_section_last_in_the_file_cuts() -> None:
    """No history below it: the release section ends the file."""
    cut = V.cut_changelog("# C\n\n## [Unreleased]\n- one\n", "0.1.0", "2026-12-07")
    assert cut == "# C\n\n## [Unreleased]\n\n## [0.1.0] - 2026-12-07\n\n- one\n"


def test_the_manifest_names_the_release_its_images_and_its_chart() -> None:
    """What ``dist/release-<version>.json`` holds."""
    manifest = V.release_manifest(
        version="1.2.0",
        revision="abc",
        date="2026-12-07",
        images={
            V.image_reference("1.2.0", "snapshotjob/operator"): "sha256:00",
            V.image_reference("1.2.0", "snapshotjob/member"): "sha256:11",
        },
        chart_archive=V.chart_archive_name("snapshotjob-operator", "1.2.0"),
        chart_sha256="ff",
        dry_run=False,
    )
    assert manifest == {
        "version": "1.2.0",
        "tag": "v1.2.0",
        "git_revision": "abc",
        "date": "2026-12-07",
        "dry_run": False,
        "images": [
            {"reference": "snapshotjob/operator:1.2.0", "id": "sha256:00"},
            {"reference": "snapshotjob/member:1.2.0", "id": "sha256:11"},
        ],
        "chart": {"archive": "snapshotjob-operator-1.2.0.tgz", "sha256": "ff"},
    }


def test_a_release_tags_the_three_product_images_of_images_env() -> None:
    """The operator, the Spark runtime and the member, under images.env's repositories; the
    test-only images there are not released."""
    text = (REPO / V.IMAGES_ENV).read_text(encoding="utf-8")
    released = V.released_repositories(text)
    assert released == {
        "operator": "snapshotjob/operator",
        "spark-runtime": "snapshotjob/spark-runtime",
        "member": "snapshotjob/member",
    }
    product = {t: n for t, n in images.split_images().items() if t not in images.TEST_ONLY}
    assert released == {target: name.rsplit(":", 1)[0] for target, name in product.items()}
    assert V.image_reference("1.2.0", released["member"]) == "snapshotjob/member:1.2.0"


def test_images_env_without_a_released_image_or_with_a_bad_line_is_refused() -> None:
    """A tag is dropped, a registry's port kept; a missing name or a non-assignment refuses."""
    text = (
        "# names\n\nOPERATOR_IMAGE=registry.local:5000/sj/operator:dev\n"
        "SPARK_RUNTIME_IMAGE=localhost:5000/sj/spark-runtime\nMEMBER_IMAGE=sj/member:1.0\n"
    )
    assert V.released_repositories(text) == {
        "operator": "registry.local:5000/sj/operator",
        "spark-runtime": "localhost:5000/sj/spark-runtime",
        "member": "sj/member",
    }
    with pytest.raises(V.ReleaseError, match=r"does not name MEMBER_IMAGE$"):
        V.released_repositories(text.replace("MEMBER_IMAGE", "# MEMBER_IMAGE"))
    with pytest.raises(V.ReleaseError, match=re.escape("images.env:6: not NAME=value")):
        V.released_repositories(text + "export X = y\n")
