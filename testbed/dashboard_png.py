"""Draws a dashboard's query results as one PNG, the panels where Grafana puts them.

Why: no Grafana is reachable from this project's package registries, yet what a dashboard is
worth shows only drawn: a panel empty for lack of a label, a legend that names nothing, a
quantile that is NaN between events, a byte count drawn on the same axis as a chunk count.
This draws what :func:`testbed.dashboard.run` returned with matplotlib (the Agg backend, no
display): the 24-column grid of the panels' ``gridPos``, row titles, time series as lines
(stacked, stepped, on a right axis or bounded where the panel's ``fieldConfig`` says so) with
legends named by the targets' legend formats, and stat panels as their reduced numbers, with
Grafana's units (seconds, bytes, counts, rates).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.ticker import FuncFormatter, MaxNLocator

from testbed.dashboard import Dashboard, Panel, PanelResult, TimeWindow
from testbed.prometheus import Series

COLUMNS = 24
UNIT_W = 0.75
"""Inches per grid column: 24 columns make an 18-inch wide image."""
UNIT_H = 0.36
"""Inches per grid row: Grafana's 30-pixel rows (plus margin) against its 80-pixel columns."""
HEADER = 0.9
"""Inches above the grid for the dashboard's title, time range and variables."""
PAD = 0.06
DPI = 72
PALETTE = ("#7eb26d", "#eab839", "#6ed0e0", "#ef843c", "#e24d42", "#1f78c1", "#ba43a9", "#705da0")
"""Grafana's classic series colours."""
MAX_LEGEND = 12

_SI = ((1e12, " T"), (1e9, " Bil"), (1e6, " Mil"), (1e3, " K"))
_IEC = ((2.0**40, " TiB"), (2.0**30, " GiB"), (2.0**20, " MiB"), (2.0**10, " KiB"))
_RATES = {"ops": " ops/s", "reqps": " req/s", "rowsps": " rows/s", "cps": " c/s"}


def _short(value: float) -> str:
    for scale, suffix in _SI:
        if abs(value) >= scale:
            return f"{value / scale:.3g}{suffix}"
    return f"{value:.3g}"


def format_value(value: float, unit: str) -> str:
    """A value in Grafana's unit, e.g. ``412 ms``, ``1.5 MiB``, ``3.2 K``, ``25 rows/s``."""
    if math.isnan(value):
        return "NaN"
    if unit == "s":
        magnitude = abs(value)
        if value == 0 or 1 <= magnitude < 60:
            return f"{value:.3g} s"
        if magnitude < 1e-3:
            return f"{value * 1e6:.3g} µs"
        if magnitude < 1:
            return f"{value * 1e3:.3g} ms"
        return f"{value / 60:.3g} min" if magnitude < 3600 else f"{value / 3600:.3g} hour"
    if unit == "bytes":
        for scale, suffix in _IEC:
            if abs(value) >= scale:
                return f"{value / scale:.3g}{suffix}"
        return f"{value:.4g} B"
    if unit in _RATES:
        return _short(value) + _RATES[unit]
    if unit == "percent":
        return f"{value:.3g}%"
    if unit in ("", "short", "none"):
        return _short(value)
    return f"{_short(value)} {unit}"


def _to_datetime(seconds: float) -> datetime:
    return datetime.fromtimestamp(seconds, tz=UTC)


def _on_grid(series: Series, start: float, end: float, step: float) -> list[float]:
    """The series' values on every step of the window, NaN where it has no point (a gap)."""
    by_time = {
        round((t - start) / step): v for t, v in zip(series.times, series.values, strict=True)
    }
    count = round((end - start) / step) + 1
    return [by_time.get(i, math.nan) for i in range(count)]


def _reduce(series: Series, calc: str) -> float:
    values = series.finite()
    if not values:
        return math.nan
    if calc == "max":
        return max(values)
    if calc == "min":
        return min(values)
    if calc == "sum":
        return sum(values)
    if calc == "mean":
        return sum(values) / len(values)
    return values[-1]  # lastNotNull, Grafana's default, and what this does not know


class _Layout:
    """Grid units to figure fractions."""

    def __init__(self, rows: int) -> None:
        self.width = COLUMNS * UNIT_W
        self.height = HEADER + rows * UNIT_H

    def box(self, panel: Panel) -> tuple[float, float, float, float]:
        """The panel's ``(left, bottom, width, height)`` in inches."""
        grid = panel.grid
        left = grid.x * UNIT_W + PAD
        top = self.height - HEADER - grid.y * UNIT_H - PAD
        height = grid.h * UNIT_H - 2 * PAD
        return left, top - height, grid.w * UNIT_W - 2 * PAD, height

    def fraction(
        self, left: float, bottom: float, width: float, height: float
    ) -> tuple[float, float, float, float]:
        return left / self.width, bottom / self.height, width / self.width, height / self.height


def _frame(figure: Figure, layout: _Layout, panel: Panel, title: str) -> None:
    left, bottom, width, height = layout.box(panel)
    figure.add_artist(
        Rectangle(
            (left / layout.width, bottom / layout.height),
            width / layout.width,
            height / layout.height,
            transform=figure.transFigure,
            facecolor="#ffffff",
            edgecolor="#c7d0d9",
            linewidth=1,
            zorder=0,
        )
    )
    figure.text(
        (left + 0.1) / layout.width,
        (bottom + height - 0.08) / layout.height,
        title,
        va="top",
        fontsize=10,
        fontweight="bold",
        color="#202226",
    )


def _timeseries(figure: Figure, layout: _Layout, result: PanelResult, window: TimeWindow) -> None:
    panel = result.panel
    left, bottom, width, height = layout.box(panel)
    named = [(name, r.target.ref_id, s) for r in result.results for name, s in r.named()]
    per_row = max(1, int(width / 2.6))
    shown = named[:MAX_LEGEND]
    legend_rows = math.ceil(len(shown) / per_row) if shown else 0
    legend_h = 0.17 * legend_rows + (0.05 if shown else 0)
    right = any(panel.right_axis(r.target.ref_id) for r in result.results)
    axes = figure.add_axes(
        layout.fraction(
            left + 0.72,
            bottom + 0.28 + legend_h,
            width - 0.85 - (0.65 if right else 0),
            height - 0.62 - legend_h,
        )
    )
    second = axes.twinx() if right else None
    start, end = window.aligned
    times = [start + i * window.step for i in range(round((end - start) / window.step) + 1)]
    custom = panel.field_config.get("defaults", {}).get("custom", {})
    stacked = custom.get("stacking", {}).get("mode") == "normal"
    stepped = custom.get("lineInterpolation") == "stepAfter"
    opacity = float(custom.get("fillOpacity", 0)) / 100
    base = [0.0] * len(times)
    handles = []
    for index, (name, ref_id, series) in enumerate(named):
        color = PALETTE[index % len(PALETTE)]
        target_axes = second if second is not None and panel.right_axis(ref_id) else axes
        values = _on_grid(series, start, end, window.step)
        if stacked:
            top = [b + (0.0 if math.isnan(v) else v) for b, v in zip(base, values, strict=True)]
            target_axes.fill_between(times, base, top, color=color, alpha=opacity, linewidth=0)
            values, base = top, top
        elif opacity:
            target_axes.fill_between(times, 0, values, color=color, alpha=opacity, linewidth=0)
        (line,) = target_axes.plot(
            times,
            values,
            color=color,
            linewidth=1.4,
            drawstyle="steps-post" if stepped else "default",
            label=name,
        )
        handles.append(line)
    defaults = panel.field_config.get("defaults", {})
    _style_axes(axes, panel.unit(), defaults.get("min"), defaults.get("max"))
    if second is not None:
        ref = next(r.target.ref_id for r in result.results if panel.right_axis(r.target.ref_id))
        _style_axes(second, panel.unit(ref), None, None)
    axes.set_xlim(times[0], times[-1])
    axes.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{_to_datetime(v):%H:%M:%S}"))
    axes.xaxis.set_major_locator(MaxNLocator(max(2, int(width / 1.6))))
    axes.tick_params(axis="x", labelsize=7)
    if not named:
        axes.text(0.5, 0.5, "No data", ha="center", va="center", transform=axes.transAxes)
    if shown:
        labels = [name for name, _, _ in shown]
        if len(named) > len(shown):
            labels[-1] += f"  (+{len(named) - len(shown)} more)"
        figure.legend(
            handles[: len(shown)],
            labels,
            loc="upper left",
            bbox_to_anchor=(
                (left + 0.1) / layout.width,
                (bottom + 0.05 + legend_h) / layout.height,
            ),
            ncol=per_row,
            fontsize=7,
            frameon=False,
            handlelength=1.2,
            columnspacing=1.0,
            borderaxespad=0,
        )
    _errors(figure, layout, result)


def _style_axes(axes: Axes, unit: str, low: object, high: object) -> None:
    """Units on the y axis, Grafana's grid; the panel's min and max, else 0 at the bottom
    when nothing is negative (so 3 members read as 3, not as a line in the middle)."""
    axes.yaxis.set_major_formatter(FuncFormatter(lambda v, _: format_value(float(v), unit)))
    axes.yaxis.set_major_locator(MaxNLocator(5, steps=[1, 2, 2.5, 5, 10]))
    axes.tick_params(axis="y", labelsize=7)
    axes.grid(True, color="#e4e7eb", linewidth=0.6)
    for side in ("top", "right"):
        axes.spines[side].set_visible(False)
    data_low, data_high = axes.dataLim.y0, axes.dataLim.y1
    if axes.has_data() and math.isfinite(data_low) and math.isfinite(data_high):
        if not isinstance(low, int | float) and data_low >= 0:
            low = 0
            if not isinstance(high, int | float) and data_high > 0:
                high = data_high * 1.08
        if not isinstance(high, int | float) and data_high <= 0 and low == 0:
            high = 1
    current_low, current_high = axes.get_ylim()
    axes.set_ylim(
        float(low) if isinstance(low, int | float) else current_low,
        float(high) if isinstance(high, int | float) else current_high,
    )


def _stat(figure: Figure, layout: _Layout, result: PanelResult) -> None:
    panel = result.panel
    left, bottom, width, height = layout.box(panel)
    calcs = panel.options.get("reduceOptions", {}).get("calcs", ["lastNotNull"])
    named = [(name, r.target.ref_id, s) for r in result.results for name, s in r.named()]
    if not named:
        figure.text(
            (left + width / 2) / layout.width,
            (bottom + height / 2) / layout.height,
            "No data",
            ha="center",
            va="center",
            fontsize=12,
        )
    columns = min(len(named), 4) or 1
    rows = math.ceil(len(named) / columns) or 1
    cell_w, cell_h = (width - 0.2) / columns, (height - 0.45) / rows
    size = max(10.0, min(30.0, cell_h * 30, cell_w * 14))
    for index, (name, ref_id, series) in enumerate(named):
        column, row = index % columns, index // columns
        x = left + 0.1 + column * cell_w
        y = bottom + 0.1 + (rows - 1 - row) * cell_h
        color = PALETTE[index % len(PALETTE)]
        if panel.options.get("graphMode", "area") == "area" and len(series.finite()) > 1:
            spark = figure.add_axes(layout.fraction(x, y, cell_w - 0.1, cell_h * 0.45))
            spark.fill_between(series.times, series.values, color=color, alpha=0.2)
            spark.set_axis_off()
        figure.text(
            (x + cell_w / 2) / layout.width,
            (y + cell_h * 0.55) / layout.height,
            format_value(_reduce(series, str(calcs[0])), panel.unit(ref_id)),
            ha="center",
            va="center",
            fontsize=size,
            fontweight="bold",
            color=color,
        )
        figure.text(
            (x + cell_w / 2) / layout.width,
            (y + cell_h * 0.18) / layout.height,
            name,
            ha="center",
            va="center",
            fontsize=8,
            color="#464c54",
        )
    _errors(figure, layout, result)


def _errors(figure: Figure, layout: _Layout, result: PanelResult) -> None:
    """A refused query is shown in red in its panel, as Grafana's error corner does."""
    errors = result.errors()
    if errors:
        left, bottom, _, height = layout.box(result.panel)
        figure.text(
            (left + 0.1) / layout.width,
            (bottom + height - 0.35) / layout.height,
            "\n".join(e[:160] for e in errors),
            va="top",
            fontsize=7,
            color="#e02f44",
            wrap=True,
        )


def _row(figure: Figure, layout: _Layout, panel: Panel, title: str) -> None:
    left, bottom, width, height = layout.box(panel)
    y = (bottom + height / 2) / layout.height
    figure.text(left / layout.width, y, title, va="center", fontsize=13, fontweight="bold")
    figure.add_artist(
        Line2D(
            [left / layout.width, (left + width) / layout.width],
            [bottom / layout.height] * 2,
            transform=figure.transFigure,
            color="#c7d0d9",
            linewidth=1,
        )
    )


def draw(
    dashboard: Dashboard,
    results: Sequence[PanelResult],
    window: TimeWindow,
    path: Path,
    *,
    titles: Sequence[str] | None = None,
    subtitle: str = "",
) -> Path:
    """Draw the dashboard's panels and what their queries returned into one PNG.

    Args:
        dashboard: The dashboard (its title).
        results: What :func:`testbed.dashboard.run` returned for it.
        window: The time range the queries covered.
        path: Where to write the PNG.
        titles: The panels' titles as shown (variables substituted); the panels' own by
            default.
        subtitle: A line under the title, e.g. the variables' values and the data source.

    Returns:
        The path written.
    """
    rows = max((r.panel.grid.y + r.panel.grid.h for r in results), default=1)
    layout = _Layout(rows)
    figure = Figure(figsize=(layout.width, layout.height), dpi=DPI, facecolor="#f4f5f5")
    FigureCanvasAgg(figure)
    start, end = window.start, window.end
    span = (
        f"{_to_datetime(start):%Y-%m-%d %H:%M:%S} to {_to_datetime(end):%H:%M:%S} UTC "
        f"({end - start:.0f} s, step {window.step:g} s, $__rate_interval "
        f"{window.rate_interval:g} s)"
    )
    figure.text(
        PAD / layout.width,
        1 - 0.12 / layout.height,
        dashboard.title,
        va="top",
        fontsize=18,
        fontweight="bold",
    )
    figure.text(PAD / layout.width, 1 - 0.5 / layout.height, span, va="top", fontsize=9)
    if subtitle:
        figure.text(0.5, 1 - 0.5 / layout.height, subtitle, va="top", fontsize=9)
    shown = titles or [r.panel.title for r in results]
    for result, title in zip(results, shown, strict=True):
        if result.panel.type == "row":
            _row(figure, layout, result.panel, title)
            continue
        _frame(figure, layout, result.panel, title)
        if result.panel.type == "stat":
            _stat(figure, layout, result)
        else:
            _timeseries(figure, layout, result, window)
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=DPI, facecolor=figure.get_facecolor())
    return path
