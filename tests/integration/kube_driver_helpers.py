"""Drivers in Kubernetes mode without an operator: fixtures, the job, and reading what it wrote.

Shared by ``test_driver_kubernetes.py``, ``test_durable_restore.py`` and ``test_partitions.py``.
The test plays the operator: it creates a SnapshotJob whose pipeline is
:mod:`tests.integration.driver_pipeline` (:func:`create_driver_job`), writes the status the way
the operator does (:func:`claim_execution`, :func:`patch_job_status`), starts driver processes
(:class:`Drivers`) and gates their input (:func:`allow`); then it reads back what the driver
wrote: the record in the job's status (:func:`execution_record`) and the sinks' output
(:func:`published_rows`, :func:`committed_events`). A module that asks for the fixtures
``api`` and ``drivers`` imports them into its namespace, so pytest finds them there (``store``
comes from :mod:`tests.integration.operator_fixtures`); ``api`` stays module-scoped, one per
importing module.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from snapshotjob_contract.environment import (
    ENV_DURABLE_ACCESS_KEY_ID,
    ENV_DURABLE_BUCKET,
    ENV_DURABLE_ENDPOINT,
    ENV_DURABLE_SECRET_ACCESS_KEY,
)
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.processes import start_in_own_session
from testbed.s3 import S3Server
from testbed.snapshotjob_crd import create_job, install_crd

NAMESPACE = "default"
REPO = Path(__file__).resolve().parents[2]
KEYS = 3
END = 600
EXPORTED_AT = 300  # the job's input is held here while it exports
STATE_PARTITIONS = 2  # spec.statePartitions; fewer tasks per epoch than the default 8


@pytest.fixture(scope="module")
def api(kube_api: KubeAPI) -> Iterator[client.ApiClient]:
    """A client of the session's API server, with the CRD installed, for the module.

    Yields:
        The client, closed after the module.
    """
    api_client = kube_api.api_client()
    install_crd(api_client)
    yield api_client
    api_client.close()


class Drivers:
    """Starts driver processes with the test bed's kubeconfig and kills leftovers."""

    def __init__(self, kube_api: KubeAPI, logs: Path) -> None:
        self.kube_api = kube_api
        self.logs = logs
        self.started: list[tuple[subprocess.Popen[bytes], Path]] = []

    def start(
        self,
        name: str,
        execution_id: str,
        initial_snapshot: str = "",
        extra_env: dict[str, str] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Starts ``python -m spark_runtime run --kubernetes`` for one execution of a job.

        Args:
            name: The SnapshotJob's name.
            execution_id: The execution the driver runs as.
            initial_snapshot: ``SJ_INITIAL_SNAPSHOT_NAME``: an export to start from.
            extra_env: More environment (durable storage, say).

        Returns:
            The process; its output goes to a log under the test's folder.
        """
        log_path = self.logs / f"{name}-{execution_id}.log"
        env = {
            **os.environ,
            "KUBECONFIG": str(self.kube_api.kubeconfig),
            "PYSPARK_PYTHON": sys.executable,
            "SJ_INITIAL_SNAPSHOT_NAME": initial_snapshot,
            "SJ_FAILPOINTS": "",
            **(extra_env or {}),
        }
        env.pop("KUBERNETES_SERVICE_HOST", None)
        argv = [sys.executable, "-m", "spark_runtime", "run", "--kubernetes", "--namespace"]
        argv += [NAMESPACE, "--name", name, "--execution-id", execution_id]
        with log_path.open("wb") as out:
            process = start_in_own_session(
                f"driver-{name}", argv, out, env=env, cwd=REPO, tie_to_parent=False
            )
        self.started.append((process, log_path))
        return process

    def wait(self, process: subprocess.Popen[bytes], timeout: float = 120) -> int:
        """Waits for the driver to exit; fails the test, with its log, if it does not.

        Args:
            process: A driver this started.
            timeout: Seconds to wait.

        Returns:
            Its exit code.
        """
        try:
            return process.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"Driver did not exit within {timeout}s:\n{self.tail(process)}")

    def alive(self, process: subprocess.Popen[bytes]) -> None:
        """Fails the test, with the driver's log, if the driver has exited.

        Args:
            process: A driver this started.
        """
        if process.poll() is not None:
            pytest.fail(f"Driver exited early code={process.returncode}:\n{self.tail(process)}")

    def tail(self, process: subprocess.Popen[bytes]) -> str:
        """The last 40 lines of the driver's log.

        Args:
            process: A driver this started.

        Returns:
            The lines, joined.
        """
        return "\n".join(self.log(process).splitlines()[-40:])

    def log(self, process: subprocess.Popen[bytes]) -> str:
        """The driver's whole log.

        Args:
            process: A driver this started.

        Returns:
            The log's text.
        """
        path = next(p for proc, p in self.started if proc is process)
        return path.read_text(errors="replace")

    def kill_all(self) -> None:
        """Kills every driver this started that still runs."""
        for process, _ in self.started:
            if process.poll() is None:
                process.kill()
                process.wait()


@pytest.fixture
def drivers(kube_api: KubeAPI, tmp_path: Path) -> Iterator[Drivers]:
    """Starts drivers for one test, their logs in its folder.

    Yields:
        The starter; the drivers still running are killed after the test.
    """
    started = Drivers(kube_api, tmp_path)
    yield started
    started.kill_all()


def durable_storage_env(s3: S3Server, bucket: str, **extra: str) -> dict[str, str]:
    """The durable storage variables the operator gives a driver Pod, for the test's server.

    Args:
        s3: The session's S3 server.
        bucket: The bucket to copy to.
        **extra: More variables (prefix, region, copy interval).

    Returns:
        The environment variables.
    """
    return {
        ENV_DURABLE_BUCKET: bucket,
        ENV_DURABLE_ENDPOINT: s3.endpoint,
        ENV_DURABLE_ACCESS_KEY_ID: s3.access_key,
        ENV_DURABLE_SECRET_ACCESS_KEY: s3.secret_key,
        **extra,
    }


def custom_objects(api: client.ApiClient) -> Any:
    """The custom objects API (untyped, as the client is).

    Args:
        api: The API server's client.

    Returns:
        ``client.CustomObjectsApi`` on it.
    """
    return client.CustomObjectsApi(api)


def job_status(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The SnapshotJob's status as the API server has it.

    Args:
        api: The API server's client.
        name: The job's name in :data:`NAMESPACE`.

    Returns:
        The status; empty if it has none.
    """
    job = custom_objects(api).get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name)
    status: dict[str, Any] = job.get("status") or {}
    return status


def patch_job_status(api: client.ApiClient, name: str, status: dict[str, Any]) -> None:
    """Merge-patches the SnapshotJob's status, as the operator does.

    Args:
        api: The API server's client.
        name: The job's name in :data:`NAMESPACE`.
        status: The patch (None removes a field).
    """
    custom_objects(api).patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        name,
        {"status": status},
        _content_type="application/merge-patch+json",
    )


def utc_now() -> str:
    """The time now, as the status writes times.

    Returns:
        RFC 3339 in UTC, to the second.
    """
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def claim_execution(api: client.ApiClient, name: str, execution_id: str, attempt: int) -> None:
    """What the operator writes before it starts a new execution's driver.

    Args:
        api: The API server's client.
        name: The job's name in :data:`NAMESPACE`.
        execution_id: The new execution's id, which fences the older ones.
        attempt: The new execution's attempt.
    """
    patch_job_status(
        api,
        name,
        {
            "execution": {
                "id": execution_id,
                "driverPod": f"{name}-driver-{attempt}",
                "startedAt": utc_now(),
                "attempt": attempt,
                "specHash": "test",
            },
            "termination": None,
        },
    )


def pipeline_args(work: Path) -> dict[str, Any]:
    """The arguments of :mod:`tests.integration.driver_pipeline`, gated by ``work/limit``.

    Args:
        work: The job's folder: its gate and output.

    Returns:
        The pipeline's ``args``: :data:`KEYS` keys up to :data:`END`.
    """
    return {
        "limit_file": str(work / "limit"),
        "out": str(work / "out"),
        "end": END,
        "keys": KEYS,
        "rows_per_epoch": 150,
    }


def create_driver_job(
    api: client.ApiClient, cluster: HazelcastCluster, work: Path, execution_id: str
) -> str:
    """Creates a SnapshotJob running the driver pipeline, its first execution claimed.

    Args:
        api: The API server's client.
        cluster: The Hazelcast cluster the job snapshots to.
        work: The job's folder, created here.
        execution_id: The first execution's id.

    Returns:
        The job's name.
    """
    work.mkdir(parents=True)
    spec = {
        "image": "snapshotjob/runtime:dev",
        "pipeline": {
            "module": "tests.integration.driver_pipeline",
            "args": pipeline_args(work),
        },
        "processingGuarantee": "EXACTLY_ONCE",
        "snapshotIntervalSeconds": 1,
        "statePartitions": STATE_PARTITIONS,
        "spark": {"master": "local[2]"},
        "hazelcast": {
            "address": ",".join(n.address for n in cluster.nodes),
            "clusterName": cluster.cluster_name,
        },
    }
    name: str = create_job(api, spec=spec, execution_id=execution_id)["metadata"]["name"]
    return name


def allow(work: Path, limit: int) -> None:
    """Lets the job read up to ``limit`` (its gate, ``work/limit``, replaced atomically).

    Args:
        work: The job's folder.
        limit: How far the job may read.
    """
    (work / ".limit").write_text(str(limit))
    os.replace(work / ".limit", work / "limit")


def published_rows(work: Path) -> list[tuple[int, int, int]]:
    """Every published row as (key, count, total); staging output is not published.

    Args:
        work: The job's folder.

    Returns:
        The rows of the file sink's published parts, in part order.
    """
    out = work / "out"
    rows = []
    for part in sorted(out.glob("files-*/part-*.json")):
        for line in part.read_text().splitlines():
            row = json.loads(line)
            rows.append((int(row["key"]), int(row["count"]), int(row["total"])))
    return rows


def expected_sums(upto: int) -> dict[int, tuple[int, int]]:
    """The exact running sums once the job read the values 0 .. upto - 1.

    Args:
        upto: How far the job read.

    Returns:
        key -> (count, total).
    """
    return {key: (len(range(key, upto, KEYS)), sum(range(key, upto, KEYS))) for key in range(KEYS)}


def latest_per_key(rows: list[tuple[int, int, int]]) -> dict[int, tuple[int, int]]:
    """The furthest row of each key.

    Args:
        rows: Rows as :func:`published_rows` reads them.

    Returns:
        key -> (count, total) of its row with the highest count.
    """
    latest: dict[int, tuple[int, int]] = {}
    for key, count, total in rows:
        if key not in latest or count > latest[key][0]:
            latest[key] = (count, total)
    return latest


def execution_record(api: client.ApiClient, name: str) -> dict[str, Any]:
    """The execution record the driver keeps in the job's status.

    Args:
        api: The API server's client.
        name: The job's name in :data:`NAMESPACE`.

    Returns:
        ``status.executionRecord``; empty if there is none yet.
    """
    record: dict[str, Any] = job_status(api, name).get("executionRecord") or {}
    return record


def committed_events(work: Path) -> list[int]:
    """Every event the job's events sink published, in published order.

    Args:
        work: The job's folder; the pipeline's ``events_out`` is ``work/events``.

    Returns:
        The events' values.
    """
    values: list[int] = []
    for part in sorted((work / "events").glob("events-*/part-*.json")):
        values.extend(int(json.loads(line)["value"]) for line in part.read_text().splitlines())
    return values
