"""The dashboard's queries are sent as Grafana sends them, and values are shown in its units.

``tests/integration/test_dashboard.py`` runs the chart's dashboard against a real Prometheus;
what it runs is decided here, without one: Grafana's variables and intervals
(:func:`testbed.dashboard.substitute`), legends, the panels' units and overrides, and the
unit formatting of the drawing (:func:`testbed.dashboard_png.format_value`).
"""

from __future__ import annotations

import re

import pytest

from testbed import dashboard
from testbed.dashboard import Dashboard, TimeWindow
from testbed.dashboard_png import format_value

pytestmark = pytest.mark.unit

BOARD = Dashboard.load()
MINUTE = TimeWindow(start=1000.0, end=1060.0, scrape_interval=1.0)
THREE_HOURS = TimeWindow(start=0.0, end=10800.0, scrape_interval=30.0)


def test_grafanas_intervals_follow_the_range_and_the_scrape_interval() -> None:
    assert (MINUTE.step, MINUTE.rate_interval) == (1.0, 4.0)
    # 10800 s over 240 points is 45 s a step; $__rate_interval is at least 4 scrapes.
    assert (THREE_HOURS.step, THREE_HOURS.rate_interval) == (45.0, 120.0)
    assert THREE_HOURS.aligned == (0.0, 10800.0)
    assert TimeWindow(1001.5, 1100.7, 1.0).aligned == (1001.0, 1100.0)


def test_all_is_the_variables_all_value_and_intervals_are_durations() -> None:
    expr = 'sum(rate(x{namespace=~"$namespace", snapshotjob=~"${snapshotjob}"}[$__rate_interval]))'
    assert dashboard.substitute(expr, BOARD, MINUTE) == (
        'sum(rate(x{namespace=~".*", snapshotjob=~".*"}[4s]))'
    )
    ranged = dashboard.substitute("increase(x[$__range]) / $__interval_ms", BOARD, THREE_HOURS)
    assert ranged == "increase(x[10800s]) / 45000"


def test_chosen_values_are_escaped_and_several_are_alternatives() -> None:
    one = dashboard.substitute(
        'x{snapshotjob=~"$snapshotjob"}', BOARD, MINUTE, {"snapshotjob": ["a.b"]}
    )
    assert one == r'x{snapshotjob=~"a\.b"}'
    both = dashboard.substitute(
        'x{namespace=~"$namespace"}', BOARD, MINUTE, {"namespace": ["shop", "ops"]}
    )
    assert both == 'x{namespace=~"(shop|ops)"}'


def test_an_unknown_variable_is_refused() -> None:
    with pytest.raises(ValueError, match="name=cluster"):
        dashboard.substitute('x{cluster=~"$cluster"}', BOARD, MINUTE)


def test_every_target_of_the_chart_leaves_no_variable_behind() -> None:
    targets = [t for panel in BOARD.panels for t in panel.targets]
    assert len(targets) >= 20
    for target in targets:
        sent = dashboard.substitute(target.expr, BOARD, MINUTE, {"namespace": ["shop"]})
        assert not re.search(r"\$\w|\[\[", sent), sent


def test_legends_name_series_by_their_labels() -> None:
    assert dashboard.legend("p50 {{namespace}}/{{ snapshotjob }}", {"namespace": "a"}) == "p50 a/"
    assert dashboard.legend("", {"__name__": "up", "job": "x"}) == 'up{job="x"}'
    assert dashboard.legend("", {}) == "{}"


def test_panels_carry_their_units_overrides_and_shown_titles() -> None:
    panels = {panel.title: panel for panel in BOARD.panels}
    sizes = panels["Snapshot size and chunks"]
    assert (sizes.unit("A"), sizes.unit("B")) == ("bytes", "short")
    assert sizes.right_axis("B") and not sizes.right_axis("A")
    row = next(p for p in BOARD.panels if p.type == "row" and "$snapshotjob" in p.title)
    shown = dashboard.shown_title(row, BOARD, {"snapshotjob": ["a", "b"]})
    assert shown.endswith("(All / a + b)"), shown


@pytest.mark.parametrize(
    ("value", "unit", "shown"),
    [
        (0.412, "s", "412 ms"),
        (2.5, "s", "2.5 s"),
        (150, "s", "2.5 min"),
        (0, "s", "0 s"),
        (1.5 * 2**20, "bytes", "1.5 MiB"),
        (512, "bytes", "512 B"),
        (1000, "bytes", "1000 B"),
        (25, "rowsps", "25 rows/s"),
        (3200, "short", "3.2 K"),
        (0.5, "ops", "0.5 ops/s"),
        (7, "widgets", "7 widgets"),
        (float("nan"), "s", "NaN"),
    ],
)
def test_values_are_shown_in_grafanas_units(value: float, unit: str, shown: str) -> None:
    assert format_value(value, unit) == shown
