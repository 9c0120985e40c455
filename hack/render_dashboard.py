"""Renders the chart's Grafana dashboard into one PNG from a real Prometheus, without Grafana.

No Grafana is reachable from this project's package registries, so the dashboard
(charts/snapshotjob-operator/dashboards/snapshotjob.json) is run the way Grafana runs it
(testbed/dashboard.py: variables and intervals substituted, every target a range query) and
drawn with matplotlib (testbed/dashboard_png.py). The data comes from either

* a running Prometheus (--prometheus URL), e.g. the cluster's, through
  ``kubectl port-forward``; or
* the data directory a Prometheus wrote (--data-dir DIR), e.g. the one
  tests/integration/test_dashboard.py keeps under pytest's base temp: a Prometheus built by
  ``hack/kube/build.sh prometheus`` is started over it on loopback, and the range defaults to
  the recorded one.

    .venv/bin/python hack/render_dashboard.py --prometheus http://127.0.0.1:9090 --last 3h
    .venv/bin/python hack/render_dashboard.py --out docs/images/dashboard.png \\
        --data-dir /tmp/pytest-of-$USER/pytest-<N>/prometheus0/data
"""

from __future__ import annotations

import argparse
import logging
import re
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from testbed import dashboard, dashboard_png, kube_binaries
from testbed.prometheus import PrometheusAPI, PrometheusServer

LOG = logging.getLogger("render_dashboard")
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h|d)$")
_UNIT_SECONDS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def seconds(text: str) -> float:
    """A Prometheus-style duration (``90s``, ``15m``, ``3h``) in seconds.

    Raises:
        argparse.ArgumentTypeError: If the text is not such a duration.
    """
    match = _DURATION.match(text)
    if not match:
        raise argparse.ArgumentTypeError(f"not a duration like 30s, 15m or 3h: {text}")
    return float(match.group(1)) * _UNIT_SECONDS[match.group(2)]


def moment(text: str) -> float:
    """A Unix time, given as a number or in ISO 8601 (a time without zone is UTC).

    Raises:
        argparse.ArgumentTypeError: If it is neither.
    """
    try:
        return float(text)
    except ValueError:
        pass
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"not a Unix time or an ISO 8601 time: {text}") from exc
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=UTC)
    return parsed.timestamp()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    """The command line."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--prometheus", metavar="URL", help="a running Prometheus' base URL")
    source.add_argument(
        "--data-dir", type=Path, metavar="DIR", help="a Prometheus data directory to serve"
    )
    parser.add_argument("--out", type=Path, default=Path("dashboard.png"), help="the PNG")
    parser.add_argument("--dashboard", type=Path, default=dashboard.DASHBOARD)
    parser.add_argument(
        "--from", dest="start", type=moment, help="range start (default: see --last)"
    )
    parser.add_argument("--to", dest="end", type=moment, help="range end (default: now)")
    parser.add_argument(
        "--last",
        type=seconds,
        default=seconds("15m"),
        help="with --prometheus and no --from: the range before --to (default 15m)",
    )
    parser.add_argument(
        "--scrape-interval",
        type=seconds,
        help="the data's scrape interval, for $__rate_interval (default: 1s with --data-dir, "
        "as the test scrapes; 30s with --prometheus, the chart's PodMonitor interval)",
    )
    parser.add_argument("--namespace", action="append", help="$namespace (repeat; default All)")
    parser.add_argument("--snapshotjob", action="append", help="$snapshotjob (repeat; default All)")
    return parser.parse_args(argv)


def render(api: PrometheusAPI, args: argparse.Namespace, recorded: bool) -> int:
    """Run the dashboard against ``api`` and draw it into ``args.out``.

    Returns:
        How many of the panels' queries Prometheus refused.
    """
    board = dashboard.Dashboard.load(args.dashboard)
    if recorded and args.start is None:
        first, last = api.head_range()
        start, end = first, args.end or last
    else:
        end = args.end or time.time()
        start = args.start if args.start is not None else end - args.last
    if end <= start:
        raise SystemExit(f"The range is empty start={start} end={end}")
    scrape = args.scrape_interval or (1.0 if recorded else 30.0)
    window = dashboard.TimeWindow(start, end, scrape)
    selections = {"namespace": args.namespace, "snapshotjob": args.snapshotjob}
    results = dashboard.run(api, board, window, selections)
    refused = 0
    for result in results:
        for error in result.errors():
            refused += 1
            LOG.error("Query refused panel=%r error=%s", result.panel.title, error)
    titles = [dashboard.shown_title(r.panel, board, selections) for r in results]
    subtitle = f"{dashboard.selection_text(board, selections)}   Prometheus {api.url}"
    path = dashboard_png.draw(board, results, window, args.out, titles=titles, subtitle=subtitle)
    series = sum(len(t.series) for r in results for t in r.results)
    LOG.info(
        "Dashboard rendered path=%s panels=%d series=%d refused=%d bytes=%d",
        path,
        len(results),
        series,
        refused,
        path.stat().st_size,
    )
    return refused


def main(argv: list[str] | None = None) -> int:
    """Render the dashboard; 1 if a query was refused (the PNG is written all the same)."""
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    args = parse_args(argv)
    if args.prometheus:
        refused = render(PrometheusAPI(args.prometheus), args, recorded=False)
    else:
        if not (args.data_dir / "wal").is_dir():
            raise SystemExit(f"No Prometheus data directory (no wal/) at {args.data_dir}")
        bin_dir = kube_binaries.ensure_binaries(names=["prometheus"], groups=["prometheus"])
        with tempfile.TemporaryDirectory(prefix="sj-render-") as workdir:
            server = PrometheusServer(
                Path(workdir), bin_dir / "prometheus", data_dir=args.data_dir.resolve()
            )
            server.start()
            try:
                refused = render(server.api, args, recorded=True)
            finally:
                server.stop()
    return 1 if refused else 0


if __name__ == "__main__":
    sys.exit(main())
