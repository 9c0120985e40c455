"""A local-mode driver of the metered pipeline that serves metrics: the shared builder.

``test_driver_metrics.py`` scrapes such a driver and ``test_dashboard.py`` has Prometheus scrape
one; both start it with :func:`metered_driver` and find its port with :func:`metrics_port`.
The driver runs :mod:`tests.integration.metered_pipeline` against the session's Hazelcast
members, gated by the file ``limit`` in its folder, snapshotting every :data:`INTERVAL_MS`.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path

from testbed.driver_process import DriverHarness
from testbed.hazelcast import HazelcastCluster

ROWS_PER_EPOCH = 50
EPOCHS = 6
READ = ROWS_PER_EPOCH * EPOCHS
INTERVAL_MS = 2000


def metered_driver(cluster: HazelcastCluster, workdir: Path) -> DriverHarness:
    """A metered job gated at :data:`READ` numbers whose driver serves metrics on a free port.

    Args:
        cluster: The Hazelcast cluster the driver snapshots to and the job's map lives in.
        workdir: The job's folder: its gate (``limit``), output and log.

    Returns:
        The harness, not started; :func:`metrics_port` reads the port from its log.
    """
    workdir.mkdir(parents=True, exist_ok=True)
    (workdir / "limit").write_text(str(READ))
    members = [node.address for node in cluster.nodes]
    return DriverHarness(
        workdir=workdir,
        members=members,
        cluster_name=cluster.cluster_name,
        job_uid=f"metered-{uuid.uuid4().hex[:8]}",
        pipeline="tests.integration.metered_pipeline",
        args={
            "limit_file": str(workdir / "limit"),
            "out": str(workdir / "out"),
            "members": ",".join(members),
            "cluster": cluster.cluster_name,
            "map": f"metered-{uuid.uuid4().hex[:8]}",
            "rows_per_epoch": ROWS_PER_EPOCH,
        },
        snapshot_interval_ms=INTERVAL_MS,
        extra_args=["--metrics-port", "0"],
    )


def metrics_port(harness: DriverHarness) -> int:
    """The port the started driver serves metrics on, once it logged it.

    Args:
        harness: The started driver.

    Returns:
        The port from the driver's log line ``Serving metrics``.
    """
    assert harness.wait_for_log("Serving metrics ", timeout=120), harness.log_tail()
    found = re.search(r"Serving metrics address=\S+ port=(\d+)", harness.log_text())
    assert found, harness.log_tail()
    return int(found.group(1))
