"""The chart's example alerts, checked and unit-tested by a real promtool.

``test_chart.py`` checks that the rules name only metrics the programs serve; whether they
fire when they should is PromQL semantics: vector matching between the restore point's age,
its interval and the job's phase, the 120 s floor, the sum over restart reasons, a job's
series served by two operator replicas, ``for`` durations. Here the rules are rendered by
helm as users install them, ``promtool check rules`` parses them, and ``promtool test rules``
runs ``alert_rules_test.yaml`` against them: series for jobs whose snapshots stop (one of
them restarting all along, one suspended), restarts piling up or spread out, a store unsafe
for long or on and off, jobs that fail or start again, sources falling behind or catching up,
restore points outgrowing the store, each with the exact alerts (labels and rendered
annotations) expected at given times. Every rule is then broken on purpose, one way at a
time, and the same tests must fail: tests that pass whatever the rules say would prove
nothing.
"""

from __future__ import annotations

import copy
import re
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fixtures.kube import binary

pytestmark = [pytest.mark.helm, pytest.mark.prometheus]

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "charts" / "snapshotjob-operator"
UNIT_TESTS = Path(__file__).with_name("alert_rules_test.yaml")
RULES_FILE = "snapshotjob-rules.yaml"
"""The name ``alert_rules_test.yaml`` loads the rules from, next to itself."""


@pytest.fixture(scope="module")
def rendered() -> dict[str, Any]:
    """The PrometheusRule's ``spec`` (its rule groups) as helm renders it by default."""
    result = subprocess.run(
        [
            str(binary("helm")),
            "template",
            "sj",
            str(CHART),
            "--namespace",
            "snapshots",
            "--show-only",
            "templates/prometheusrule.yaml",
            "--set",
            "metrics.prometheusRule.enabled=true",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    rule = yaml.safe_load(result.stdout)
    assert rule["kind"] == "PrometheusRule"
    spec: dict[str, Any] = rule["spec"]
    return spec


def promtool(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    """Runs the built promtool."""
    return subprocess.run(
        [str(binary("promtool")), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=cwd,
    )


def unit_test(tmp_path: Path, spec: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    """``promtool test rules`` of ``alert_rules_test.yaml`` against the given rule groups."""
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump(spec, sort_keys=False))
    shutil.copy(UNIT_TESTS, tmp_path / UNIT_TESTS.name)
    return promtool("test", "rules", UNIT_TESTS.name, cwd=tmp_path)


@pytest.fixture
def spec(rendered: dict[str, Any]) -> dict[str, Any]:
    """A copy of the rendered rule groups, for one test to change."""
    return copy.deepcopy(rendered)


def test_promtool_accepts_the_rendered_rules(tmp_path: Path, spec: dict[str, Any]) -> None:
    (tmp_path / RULES_FILE).write_text(yaml.safe_dump(spec, sort_keys=False))
    checked = promtool("check", "rules", RULES_FILE, cwd=tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "SUCCESS: 6 rules found" in checked.stdout, checked.stdout


def test_each_alert_fires_when_it_should_and_not_otherwise(
    tmp_path: Path, spec: dict[str, Any]
) -> None:
    result = unit_test(tmp_path, spec)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout, result.stdout


def _rule(spec: dict[str, Any], alert: str) -> dict[str, Any]:
    rules: list[dict[str, Any]] = [r for g in spec["groups"] for r in g["rules"]]
    (rule,) = [r for r in rules if r.get("alert") == alert]
    return rule


Breakage = Callable[[dict[str, Any]], object]
"""Changes a rendered rule in place."""

INTERVALS = (
    "clamp_min(5 * max by (namespace, snapshotjob) "
    "(snapshotjob_operator_job_snapshot_interval_seconds), 120)"
)
"""The rendered threshold of SnapshotJobSnapshotTooOld: 5 intervals, at least 120 s."""
FILLING_UP = "sum(max by (namespace, snapshotjob) (snapshotjob_operator_job_snapshot_size_bytes))"

BREAKAGES: dict[str, tuple[str, Breakage]] = {
    # Without the floor a 10 s interval job alerts after 50 s.
    "no min-seconds floor": (
        "SnapshotJobSnapshotTooOld",
        lambda r: r.update(expr=r["expr"].replace("clamp_min(", "(").replace(", 120)", ")")),
    ),
    # Only the floor: a 60 s interval job alerts after 120 s instead of 300 s.
    "the floor without the intervals": (
        "SnapshotJobSnapshotTooOld",
        lambda r: r.update(expr=r["expr"].replace(INTERVALS, "120")),
    ),
    # A suspended job's restore point ages with no snapshot due.
    "every phase counted": (
        "SnapshotJobSnapshotTooOld",
        lambda r: r.update(expr=re.split(r"\s+and\s+on\b", r["expr"])[0]),
    ),
    # The job restarting all along is left out when only RUNNING counts.
    "only running jobs counted": (
        "SnapshotJobSnapshotTooOld",
        lambda r: r.update(expr=re.sub(r'phase=~"[^"]*"', 'phase="RUNNING"', r["expr"])),
    ),
    "no pending minute": ("SnapshotJobSnapshotTooOld", lambda r: r.pop("for")),
    "failed taken for running": (
        "SnapshotJobFailed",
        lambda r: r.update(expr=r["expr"].replace('phase="FAILED"', 'phase="RUNNING"')),
    ),
    # Per operator replica: the phase and pod labels, and two alerts after a failover.
    "failed jobs by series": (
        "SnapshotJobFailed",
        lambda r: r.update(expr=r["expr"].replace("max by (namespace, snapshotjob) ", "")),
    ),
    "behind at any moment": ("SnapshotJobSourceFallingBehind", lambda r: r.pop("for")),
    # A backlog being worked off is not falling behind.
    "catching up counted": (
        "SnapshotJobSourceFallingBehind",
        lambda r: r.update(expr=re.split(r"\s+and\s+", r["expr"])[0]),
    ),
    "any lag counted": (
        "SnapshotJobSourceFallingBehind",
        lambda r: r.update(expr=r["expr"].replace("> 100000", "> 0")),
    ),
    # Both operator replicas' series of one job, summed.
    "replicas counted twice": (
        "SnapshotJobStoreFillingUp",
        lambda r: r.update(
            expr=r["expr"].replace(FILLING_UP, "sum(snapshotjob_operator_job_snapshot_size_bytes)")
        ),
    ),
    "filling up for a minute": ("SnapshotJobStoreFillingUp", lambda r: r.update({"for": "1m"})),
    # By reason, 3 and 3 restarts are never more than 3.
    "restarts by reason": (
        "SnapshotJobRestartLoop",
        lambda r: r.update(expr=r["expr"].replace("sum without (reason) ", "")),
    ),
    "restarts over an hour": (
        "SnapshotJobRestartLoop",
        lambda r: r.update(expr=r["expr"].replace("[15m]", "[1h]")),
    ),
    "unsafe for 1 minute": ("SnapshotJobStoreNotClusterSafe", lambda r: r.update({"for": "1m"})),
    "safe taken for unsafe": (
        "SnapshotJobStoreNotClusterSafe",
        lambda r: r.update(expr=r["expr"].replace("== 0", "== 1")),
    ),
}


@pytest.mark.parametrize("breakage", sorted(BREAKAGES))
def test_the_unit_tests_fail_on_a_broken_rule(
    tmp_path: Path, spec: dict[str, Any], breakage: str
) -> None:
    alert, change = BREAKAGES[breakage]
    rule = _rule(spec, alert)
    before = dict(rule)
    change(rule)
    assert rule != before, f"the breakage {breakage!r} changed nothing: the rule was rewritten"
    result = unit_test(tmp_path, spec)
    assert result.returncode != 0, f"{breakage}: the unit tests passed:\n{result.stdout}"
    assert f"alertname: {alert}" in result.stdout + result.stderr, result.stdout + result.stderr
