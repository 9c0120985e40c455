"""The chart's NODE_AWARE partition groups on real members: a node's loss loses no entry.

Three members of the test bed run the ``partition-group`` section the chart renders with
``hazelcast.partitionGroup.enabled`` and the node attribute its StatefulSet sets (the
``-Dhazelcast.member.attribute...`` option of JAVA_OPTS, with the node name Kubernetes would
substitute). Two members say they run on node ``a``, one on node ``b``. Killing both members
of node ``a`` at once (SIGKILL, no migration in between) keeps every entry of a map with one
backup: each partition's backup is in the other group than its owner. Without the groups,
the same kill loses the partitions whose owner and backup were both on ``a`` (about a third;
``test_backup_count.py`` shows that loss for four members).

The members join by TCP/IP on loopback, as the test bed's always do, rather than by the Pods'
DNS names; the chart's placement of members on real nodes of a multi-node cluster is not
tested here (nor on kind).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from hazelcast.proxy.map import BlockingMap

from snapshotjob_contract import snapshot_map_name
from testbed.hazelcast import HazelcastCluster
from tests.integration.chart_render import member_config, member_env, render

pytestmark = [pytest.mark.helm, pytest.mark.timeout(300)]

NODES = ("a", "a", "b")
ENTRIES = 2000


def chart_partition_group() -> tuple[dict[str, object], str]:
    """The rendered ``partition-group`` section and the node attribute's JVM option."""
    objects = render("hazelcast.partitionGroup.enabled=true")
    section = member_config(objects)["hazelcast"]["partition-group"]
    [option] = [
        part
        for part in member_env(objects)["JAVA_OPTS"].split()
        if part.startswith("-Dhazelcast.member.attribute.")
    ]
    assert option.endswith("=$(SJ_NODE_NAME)"), option
    return section, option


@pytest.fixture
def members_on_two_nodes(tmp_path: Path) -> Iterator[HazelcastCluster]:
    section, option = chart_partition_group()
    (tmp_path / "hazelcast").mkdir()
    cluster = HazelcastCluster(
        tmp_path / "hazelcast",
        size=len(NODES),
        heap="256m",
        extra_config={"partition-group": section},
        member_options=[[option.replace("$(SJ_NODE_NAME)", node)] for node in NODES],
    )
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def test_losing_every_member_of_one_node_loses_no_entry(
    members_on_two_nodes: HazelcastCluster,
) -> None:
    cluster = members_on_two_nodes
    client = cluster.client()
    name = snapshot_map_name(uuid.uuid4().hex[:8], 0, 1)
    entries: BlockingMap[int, bytes] = client.get_map(name).blocking()
    for key in range(ENTRIES):
        entries.set(key, b"x")
    cluster.wait_cluster_safe(expected_size=len(NODES))

    for index, node in enumerate(NODES):
        if node == "a":
            cluster.kill(index)
    cluster.wait_cluster_safe(expected_size=NODES.count("b"))

    assert client.get_map(name).blocking().size() == ENTRIES
