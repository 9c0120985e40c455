"""The operator as a process for one test, and what the tests play around it: pytest fixtures.

Shared by the modules that run the real operator against the session's API server and
Hazelcast cluster (``test_operator.py``, ``test_exports.py``, ``test_gitops_apply.py``,
``test_operator_metrics_scrape.py``, ``test_dashboard.py``). A module imports the fixtures it
asks for into its namespace, so pytest finds them there, and lists them in ``__all__``; it
overrides ``operator_args`` or ``operator_env`` by defining its own. Each importing module gets
its own instances, as when each defined them: ``crd`` stays module-scoped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from snapshot_protocol.chunks import ChunkDescriptor, ChunkKey, ValidationRecord
from snapshot_store.hazelcast import HazelcastSnapshotStore, connect
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.operator_harness import OperatorHarness, OperatorProcess
from testbed.snapshotjob_crd import delete_test_namespace, install_crd

__all__ = [
    "crd",
    "harness",
    "namespace",
    "operator",
    "operator_args",
    "operator_env",
    "store",
    "write_snapshot",
]


@pytest.fixture(scope="module")
def crd(kube_api: KubeAPI) -> None:
    """The generated CRD, installed once for the module."""
    install_crd(kube_api.api_client())


@pytest.fixture
def namespace(kube_api: KubeAPI, crd: None) -> Iterator[str]:
    """A fresh namespace per test, so tests never see each other's jobs."""
    name = f"op-{uuid.uuid4().hex[:8]}"
    api = kube_api.api_client()
    client.CoreV1Api(api).create_namespace({"metadata": {"name": name}})
    yield name
    delete_test_namespace(api, name)


@pytest.fixture
def operator_args() -> tuple[str, ...]:
    """Extra operator flags; tests override it with ``parametrize``."""
    return ()


@pytest.fixture
def operator_env() -> dict[str, str]:
    """Extra environment of the operator's process; tests override it."""
    return {}


@pytest.fixture
def operator(
    kube_api: KubeAPI,
    namespace: str,
    healthy_hazelcast: HazelcastCluster,
    tmp_path: Path,
    operator_args: tuple[str, ...],
    operator_env: dict[str, str],
) -> Iterator[OperatorProcess]:
    """The operator, running for one test."""
    running = OperatorProcess(
        kube_api,
        namespace,
        healthy_hazelcast,
        tmp_path / "operator.log",
        *operator_args,
        env=operator_env,
    )
    running.start()
    yield running
    running.stop()


@pytest.fixture
def harness(kube_api: KubeAPI, namespace: str, operator: OperatorProcess) -> OperatorHarness:
    """User, kubelet and driver for one namespace."""
    return OperatorHarness(kube_api, namespace, operator)


@pytest.fixture
def store(healthy_hazelcast: HazelcastCluster) -> Iterator[HazelcastSnapshotStore]:
    """A strict snapshot store client on the test cluster, as the driver has.

    Yields:
        The client, shut down after the test.
    """
    hz = connect([node.address for node in healthy_hazelcast.nodes], healthy_hazelcast.cluster_name)
    yield HazelcastSnapshotStore(hz)
    hz.shutdown()


def write_snapshot(
    store: HazelcastSnapshotStore, map_name: str, uid: str, snapshot_id: int
) -> None:
    """Writes a small valid snapshot the way a driver's snapshot does (chunks, then record).

    Args:
        store: The client to write with.
        map_name: The snapshot map to write into.
        uid: The job's uid, recorded in the validation record.
        snapshot_id: The snapshot's id.
    """
    chunks = [
        (ChunkKey(snapshot_id, "counts", partition, 0), bytes([partition]) * 100)
        for partition in range(4)
    ]
    store.put_chunks(map_name, chunks)
    store.put_validation_record(
        map_name,
        ValidationRecord(
            snapshot_id=snapshot_id,
            chunks=tuple(ChunkDescriptor.of(key, data, 1) for key, data in chunks),
            num_bytes=sum(len(data) for _, data in chunks),
            num_keys=len(chunks),
            creation_time=int(time.time() * 1000),
            job_uid=uid,
        ),
    )
