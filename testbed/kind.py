"""The kind test bed: a kind cluster on the local Docker engine, where Pods run.

Why this exists: the control plane (:mod:`testbed.controlplane`) has no kubelet, so anything
that needs Pods to actually run (images, DNS, StatefulSet ordering, logs, the end-to-end
tests) needs a real node, and anything about node loss (a paused or drained node) needs more
than one. ``hack/kube/cluster.sh`` creates the cluster from a node image built on this
machine: one control-plane node and ``KIND_WORKERS`` workers (default 2, ``0`` for one
node), joined by one Pod network (flannel, host-gw). This module uses a running cluster or
creates one, and hands out access to it and to its nodes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from testbed.kube_access import new_api_client, run_kubectl
from testbed.kube_binaries import HACK_KUBE, binary_path
from testbed.processes import pid_alive

LOG = logging.getLogger("snapshotjob.kube.kind")

CLUSTER_SCRIPT: Final = HACK_KUBE / "cluster.sh"
DEFAULT_CLUSTER_NAME: Final = os.environ.get("SNAPSHOTJOB_KIND_CLUSTER", "snapshotjob")
DEFAULT_WORKERS: Final = 2
CONTROL_PLANE_LABEL: Final = "node-role.kubernetes.io/control-plane"


def expected_workers() -> int:
    """The worker count asked for: ``KIND_WORKERS`` (as ``cluster.sh`` reads it), default 2."""
    return int(os.environ.get("KIND_WORKERS", str(DEFAULT_WORKERS)))


class KindClusterError(RuntimeError):
    """Raised when the kind cluster cannot be found, created or reached."""


@dataclass
class KindCluster:
    """Handle on the kind test bed.

    Attributes:
        name: kind cluster name.
        kubeconfig: Path of the cluster's admin kubeconfig.
        created: Whether this handle's creator created the cluster (and will delete it).
        binary: Finds a built binary by name; the pytest plugin passes one that refuses
            binaries the running test's markers do not declare.
    """

    name: str
    kubeconfig: Path
    created: bool
    binary: Callable[[str], Path] = field(default=binary_path, repr=False, compare=False)

    def api_client(self) -> Any:
        """Return a new ``kubernetes.client.ApiClient`` bound to the kind cluster."""
        return new_api_client(self.kubeconfig)

    def kubectl(self, *args: str, timeout: float = 300) -> str:
        """Run the built ``kubectl`` against the cluster and return its stdout."""
        return run_kubectl(self.binary("kubectl"), self.kubeconfig, *args, timeout=timeout)

    def helm(self, *args: str, timeout: float = 600) -> str:
        """Run the built ``helm`` against the cluster and return its stdout.

        Raises:
            RuntimeError: If helm fails; the message carries helm's stderr.
        """
        result = subprocess.run(
            [str(self.binary("helm")), f"--kubeconfig={self.kubeconfig}", *args],
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"helm {' '.join(args)} failed: {result.stderr.strip()}")
        return result.stdout

    def load_image(self, image: str) -> None:
        """Copy a local Docker image into the cluster's nodes (``kind load docker-image``)."""
        subprocess.run(
            ["bash", str(CLUSTER_SCRIPT), "load", image],
            env=dict(os.environ, KIND_CLUSTER_NAME=self.name),
            check=True,
            timeout=600,
        )

    def node_names(self) -> list[str]:
        """Every node's name, sorted: the control plane first (``<cluster>-control-plane``)."""
        out = self.kubectl("get", "nodes", "-o", "jsonpath={.items[*].metadata.name}")
        return sorted(out.split())

    def worker_nodes(self) -> list[str]:
        """The names of the nodes without the control-plane role, sorted; empty on one node."""
        out = self.kubectl(
            "get",
            "nodes",
            "-l",
            f"!{CONTROL_PLANE_LABEL}",
            "-o",
            "jsonpath={.items[*].metadata.name}",
        )
        return sorted(out.split())

    def node_container(self, node: str) -> str:
        """The Docker container that is the node ``node`` (for ``docker pause``/``stop``).

        kind names each node's container after the node; this checks that the container
        belongs to this cluster rather than trusting the name.

        Raises:
            KindClusterError: If no container of this cluster is that node.
        """
        containers = node_containers(self.name)
        if node not in containers:
            raise KindClusterError(
                f"No container for node={node} in cluster={self.name}; containers={containers}"
            )
        return node

    def delete_if_created(self) -> None:
        """Delete the cluster if this handle created it, unless ``SNAPSHOTJOB_KEEP_CLUSTER=1``."""
        if self.created and os.environ.get("SNAPSHOTJOB_KEEP_CLUSTER") != "1":
            with contextlib.suppress(subprocess.TimeoutExpired):
                cluster_script(self.name, "down", timeout=300)


def cluster_script(name: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """Run ``hack/kube/cluster.sh`` for the cluster ``name`` and capture its output."""
    return subprocess.run(
        ["bash", str(CLUSTER_SCRIPT), *args],
        env=dict(os.environ, KIND_CLUSTER_NAME=name),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def node_containers(name: str) -> list[str]:
    """The node containers of the kind cluster ``name`` (``cluster.sh nodes``), sorted."""
    result = cluster_script(name, "nodes", timeout=60)
    if result.returncode != 0:
        raise KindClusterError(f"Cannot list the nodes of cluster={name}: {result.stderr.strip()}")
    return sorted(result.stdout.split())


PREPARATION_TIMEOUT_S = 1800.0
"""How long the cluster tier waits for ``hack/e2e-prepare.sh`` to end."""


def wait_for_preparation(timeout: float = PREPARATION_TIMEOUT_S) -> None:
    """Waits until the background preparation of ``make test`` (``SJ_E2E_PREPARE_PID``, see
    ``hack/test.sh``) has ended, so that no image build or cluster creation is half done;
    returns at once without one. Whether it succeeded does not matter here: the callers do
    its steps again, which are cached where it got to."""
    pid = os.environ.get("SJ_E2E_PREPARE_PID")
    if not pid:
        return
    deadline = time.monotonic() + timeout
    while pid_alive(int(pid)):
        if time.monotonic() > deadline:
            raise KindClusterError(
                f"hack/e2e-prepare.sh pid={pid} still runs after {timeout:.0f}s; its log: "
                f"{os.environ.get('SJ_E2E_PREPARE_LOG', '-')}"
            )
        time.sleep(1)
    LOG.info("Cluster tier preparation ended pid=%s", pid)


def _take_over(name: str) -> bool:
    """Whether the running cluster ``name`` is the one ``hack/e2e-prepare.sh`` created for
    this run (``SJ_E2E_OWNED`` names its control-plane container); if so this session owns
    it from now on (deletes it at the end) and the file is emptied."""
    owned = os.environ.get("SJ_E2E_OWNED")
    if not owned or not os.path.isfile(owned):
        return False
    with open(owned, encoding="ascii") as file:
        recorded = file.read().strip()
    if not recorded:
        return False
    inspect = subprocess.run(
        ["docker", "inspect", "--format", "{{.Id}}", f"{name}-control-plane"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if inspect.returncode != 0 or inspect.stdout.strip() != recorded:
        return False
    with open(owned, "w", encoding="ascii"):
        pass
    LOG.info("Taking over the kind cluster the preparation created name=%s", name)
    return True


def use_or_create(
    kubeconfig: Path,
    name: str = DEFAULT_CLUSTER_NAME,
    binary: Callable[[str], Path] = binary_path,
) -> KindCluster:
    """Use the running kind cluster (``make cluster-up``), or create one.

    Args:
        kubeconfig: Where to write the cluster's admin kubeconfig.
        name: The kind cluster's name.
        binary: Finds a built binary by name (see :class:`KindCluster`).

    Returns:
        A handle; ``created`` tells whether the cluster was created here.

    Raises:
        KindClusterError: If Docker is missing, the cluster cannot be created or its
            kubeconfig cannot be exported, or a running cluster has another node count than
            ``KIND_WORKERS`` asks for (tests that drain or pause workers would then run
            against the wrong shape).
    """
    if shutil.which("docker") is None:
        raise KindClusterError("Cluster tests need Docker: run `make install` (installs docker.io)")
    wait_for_preparation()
    status = cluster_script(name, "status", timeout=60)
    created = status.returncode != 0 or _take_over(name)
    if not created:
        have, want = len(node_containers(name)), expected_workers() + 1
        if have != want:
            raise KindClusterError(
                f"kind cluster name={name} has nodes={have} but KIND_WORKERS={want - 1} asks for "
                f"nodes={want}: delete it (KIND_CLUSTER_NAME={name} hack/kube/cluster.sh down) "
                f"so the tests create the right one, or set KIND_WORKERS={have - 1} to use it"
            )
    if status.returncode != 0:
        LOG.info("Creating kind cluster name=%s", name)
        up = cluster_script(name, "up", timeout=1800)
        if up.returncode != 0:
            raise KindClusterError(
                f"hack/kube/cluster.sh up failed rc={up.returncode}:\n"
                f"{up.stdout[-3000:]}\n{up.stderr[-3000:]}"
            )
    else:
        # make test's background preparation leaves the cluster it created paused.
        resume = cluster_script(name, "resume", timeout=600)
        if resume.returncode != 0:
            raise KindClusterError(
                f"hack/kube/cluster.sh resume failed rc={resume.returncode}:\n"
                f"{resume.stdout[-3000:]}\n{resume.stderr[-3000:]}"
            )
    export = cluster_script(name, "kubeconfig", timeout=60)
    if export.returncode != 0:
        raise KindClusterError(f"Cannot export the kind kubeconfig: {export.stderr.strip()}")
    kubeconfig.write_text(export.stdout)
    return KindCluster(name=name, kubeconfig=kubeconfig, created=created, binary=binary)
