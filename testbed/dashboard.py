"""The chart's Grafana dashboard, run against a real Prometheus the way Grafana runs it.

Why: the dashboard (``charts/snapshotjob-operator/dashboards/snapshotjob.json``) is PromQL with
Grafana's variables in it, and no Grafana is reachable from this project's package registries.
This module does the part of Grafana that decides what a panel shows: it substitutes the
template variables (``$namespace``, ``$snapshotjob``) and the built-in intervals
(``$__rate_interval``, ``$__interval``, ``$__range``) as Grafana does, runs every target as a
``query_range`` over the panel's time range, and names each series with the target's legend
format. :mod:`testbed.dashboard_png` draws the result; ``hack/render_dashboard.py`` and
``tests/integration/test_dashboard.py`` use both.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from testbed.prometheus import PrometheusAPI, PrometheusQueryError, Series

REPO = Path(__file__).resolve().parents[1]
DASHBOARD = REPO / "charts" / "snapshotjob-operator" / "dashboards" / "snapshotjob.json"
"""The dashboard the chart ships (``templates/dashboard.yaml`` puts it in a ConfigMap)."""

MAX_POINTS = 240
"""Points per series at most, as Grafana asks for about one per pixel of a panel's width."""


@dataclass(frozen=True)
class GridPos:
    """Where a panel sits in Grafana's grid: 24 columns, rows of one unit each."""

    x: int
    y: int
    w: int
    h: int


@dataclass(frozen=True)
class Target:
    """One query of a panel.

    Attributes:
        ref_id: Grafana's name of the query in its panel (``A``, ``B``, ...).
        expr: The PromQL, with the dashboard's variables in it.
        legend_format: How a series is named: ``{{label}}`` is replaced by the label's value.
    """

    ref_id: str
    expr: str
    legend_format: str


@dataclass(frozen=True)
class Panel:
    """A panel of the dashboard: a row title, a time series graph or a stat.

    Attributes:
        title: The title, variables not substituted.
        type: Grafana's panel type (``row``, ``timeseries``, ``stat``, ...).
        grid: Its place in the grid.
        targets: Its queries.
        field_config: Grafana's ``fieldConfig`` (unit, min and max, overrides by query).
        options: Grafana's panel ``options`` (legend, the stat's reduction).
    """

    title: str
    type: str
    grid: GridPos
    targets: tuple[Target, ...] = ()
    field_config: Mapping[str, Any] = field(default_factory=dict)
    options: Mapping[str, Any] = field(default_factory=dict)

    def unit(self, ref_id: str = "") -> str:
        """The unit of a query's values: the panel's, or an override for that query."""
        unit = str(self.field_config.get("defaults", {}).get("unit", ""))
        for prop in self._overrides(ref_id):
            if prop["id"] == "unit":
                unit = str(prop["value"])
        return unit

    def right_axis(self, ref_id: str) -> bool:
        """Whether an override puts the query's series on an axis of their own, at the right."""
        return any(
            prop["id"] == "custom.axisPlacement" and prop["value"] == "right"
            for prop in self._overrides(ref_id)
        )

    def _overrides(self, ref_id: str) -> list[dict[str, Any]]:
        props: list[dict[str, Any]] = []
        for override in self.field_config.get("overrides", []):
            matcher = override.get("matcher", {})
            if matcher.get("id") == "byFrameRefID" and matcher.get("options") == ref_id:
                props += override.get("properties", [])
        return props


@dataclass(frozen=True)
class Dashboard:
    """A Grafana dashboard's title, template variables and panels (rows' panels flattened)."""

    title: str
    variables: tuple[Mapping[str, Any], ...]
    panels: tuple[Panel, ...]

    @classmethod
    def load(cls, path: Path = DASHBOARD) -> Dashboard:
        """Read a dashboard's JSON model."""
        model = json.loads(path.read_text())
        panels: list[Panel] = []
        for raw in model["panels"]:
            panels.append(_panel(raw))
            # A collapsed row keeps its panels inside it.
            panels += [_panel(inner) for inner in raw.get("panels", [])]
        return cls(
            title=str(model.get("title", path.stem)),
            variables=tuple(model.get("templating", {}).get("list", [])),
            panels=tuple(panels),
        )


def _panel(raw: Mapping[str, Any]) -> Panel:
    grid = raw["gridPos"]
    return Panel(
        title=str(raw.get("title", "")),
        type=str(raw["type"]),
        grid=GridPos(int(grid["x"]), int(grid["y"]), int(grid["w"]), int(grid["h"])),
        targets=tuple(
            Target(str(t.get("refId", "")), str(t["expr"]), str(t.get("legendFormat", "")))
            for t in raw.get("targets", [])
            if not t.get("hide")
        ),
        field_config=raw.get("fieldConfig", {}),
        options=raw.get("options", {}),
    )


@dataclass(frozen=True)
class TimeWindow:
    """A dashboard's time range and the intervals Grafana derives from it.

    Attributes:
        start: Unix time of the range's start.
        end: Unix time of its end.
        scrape_interval: The data source's scrape interval in seconds (Grafana's "scrape
            interval" setting of the Prometheus data source): no step is shorter.
        max_points: Points per series at most (Grafana: about the panel's width in pixels).
    """

    start: float
    end: float
    scrape_interval: float
    max_points: int = MAX_POINTS

    @property
    def step(self) -> float:
        """``$__interval``: the range over :attr:`max_points`, whole seconds, at least a scrape."""
        return max(
            self.scrape_interval, float(math.ceil((self.end - self.start) / self.max_points))
        )

    @property
    def rate_interval(self) -> float:
        """``$__rate_interval``, Grafana's rule: ``max($__interval + scrape, 4 * scrape)``."""
        return max(self.step + self.scrape_interval, 4 * self.scrape_interval)

    @property
    def aligned(self) -> tuple[float, float]:
        """Start and end rounded down to the step, as Grafana aligns a range query's points
        (its ``alignRange``), so the points fall on multiples of the step."""
        step = self.step
        return math.floor(self.start / step) * step, math.floor(self.end / step) * step


def _duration(seconds: float) -> str:
    """A PromQL duration in whole milliseconds, e.g. ``4s`` or ``1500ms``."""
    millis = round(seconds * 1000)
    return f"{millis // 1000}s" if millis % 1000 == 0 else f"{millis}ms"


def _regex_value(values: Sequence[str] | None, all_value: str) -> str:
    """A variable's value in a regex matcher: All, one escaped value, or ``(a|b)``."""
    if values is None:
        return all_value
    escaped = [re.sub(r"([\\^$.|?*+()\[\]{}])", r"\\\1", v) for v in values]
    return escaped[0] if len(escaped) == 1 else "(" + "|".join(escaped) + ")"


_BUILTIN = re.compile(r"\$__(rate_interval|interval_ms|interval|range_ms|range_s|range)\b")
_VARIABLE = re.compile(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)|\[\[(\w+)\]\]")


def substitute(
    expr: str,
    dashboard: Dashboard,
    window: TimeWindow,
    selections: Mapping[str, Sequence[str] | None] | None = None,
) -> str:
    """A target's PromQL as Grafana sends it: variables and built-in intervals replaced.

    Args:
        expr: The target's expression.
        dashboard: The dashboard whose template variables it may use.
        window: The time range (for the built-in intervals).
        selections: Values chosen per variable; a variable not given (or ``None``) is "All",
            which becomes the variable's ``allValue`` (``.*`` here).

    Returns:
        The expression to run.

    Raises:
        ValueError: If the expression names a variable the dashboard does not define.
    """
    chosen = selections or {}
    builtins = {
        "rate_interval": _duration(window.rate_interval),
        "interval": _duration(window.step),
        "interval_ms": str(round(window.step * 1000)),
        "range": _duration(window.end - window.start),
        "range_s": str(round(window.end - window.start)),
        "range_ms": str(round((window.end - window.start) * 1000)),
    }
    expr = _BUILTIN.sub(lambda m: builtins[m.group(1)], expr)
    known = {str(v["name"]): v for v in dashboard.variables}

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in known:
            raise ValueError(f"Unknown dashboard variable name={name} expr={expr}")
        return _regex_value(chosen.get(name), str(known[name].get("allValue") or ".*"))

    return _VARIABLE.sub(value, expr)


def legend(legend_format: str, labels: Mapping[str, str]) -> str:
    """A series' name in the legend: the format's ``{{label}}`` replaced, as Grafana does.

    Without a format Grafana shows the series' labels, ``name{label="value", ...}``.
    """
    if legend_format and legend_format != "__auto":
        return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), legend_format)
    name = labels.get("__name__", "")
    rest = ", ".join(f'{k}="{v}"' for k, v in sorted(labels.items()) if k != "__name__")
    return f"{name}{{{rest}}}" if rest or not name else name


@dataclass(frozen=True)
class TargetResult:
    """What one target returned.

    Attributes:
        target: The target.
        expr: The expression run (variables substituted).
        series: The series returned; empty on an error.
        error: Prometheus' error, or ``None`` when the query was valid.
    """

    target: Target
    expr: str
    series: tuple[Series, ...]
    error: str | None

    def named(self) -> list[tuple[str, Series]]:
        """The series with their legend names."""
        return [(legend(self.target.legend_format, s.labels), s) for s in self.series]


@dataclass(frozen=True)
class PanelResult:
    """A panel and what each of its targets returned."""

    panel: Panel
    results: tuple[TargetResult, ...]

    def errors(self) -> list[str]:
        """The targets' errors, each with its expression."""
        return [f"{r.error} in {r.expr}" for r in self.results if r.error]


def run(
    api: PrometheusAPI,
    dashboard: Dashboard,
    window: TimeWindow,
    selections: Mapping[str, Sequence[str] | None] | None = None,
) -> list[PanelResult]:
    """Run every panel's targets as range queries over the window.

    A refused query does not stop the others: its error is kept in its result, so a caller
    sees every broken target at once.

    Returns:
        One result per panel, rows included (without targets), in the dashboard's order.
    """
    start, end = window.aligned
    results = []
    for panel in dashboard.panels:
        done = []
        for target in panel.targets:
            expr = substitute(target.expr, dashboard, window, selections)
            try:
                series = api.query_range(expr, start, end, window.step)
            except PrometheusQueryError as exc:
                done.append(TargetResult(target, expr, (), str(exc)))
            else:
                done.append(TargetResult(target, expr, tuple(series), None))
        results.append(PanelResult(panel, tuple(done)))
    return results


def selection_text(
    dashboard: Dashboard, selections: Mapping[str, Sequence[str] | None] | None = None
) -> str:
    """The variables as Grafana's header shows them, e.g. ``namespace: All  snapshotjob: a``."""
    chosen = selections or {}
    shown = []
    for variable in dashboard.variables:
        if variable.get("type") == "datasource":
            continue
        values = chosen.get(str(variable["name"]))
        label = variable.get("label") or variable["name"]
        shown.append(f"{label}: {'All' if values is None else ' + '.join(values)}")
    return "   ".join(shown)


def shown_title(
    panel: Panel,
    dashboard: Dashboard,
    selections: Mapping[str, Sequence[str] | None] | None = None,
) -> str:
    """A panel's title as Grafana shows it: a variable is its values, or ``All``."""
    chosen = selections or {}
    known = {str(v["name"]) for v in dashboard.variables}

    def value(match: re.Match[str]) -> str:
        name = next(g for g in match.groups() if g)
        if name not in known:
            return match.group(0)
        values = chosen.get(name)
        return "All" if values is None else " + ".join(values)

    return _VARIABLE.sub(value, panel.title)
