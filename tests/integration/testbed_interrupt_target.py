"""Not collected by default: the child session of ``test_interrupted_run_leaves_no_servers``.

It starts the real servers, writes their process ids to ``$SJ_INTERRUPT_PIDS`` and waits to
be interrupted.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from testbed.hazelcast import HazelcastCluster
from testbed.kafka import KafkaBroker
from testbed.postgres import PostgresServer
from testbed.s3 import S3Server


def test_wait_for_interrupt(
    hazelcast_cluster: HazelcastCluster, postgres: PostgresServer, kafka: KafkaBroker, s3: S3Server
) -> None:
    pids = [m.process.pid for m in hazelcast_cluster.nodes] + [
        postgres.process.pid,
        kafka.process.pid,
        s3.process.pid,
    ]
    target = Path(os.environ["SJ_INTERRUPT_PIDS"])
    partial = target.with_suffix(".tmp")
    partial.write_text(json.dumps(pids))
    partial.rename(target)
    time.sleep(600)
