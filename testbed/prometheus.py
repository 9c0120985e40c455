"""A real Prometheus for the tests: the server built by ``hack/kube/build.sh prometheus``.

Why a real server: the chart's dashboard and alert rules are PromQL, and what they promise
(a panel shows the snapshots' age, an alert fires after five minutes) holds only if Prometheus
parses and evaluates them that way over series scraped from the real programs. A static check
against the metric names catches a renamed metric, not a wrong ``by`` clause, a histogram
quantile over a counter or a regex matcher that selects nothing. No Grafana is reachable from
this machine's package registries, but Prometheus is on the Go module proxy: the dashboard is
drawn from its query API instead (:mod:`testbed.dashboard`).

The server scrapes the targets a test lists in a file of its own (``file_sd_configs``:
:meth:`PrometheusServer.scrape` rewrites it and Prometheus picks the change up within a
second), so one server serves a whole session. Given the data directory of an earlier run (and
no targets), it serves that run's series: ``hack/render_dashboard.py --data-dir``. Like every
server of the test bed it is a :class:`~testbed.processes.ManagedProcess` on loopback.
"""

from __future__ import annotations

import json
import math
import os
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from testbed.ports import free_port
from testbed.processes import ManagedProcess, wait_until

LOOPBACK = "127.0.0.1"
TARGET_FILES = "targets"
"""The folder under the server's workdir whose ``*.json`` files list the scrape targets."""


class PrometheusQueryError(RuntimeError):
    """Raised when Prometheus refuses a query (a parse or evaluation error) or cannot be read."""


@dataclass(frozen=True)
class Series:
    """One series of a query's result.

    Attributes:
        labels: The series' labels (``__name__`` included when the result keeps it).
        times: Unix times of the points, in seconds.
        values: The values; ``nan`` where PromQL returned NaN (a quantile without events).
    """

    labels: dict[str, str]
    times: tuple[float, ...]
    values: tuple[float, ...]

    def finite(self) -> list[float]:
        """The values that are numbers (not NaN, not infinite)."""
        return [v for v in self.values if math.isfinite(v)]


class PrometheusAPI:
    """A client of Prometheus' HTTP query API (``/api/v1``), of any server, over ``urllib``.

    Args:
        url: The server's base URL, e.g. ``http://127.0.0.1:9090``.
        timeout: Seconds to wait for each answer.
    """

    def __init__(self, url: str, timeout: float = 30.0) -> None:
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = f"?{urllib.parse.urlencode(params)}" if params else ""
        try:
            with urllib.request.urlopen(f"{self.url}{path}{query}", timeout=self.timeout) as r:
                document = json.load(r)
        except urllib.error.HTTPError as exc:
            # A refused query answers 400 or 422 with the error in a JSON body.
            try:
                document = json.load(exc)
            except ValueError:
                raise PrometheusQueryError(f"HTTP {exc.code} from {path}") from exc
        except (OSError, ValueError) as exc:
            raise PrometheusQueryError(f"No answer from {self.url}{path}: {exc}") from exc
        if document.get("status") != "success":
            raise PrometheusQueryError(
                f"{document.get('errorType', 'error')}: {document.get('error', document)}"
            )
        return document["data"]

    def query(self, expr: str, at: float | None = None) -> list[Series]:
        """An instant query: each series' one value at ``at`` (now by default).

        Raises:
            PrometheusQueryError: If Prometheus refuses the query.
        """
        params = {"query": expr} | ({"time": f"{at:.3f}"} if at is not None else {})
        data = self._get("/api/v1/query", params)
        if data["resultType"] == "scalar":
            time, value = data["result"]
            return [Series({}, (float(time),), (float(value),))]
        return [
            Series(dict(item["metric"]), (float(item["value"][0]),), (float(item["value"][1]),))
            for item in data["result"]
        ]

    def query_range(self, expr: str, start: float, end: float, step: float) -> list[Series]:
        """A range query, as Grafana runs a panel's target: points every ``step`` seconds.

        Raises:
            PrometheusQueryError: If Prometheus refuses the query.
        """
        params = {"query": expr, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": f"{step}"}
        data = self._get("/api/v1/query_range", params)
        return [
            Series(
                dict(item["metric"]),
                tuple(float(t) for t, _ in item["values"]),
                tuple(float(v) for _, v in item["values"]),
            )
            for item in data["result"]
        ]

    def targets(self) -> list[dict[str, Any]]:
        """The active scrape targets, each with its ``labels`` and ``health``."""
        active: list[dict[str, Any]] = self._get("/api/v1/targets", {"state": "active"})[
            "activeTargets"
        ]
        return active

    def head_range(self) -> tuple[float, float]:
        """The first and last sample times in the in-memory head block, in Unix seconds.

        A server that just opened a kept data directory replays its write-ahead log into the
        head, so this is the time range of the recorded run.
        """
        stats = self._get("/api/v1/status/tsdb")["headStats"]
        return int(stats["minTime"]) / 1000, int(stats["maxTime"]) / 1000

    def ready(self) -> bool:
        """Whether the server answers ``/-/ready`` (its storage is open)."""
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=2) as response:
                return bool(response.status == 200)
        except OSError:
            return False


@dataclass(frozen=True)
class Target:
    """A scrape target and the labels it gets, as a PodMonitor's relabelling gives them.

    Attributes:
        address: ``host:port`` of the ``/metrics`` endpoint.
        labels: Labels put on every series of the target (``job`` included if given).
    """

    address: str
    labels: Mapping[str, str]


class PrometheusServer:
    """One Prometheus server on a free loopback port, its data under ``workdir/data``.

    Args:
        workdir: Directory for the configuration, the target files, the data and the log.
        binary: The ``prometheus`` executable.
        scrape_interval: How often every target is scraped and rules evaluated.
        data_dir: An existing data directory to open instead of ``workdir/data`` (a kept run).
    """

    def __init__(
        self,
        workdir: Path,
        binary: Path,
        scrape_interval: str = "1s",
        data_dir: Path | None = None,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.data_dir = data_dir or workdir / "data"
        self.config = workdir / "prometheus.yml"
        self.target_dir = workdir / TARGET_FILES
        self.scrape_interval = scrape_interval
        self.api = PrometheusAPI(self.url)
        self.process = ManagedProcess(
            "prometheus",
            [
                str(binary),
                f"--config.file={self.config}",
                f"--storage.tsdb.path={self.data_dir}",
                f"--web.listen-address={LOOPBACK}:{self.port}",
                # A changed target file reaches the scrape loops in a second, not five.
                "--scrape.discovery-reload-interval=1s",
            ],
            workdir / "prometheus.log",
        )

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://{LOOPBACK}:{self.port}"

    def _configuration(self) -> str:
        document = {
            "global": {
                "scrape_interval": self.scrape_interval,
                "scrape_timeout": self.scrape_interval,
                "evaluation_interval": self.scrape_interval,
            },
            "scrape_configs": [
                {
                    "job_name": "snapshotjob",
                    "file_sd_configs": [
                        {"files": [str(self.target_dir / "*.json")], "refresh_interval": "1s"}
                    ],
                }
            ],
        }
        # JSON is YAML: no YAML writer needed for a generated file.
        return json.dumps(document, indent=2) + "\n"

    def start(self, timeout: float = 60.0) -> None:
        """Write the configuration, start the server and wait until its storage is open."""
        self.target_dir.mkdir(parents=True, exist_ok=True)
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.config.write_text(self._configuration())
        self.process.start()
        wait_until(self._ready, timeout, f"Prometheus on {self.url}", interval=0.2)

    def _ready(self) -> bool:
        if not self.process.running():
            raise RuntimeError(
                f"Prometheus exited; log {self.process.log_path}:\n{self.process.log_tail()}"
            )
        return self.api.ready()

    def scrape(self, name: str, targets: Sequence[Target]) -> None:
        """Scrape ``targets`` from now on, in place of what was listed under ``name`` before.

        Args:
            name: The target file's name (one per test); an empty list removes the file.
            targets: The targets and their labels.
        """
        path = self.target_dir / f"{name}.json"
        if not targets:
            path.unlink(missing_ok=True)
            return
        groups = [{"targets": [t.address], "labels": dict(t.labels)} for t in targets]
        # Written aside and renamed, so the watcher never reads half a file.
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(groups, indent=2))
        os.replace(partial, path)

    def wait_up(self, addresses: Sequence[str], timeout: float = 30.0) -> None:
        """Wait until every target of ``addresses`` was scraped successfully.

        Raises:
            TimeoutError: If one is not scraped in time; the message has the targets' errors.
        """
        wanted = set(addresses)

        def all_up() -> bool:
            up = {t["labels"].get("instance") for t in self.api.targets() if t["health"] == "up"}
            return wanted <= up

        try:
            wait_until(all_up, timeout, f"targets {sorted(wanted)} up", interval=0.2)
        except TimeoutError as exc:
            errors = {t["scrapeUrl"]: t.get("lastError") for t in self.api.targets()}
            raise TimeoutError(f"{exc}; targets: {errors}") from exc

    def stop(self) -> None:
        """Stop the server; SIGTERM lets it close its storage cleanly."""
        self.process.stop(timeout=20)
