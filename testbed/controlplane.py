"""Local Kubernetes control plane (etcd + kube-apiserver + controller-manager + scheduler).

Why this exists: most of the operator's behaviour is API-server behaviour (CRD validation,
status subresources, optimistic concurrency, owner-reference garbage collection), and none
of that needs a kubelet. Running the real binaries as plain loopback processes, the way
controller-runtime's *envtest* does, gives a real API in a few seconds instead of the
minutes a container-based cluster takes. Pods are accepted and scheduled-to-nothing: they
never run. For running workloads use cluster mode (:mod:`testbed.kind`).

Everything is generated fresh per instance in one state directory (:mod:`testbed.pki`):
an ECDSA CA, serving and client certificates, a service-account signing key, per-component
kubeconfigs and an ``admin`` kubeconfig. Each process runs in its own process group so that
teardown can always kill the whole tree, and a test-session instance additionally asks the
kernel to kill the processes if the Python process dies and stops them at interpreter exit
(both from :mod:`testbed.processes`).

Used two ways:

* as a library by ``tests/fixtures/kube.py`` and ``bench/reconcile_latency.py``
  (``ControlPlane(...).start()``, then :meth:`ControlPlane.kube_api`), and
* as a CLI by ``make control-plane-up`` / ``control-plane-down``::

      python -m testbed.controlplane up   [--dir DIR]   # prints the kubeconfig path
      python -m testbed.controlplane down [--dir DIR]
      python -m testbed.controlplane status [--dir DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from testbed.kube_access import new_api_client, run_kubectl
from testbed.kube_binaries import (
    CONTROL_PLANE_BINARIES,
    BinaryBuildError,
    binary_path,
    default_bin_dir,
    ensure_binaries,
    missing_binaries,
)
from testbed.pki import CertSpec, PkiError, generate_pki, write_kubeconfig
from testbed.ports import free_port
from testbed.processes import (
    cancel_stop_at_exit,
    start_in_own_session,
    stop_at_exit,
    stop_process_groups,
)

LOG = logging.getLogger("snapshotjob.kube.controlplane")

SERVICE_CIDR: Final = "10.0.0.0/24"
SERVICE_IP: Final = "10.0.0.1"
CLUSTER_DOMAIN: Final = "cluster.local"


class ControlPlaneError(RuntimeError):
    """Raised when the control plane cannot be built, started or reached."""


@dataclass
class Component:
    """A running control-plane process.

    Attributes:
        name: Component name (also the log file stem).
        process: The process; its pid is also its process-group id.
        log_path: Where its stdout/stderr go.
    """

    name: str
    process: subprocess.Popen[bytes]
    log_path: Path

    def log_tail(self, lines: int = 30) -> str:
        """Return the last ``lines`` lines of the component's log."""
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return ""
        return "\n".join(text[-lines:])


def stop_in_order(groups: dict[str, int]) -> None:
    """Stop the API server and its clients together, and etcd only after them.

    The API server's graceful shutdown still writes to etcd (it removes its endpoint
    lease); with etcd already gone it hangs until it is killed.

    Args:
        groups: ``{component name: process-group id}``.
    """
    stop_process_groups({n: p for n, p in groups.items() if n != "etcd"})
    stop_process_groups({n: p for n, p in groups.items() if n == "etcd"})


@dataclass
class KubeAPI:
    """Handle on a running control plane: what tests and benchmarks need to talk to it.

    Attributes:
        kubeconfig: Path of a cluster-admin kubeconfig (certificates embedded).
        server: API server URL on 127.0.0.1.
        state_dir: Directory with certificates, etcd data and component logs.
        start_seconds: How long the control plane took to become ready.
        binary: Finds a built binary by name; the pytest plugin passes one that refuses
            binaries the running test's markers do not declare.
    """

    kubeconfig: Path
    server: str
    state_dir: Path
    start_seconds: float
    binary: Callable[[str], Path] = field(default=binary_path, repr=False, compare=False)

    def api_client(self) -> Any:
        """Return a new ``kubernetes.client.ApiClient`` bound to this control plane."""
        return new_api_client(self.kubeconfig)

    def kubectl(self, *args: str, timeout: float = 120) -> str:
        """Run the built ``kubectl`` against this control plane and return its stdout."""
        return run_kubectl(self.binary("kubectl"), self.kubeconfig, *args, timeout=timeout)


@dataclass
class ControlPlane:
    """An etcd + kube-apiserver (+ controller-manager + scheduler) instance on loopback.

    Attributes:
        state_dir: Directory for certificates, kubeconfigs, etcd data and logs.
        bin_dir: Directory holding the built binaries.
        controller_manager: Whether to run kube-controller-manager (GC, service accounts).
        scheduler: Whether to run kube-scheduler.
        tie_to_parent: Kill the processes when this Python process dies, and stop them at
            interpreter exit (fixture mode); off for ``make control-plane-up``.
        startup_timeout: Seconds to wait for the API server to become ready.
    """

    state_dir: Path
    bin_dir: Path = field(default_factory=default_bin_dir)
    controller_manager: bool = True
    scheduler: bool = True
    tie_to_parent: bool = True
    startup_timeout: float = 120.0
    components: list[Component] = field(default_factory=list)
    api_port: int = 0
    etcd_port: int = 0
    started_seconds: float = 0.0

    @property
    def kubeconfig(self) -> Path:
        """Path of the cluster-admin kubeconfig."""
        return self.state_dir / "kubeconfig"

    @property
    def server(self) -> str:
        """The API server URL."""
        return f"https://127.0.0.1:{self.api_port}"

    @property
    def pki(self) -> Path:
        """Directory holding the generated certificates and keys."""
        return self.state_dir / "pki"

    def start(self) -> ControlPlane:
        """Generate credentials, start every component and wait until the API is ready.

        Returns:
            ``self``, for chaining.

        Raises:
            ControlPlaneError: If a binary is missing or a component does not come up; any
                component already started is stopped first.
        """
        missing = missing_binaries(self.bin_dir, CONTROL_PLANE_BINARIES[:-1])
        if missing:
            raise ControlPlaneError(
                f"Missing binaries={','.join(missing)} in bin_dir={self.bin_dir}; "
                "run `make kube-binaries` (hack/kube/build.sh)"
            )
        began = time.monotonic()
        if self.tie_to_parent:
            stop_at_exit(self.stop)
        try:
            self._start()
        except BaseException:
            self.stop()
            raise
        self.started_seconds = time.monotonic() - began
        LOG.info(
            "Control plane ready seconds=%.1f server=%s kubeconfig=%s",
            self.started_seconds,
            self.server,
            self.kubeconfig,
        )
        return self

    def _start(self) -> None:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        (self.state_dir / "logs").mkdir(exist_ok=True)
        self.api_port, self.etcd_port = free_port(), free_port()
        peer_port = free_port()
        sans = (
            "DNS:localhost",
            "DNS:kubernetes",
            "DNS:kubernetes.default",
            "DNS:kubernetes.default.svc",
            f"DNS:kubernetes.default.svc.{CLUSTER_DOMAIN}",
            "IP:127.0.0.1",
            f"IP:{SERVICE_IP}",
        )
        try:
            generate_pki(
                self.pki,
                [
                    CertSpec("apiserver", "kube-apiserver", server=True, sans=sans),
                    CertSpec("admin", "snapshotjob-admin", organizations=("system:masters",)),
                    CertSpec("controller-manager", "system:kube-controller-manager"),
                    CertSpec("scheduler", "system:kube-scheduler"),
                    CertSpec("front-proxy-client", "front-proxy-client"),
                ],
            )
        except PkiError as exc:
            raise ControlPlaneError(str(exc)) from exc
        for user in ("admin", "controller-manager", "scheduler"):
            name = "kubeconfig" if user == "admin" else f"{user}.kubeconfig"
            write_kubeconfig(self.state_dir / name, self.server, self.pki, user)

        etcd_url = f"http://127.0.0.1:{self.etcd_port}"
        peer_url = f"http://127.0.0.1:{peer_port}"
        self._spawn(
            "etcd",
            [
                "--name=default",
                f"--data-dir={self.state_dir / 'etcd'}",
                f"--listen-client-urls={etcd_url}",
                f"--advertise-client-urls={etcd_url}",
                f"--listen-peer-urls={peer_url}",
                f"--initial-advertise-peer-urls={peer_url}",
                f"--initial-cluster=default={peer_url}",
                "--listen-metrics-urls=",
                "--unsafe-no-fsync=true",
                "--log-level=warn",
            ],
        )
        self._wait_for("etcd", lambda: _http_ok(f"{etcd_url}/health", None))

        pki = self.pki
        self._spawn(
            "kube-apiserver",
            [
                f"--etcd-servers={etcd_url}",
                "--bind-address=127.0.0.1",
                "--advertise-address=127.0.0.1",
                f"--secure-port={self.api_port}",
                f"--tls-cert-file={pki / 'apiserver.crt'}",
                f"--tls-private-key-file={pki / 'apiserver.key'}",
                f"--client-ca-file={pki / 'ca.crt'}",
                f"--service-account-key-file={pki / 'sa.pub'}",
                f"--service-account-signing-key-file={pki / 'sa.key'}",
                f"--service-account-issuer=https://kubernetes.default.svc.{CLUSTER_DOMAIN}",
                f"--service-cluster-ip-range={SERVICE_CIDR}",
                # Aggregation-layer settings: without them every component logs a missing
                # requestheader CA bundle, and aggregated APIs could not authenticate.
                f"--requestheader-client-ca-file={pki / 'ca.crt'}",
                "--requestheader-allowed-names=front-proxy-client",
                "--requestheader-username-headers=X-Remote-User",
                "--requestheader-group-headers=X-Remote-Group",
                "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
                "--authorization-mode=RBAC",
                "--allow-privileged=true",
                "--profiling=false",
                f"--cert-dir={pki}",
                "--v=1",
            ],
        )
        self._wait_for("kube-apiserver", self._api_ready)

        if self.controller_manager:
            cm_config = self.state_dir / "controller-manager.kubeconfig"
            self._spawn(
                "kube-controller-manager",
                [
                    f"--kubeconfig={cm_config}",
                    f"--authentication-kubeconfig={cm_config}",
                    f"--authorization-kubeconfig={cm_config}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    "--leader-elect=false",
                    "--use-service-account-credentials=true",
                    f"--service-account-private-key-file={pki / 'sa.key'}",
                    f"--root-ca-file={pki / 'ca.crt'}",
                    f"--cluster-signing-cert-file={pki / 'ca.crt'}",
                    f"--cluster-signing-key-file={pki / 'ca.key'}",
                    f"--service-cluster-ip-range={SERVICE_CIDR}",
                    "--profiling=false",
                    "--v=1",
                ],
            )
        if self.scheduler:
            self._spawn(
                "kube-scheduler",
                [
                    f"--kubeconfig={self.state_dir / 'scheduler.kubeconfig'}",
                    f"--authentication-kubeconfig={self.state_dir / 'scheduler.kubeconfig'}",
                    f"--authorization-kubeconfig={self.state_dir / 'scheduler.kubeconfig'}",
                    "--bind-address=127.0.0.1",
                    f"--secure-port={free_port()}",
                    "--leader-elect=false",
                    "--profiling=false",
                    "--v=1",
                ],
            )
        # A component that dies right away (bad flag, port race) should fail start(), not
        # the first test that needs garbage collection.
        time.sleep(0.5)
        self._check_alive()

    def _spawn(self, name: str, args: list[str]) -> None:
        log_path = self.state_dir / "logs" / f"{name}.log"
        with log_path.open("ab") as log_file:
            process = start_in_own_session(
                name,
                [str(self.bin_dir / name), *args],
                log_file,
                tie_to_parent=self.tie_to_parent,
            )
        self.components.append(Component(name, process, log_path))
        LOG.info("Started component=%s pid=%d log=%s", name, process.pid, log_path)

    def _check_alive(self) -> None:
        for comp in self.components:
            code = comp.process.poll()
            if code is not None:
                raise ControlPlaneError(
                    f"Component {comp.name} exited rc={code}; log {comp.log_path}:\n"
                    f"{comp.log_tail()}"
                )

    def _wait_for(self, name: str, probe: Callable[[], bool]) -> None:
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            self._check_alive()
            if probe():
                return
            time.sleep(0.2)
        comp = next(c for c in self.components if c.name == name)
        raise ControlPlaneError(
            f"Component {name} not ready after {self.startup_timeout:.0f}s; log "
            f"{comp.log_path}:\n{comp.log_tail()}"
        )

    def ssl_context(self) -> ssl.SSLContext:
        """Return a TLS context that trusts the testbed CA and presents the admin cert."""
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        return ctx

    def _api_ready(self) -> bool:
        return _http_ok(f"{self.server}/readyz", self.ssl_context())

    def stop(self) -> None:
        """Stop every component at once; safe to call more than once."""
        running = {c.name: c.process.pid for c in self.components if c.process.poll() is None}
        stop_in_order(running)
        for comp in self.components:
            with contextlib.suppress(subprocess.TimeoutExpired):
                comp.process.wait(timeout=1)
        self.components.clear()
        if self.tie_to_parent:
            cancel_stop_at_exit(self.stop)

    def kube_api(self, binary: Callable[[str], Path] = binary_path) -> KubeAPI:
        """Return the handle tests use on this (started) control plane.

        Args:
            binary: Finds a built binary by name (see :class:`KubeAPI`).
        """
        return KubeAPI(
            kubeconfig=self.kubeconfig,
            server=self.server,
            state_dir=self.state_dir,
            start_seconds=self.started_seconds,
            binary=binary,
        )

    def pids(self) -> dict[str, int]:
        """Return ``{component: pid}`` of the running components."""
        return {c.name: c.process.pid for c in self.components}


def _http_ok(url: str, ctx: ssl.SSLContext | None) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2, context=ctx) as resp:
            return int(resp.status) == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


# ---------------------------------------------------------------------------------------
# CLI (make control-plane-up / control-plane-down)
# ---------------------------------------------------------------------------------------


def _default_state_dir() -> Path:
    return default_bin_dir().parent / "control-plane"


def _cmd_up(state_dir: Path) -> int:
    state_file = state_dir / "state.json"
    if state_file.exists() and _alive(json.loads(state_file.read_text())["pids"]):
        print(state_dir / "kubeconfig")
        LOG.info("Control plane already running state_dir=%s", state_dir)
        return 0
    if state_dir.exists():
        shutil.rmtree(state_dir)
    bin_dir = ensure_binaries()
    plane = ControlPlane(state_dir=state_dir, bin_dir=bin_dir, tie_to_parent=False)
    plane.start()
    state = {"pids": plane.pids(), "server": plane.server, "seconds": plane.started_seconds}
    state_file.write_text(json.dumps(state, indent=2) + "\n")
    print(plane.kubeconfig)
    LOG.info(
        "Control plane up seconds=%.1f export KUBECONFIG=%s",
        plane.started_seconds,
        plane.kubeconfig,
    )
    return 0


def _alive(pids: dict[str, int]) -> bool:
    for pid in pids.values():
        try:
            os.killpg(pid, 0)
        except (ProcessLookupError, PermissionError):
            return False
    return bool(pids)


def _cmd_down(state_dir: Path) -> int:
    state_file = state_dir / "state.json"
    if not state_file.exists():
        LOG.info("No control plane recorded state_dir=%s", state_dir)
        return 0
    pids: dict[str, int] = json.loads(state_file.read_text())["pids"]
    stop_in_order(pids)
    shutil.rmtree(state_dir, ignore_errors=True)
    LOG.info("Control plane down state_dir=%s", state_dir)
    return 0


def _cmd_status(state_dir: Path) -> int:
    state_file = state_dir / "state.json"
    if not state_file.exists():
        print("down")
        return 1
    state = json.loads(state_file.read_text())
    up = _alive(state["pids"])
    print(f"{'up' if up else 'dead'} server={state['server']} kubeconfig={state_dir}/kubeconfig")
    return 0 if up else 1


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``python -m testbed.controlplane``.

    Args:
        argv: Command-line arguments (defaults to ``sys.argv[1:]``).

    Returns:
        The process exit code.
    """
    parser = argparse.ArgumentParser(
        prog="python -m testbed.controlplane",
        description=__doc__.splitlines()[0] if __doc__ else None,
    )
    parser.add_argument("command", choices=("up", "down", "status"))
    parser.add_argument("--dir", type=Path, default=None, help="state directory")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    state_dir: Path = args.dir or _default_state_dir()
    try:
        if args.command == "up":
            return _cmd_up(state_dir)
        if args.command == "down":
            return _cmd_down(state_dir)
        return _cmd_status(state_dir)
    except (ControlPlaneError, BinaryBuildError) as exc:
        LOG.error("Control plane command failed command=%s error=%s", args.command, exc)
        return 1


if __name__ == "__main__":
    sys.exit(main())
