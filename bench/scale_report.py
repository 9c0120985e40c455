"""The scale curve's report: the table, the fitted growth, the headline point and the plot.

``bench.scale_curve`` measures the points; this turns its results into what it prints and
draws, so the measuring does not carry the presentation. matplotlib is imported only to plot.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.memory_watch import Peaks
from bench.scale_grid import MIB, bytes_and_keys_fit, linear_fit, local_slopes, loglog_slope

if TYPE_CHECKING:
    from bench.scale_curve import Result

RATIO_MIB = 1024
"""Where ``runtime_snapshot_ratio`` and ``runtime_restore_ratio`` are taken (issue 18, item 1)."""

TABLE_HEADER = (
    f"{'point':>11} {'keys':>11} {'MiB':>8} {'build s':>8} {'snap s':>8} {'rest s':>8} "
    f"{'snap MB/s':>9} {'rest MB/s':>9} {'raw put':>8} {'raw get':>8} {'snap/raw':>8} "
    f"{'rest/raw':>8} {'JVM MiB':>8} {'wrk MiB':>8} {'member':>7}"
)


def table_row(result: Result) -> str:
    """One line of the printed table (``raw put``/``raw get`` in MB/s, peaks in MiB)."""
    head = f"{result.point.label:>11} {result.point.keys:>11}"
    if not result.ran or result.times is None:
        return f"{head} {result.point.planned_mib:>8.1f}  {result.status}: {result.reason}"
    t, p = result.times, result.peaks or Peaks()
    raw_mb = result.raw_mib * MIB / 1e6
    return (
        f"{head} {t.mib:>8.1f} {t.build_s:>8.2f} {t.snapshot_s:>8.2f} {t.restore_s:>8.2f} "
        f"{result.mbps(t.snapshot_s):>9.1f} {result.mbps(t.restore_s):>9.1f} "
        f"{raw_mb / result.raw_put_s:>8.1f} {raw_mb / result.raw_get_s:>8.1f} "
        f"{result.snapshot_ratio:>8.3f} {result.restore_ratio:>8.3f} "
        f"{p.driver_jvm / MIB:>8.0f} {p.workers / MIB:>8.0f} {p.member_max / MIB:>7.0f}"
    )


def growth(results: Sequence[Result]) -> dict[str, Any]:
    """How snapshot and restore time grow with size, per series and over both."""
    ran = [r for r in results if r.ran and r.times is not None]
    out: dict[str, Any] = {}
    for series in ("size", "keys"):
        points = [r for r in ran if r.point.series == series]
        if len(points) < 2:
            continue
        mib = [r.times.mib for r in points if r.times]
        entry: dict[str, Any] = {}
        for step in ("snapshot", "restore"):
            seconds = [getattr(r.times, f"{step}_s") for r in points if r.times]
            slope = loglog_slope(mib, seconds)
            line = linear_fit(mib, seconds)
            entry[step] = {
                "loglog_slope": None if slope is None else round(slope, 3),
                "local_slopes": [round(s, 2) for s in local_slopes(mib, seconds)],
                "fixed_s": None if line is None else round(line[0], 2),
                "marginal_mbps": (
                    None if line is None or line[1] <= 0 else round(MIB / 1e6 / line[1], 1)
                ),
            }
        out[series] = entry
    for step in ("snapshot", "restore"):
        fit = bytes_and_keys_fit(
            [r.times.mib for r in ran if r.times],
            [r.point.keys / 1e6 for r in ran],
            [getattr(r.times, f"{step}_s") for r in ran if r.times],
        )
        if fit is not None:
            out[f"{step}_model"] = {
                "fixed_s": round(fit[0], 2),
                "s_per_gib": round(fit[1] * 1024, 2),
                "s_per_million_keys": round(fit[2], 3),
            }
    return out


def ratio_point(results: Sequence[Result]) -> Result | None:
    """The point for the headline ratios: 1 GiB if it ran, else the largest that ran."""
    ran = [r for r in results if r.ran]
    exact = [r for r in ran if r.point.series == "size" and r.point.planned_mib == RATIO_MIB]
    if exact:
        return exact[0]
    return max(ran, key=lambda r: r.point.planned_bytes, default=None)


def plot(results: Sequence[Result], path: Path, title: str) -> None:
    """Draws seconds against size and against keys (log-log), with the raw client's lines."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ran = [(r, r.times) for r in results if r.ran and r.times is not None]
    figure, axes = plt.subplots(1, 2, figsize=(11, 5.4), dpi=90)
    for axis, by_size in ((axes[0], True), (axes[1], False)):
        for series, style in (("size", "-"), ("keys", "--")):
            points = sorted(
                (
                    (t.mib if by_size else r.point.keys, r, t)
                    for r, t in ran
                    if r.point.series == series
                ),
                key=lambda item: item[0],
            )
            if not points:
                continue
            xs = [x for x, _, _ in points]
            name = "128 B/key" if series == "size" else "16 B/key"
            lines = (
                ("snapshot, runtime", [t.snapshot_s for _, _, t in points], "C0", "o"),
                ("restore, runtime", [t.restore_s for _, _, t in points], "C1", "s"),
                # The raw methods moved whole chunks: scaled to the snapshot's bytes.
                (
                    "raw client put",
                    [r.raw_put_s * t.mib / r.raw_mib for _, r, t in points],
                    "0.55",
                    "^",
                ),
                (
                    "raw client get",
                    [r.raw_get_s * t.mib / r.raw_mib for _, r, t in points],
                    "0.3",
                    "v",
                ),
            )
            for label, ys, color, marker in lines:
                axis.plot(
                    xs,
                    ys,
                    linestyle=style,
                    color=color,
                    marker=marker,
                    markersize=4,
                    label=f"{label} ({name})",
                )
        axis.set_xscale("log")
        axis.set_yscale("log")
        axis.set_xlabel("state size (MiB of Arrow data)" if by_size else "keys in the state")
        axis.set_ylabel("seconds")
        axis.grid(True, which="both", alpha=0.3)
    for result in results:
        if result.status == "does not fit":
            axes[0].axvline(result.point.planned_mib, color="C3", linestyle=":")
            axes[0].annotate(
                f"{result.point.label}: does not fit",
                (result.point.planned_mib, 0.02),
                xycoords=("data", "axes fraction"),
                color="C3",
                rotation=90,
                fontsize=7,
                va="bottom",
                ha="right",
            )
    handles, labels = axes[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=4, fontsize=7, frameon=False)
    figure.suptitle(title, fontsize=9)
    figure.tight_layout(rect=(0, 0.1, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path)
    plt.close(figure)
