"""Proof that the test bed's network partitions are real: cuts drop traffic, heals restore it.

Later partition tests trust these: that a cut between two groups of hosts silences exactly
those links (and leaves the pytest process's view alone), that a Hazelcast cluster really
splits and merges across a cut, that what runs in a host dies with pytest, and that nothing
of a network is left after its run, however the run ended.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from testbed.hazelcast import HazelcastCluster
from testbed.netns import ROOT, Host, Network, sweep_leftovers
from testbed.processes import ManagedProcess, wait_until
from tests.fixtures.netns import NetworkFactory

pytestmark = pytest.mark.integration
log = logging.getLogger(__name__)

REPO = Path(__file__).resolve().parents[2]
ECHO_PORT = 7007
# Answers each connection with its first line, then closes it.
ECHO_SERVER = f"""
import socket
server = socket.create_server(("0.0.0.0", {ECHO_PORT}), reuse_port=True)
while True:
    conn, _ = server.accept()
    with conn:
        conn.sendall(conn.recv(100))
"""
# Prints "ok" or the error for one echo to argv[1]; then the median connect time in ms of
# argv[2] more connects (0 for none).
ECHO_CLIENT = f"""
import socket, statistics, sys, time
def echo():
    with socket.create_connection((sys.argv[1], {ECHO_PORT}), timeout=2) as conn:
        conn.sendall(b"ping")
        return conn.recv(100)
try:
    print("ok" if echo() == b"ping" else "bad answer")
except OSError as exc:
    print(type(exc).__name__)
    raise SystemExit
times = []
for _ in range(int(sys.argv[2])):
    start = time.monotonic()
    socket.create_connection((sys.argv[1], {ECHO_PORT}), timeout=5).close()
    times.append((time.monotonic() - start) * 1000)
print(statistics.median(times) if times else 0)
"""


def _child_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{REPO}:{REPO / 'operator'}"}


def _start_echo(host: Host, tmp_path: Path) -> ManagedProcess:
    proc = host.process(
        f"echo-{host.name}", [sys.executable, "-c", ECHO_SERVER], tmp_path / f"echo-{host.name}.log"
    )
    proc.start()
    wait_until(lambda: _root_echo(host) == "ok", 15, f"the echo server in {host.name}")
    return proc


def _root_echo(host: Host) -> str:
    """Echo once from the pytest process to ``host``: "ok" or the error's name."""
    try:
        with socket.create_connection((host.ip, ECHO_PORT), timeout=2) as conn:
            conn.sendall(b"ping")
            return "ok" if conn.recv(100) == b"ping" else "bad answer"
    except OSError as exc:
        return type(exc).__name__


def _echo(source: Host, target: Host, timed_connects: int = 0) -> tuple[str, float]:
    """Echo once from inside ``source`` to ``target``; then time connects (median ms)."""
    out = source.run(
        [sys.executable, "-c", ECHO_CLIENT, target.ip, str(timed_connects)]
    ).splitlines()
    return out[0], float(out[1]) if len(out) > 1 else 0.0


def test_cut_and_heal_between_groups(network: Network, tmp_path: Path) -> None:
    h0, h1, h2 = network["h0"], network["h1"], network["h2"]
    for host in (h0, h1, h2):
        _start_echo(host, tmp_path)
    assert _echo(h0, h1)[0] == "ok"
    assert _echo(h2, h0)[0] == "ok"

    network.cut([h0], [h1, h2])
    started = time.monotonic()
    assert _echo(h0, h1)[0] == "TimeoutError"
    assert _echo(h1, h0)[0] == "TimeoutError"
    assert _echo(h2, h0)[0] == "TimeoutError"
    assert time.monotonic() - started < 15
    assert _echo(h1, h2)[0] == "ok", "a cut between two groups split one of them"
    assert [_root_echo(h) for h in (h0, h1, h2)] == ["ok"] * 3, "the pytest process was cut"

    network.heal([h0], [h2])
    assert _echo(h0, h2)[0] == "ok"
    assert _echo(h0, h1)[0] == "TimeoutError"

    network.cut([ROOT], [h1])
    assert _root_echo(h1) == "TimeoutError"
    assert _root_echo(h2) == "ok"

    network.heal()
    assert _echo(h0, h1)[0] == "ok"
    assert _echo(h1, h0)[0] == "ok"
    assert _root_echo(h1) == "ok"


def test_isolate_silences_a_host(network: Network, tmp_path: Path) -> None:
    h0, h1 = network["h0"], network["h1"]
    _start_echo(h0, tmp_path)
    _start_echo(h1, tmp_path)
    network.isolate(h0)
    assert _root_echo(h0) == "TimeoutError"
    assert _echo(h1, h0)[0] == "TimeoutError"
    assert _root_echo(h1) == "ok"
    network.heal()
    assert _root_echo(h0) == "ok"


def test_impairment_delays_and_loses(network: Network, tmp_path: Path) -> None:
    h0, h1 = network["h0"], network["h1"]
    _start_echo(h1, tmp_path)
    _, before_ms = _echo(h0, h1, timed_connects=15)

    network.impair(h1, delay_ms=100)
    answer, after_ms = _echo(h0, h1, timed_connects=15)
    assert answer == "ok"
    # A connect is one round trip: h1's SYN-ACK waits 100 ms.
    log.info("Connect times before_ms=%.1f delayed_ms=%.1f", before_ms, after_ms)
    assert 80 <= after_ms - before_ms <= 180, (before_ms, after_ms)

    network.impair(h1, delay_ms=0, loss_percent=100)
    assert _echo(h0, h1)[0] == "TimeoutError"
    assert _root_echo(h1) == "TimeoutError"

    network.clear_impairment(h1)
    answer, cleared_ms = _echo(h0, h1, timed_connects=15)
    assert answer == "ok"
    assert cleared_ms < before_ms + 50, (before_ms, cleared_ms)


def test_process_in_a_host_dies_with_its_parent(network: Network, tmp_path: Path) -> None:
    """The parent-death signal set before ``ip netns exec`` survives its exec."""
    host = network["h2"]
    pid_file = tmp_path / "pid"
    parent_script = f"""
import time
from pathlib import Path
from testbed.netns import Host
host = Host({host.name!r}, {host.namespace!r}, {host.ip!r})
proc = host.process("sleeper", ["sleep", "600"], Path({str(tmp_path / "sleeper.log")!r}))
proc.start()
Path({str(pid_file)!r}).write_text(str(proc.pid))
time.sleep(600)
"""
    parent = subprocess.Popen([sys.executable, "-c", parent_script], env=_child_env())
    try:
        wait_until(pid_file.exists, 15, "the parent to start its child")
        child = int(pid_file.read_text())
        wait_until(
            lambda: os.readlink(f"/proc/{child}/exe").endswith("sleep"), 5, "the child's exec"
        )
        in_namespace = os.stat(f"/proc/{child}/ns/net").st_ino
        assert in_namespace == os.stat(f"/run/netns/{host.namespace}").st_ino
    finally:
        parent.kill()
        parent.wait()
    wait_until(lambda: not Path(f"/proc/{child}").exists(), 10, "the child to die with its parent")


def test_destroy_leaves_nothing(network_factory: NetworkFactory, tmp_path: Path) -> None:
    network = network_factory(["a", "b"])
    _start_echo(network["a"], tmp_path)
    network.cut(["a"], ["b"])
    network.impair("b", delay_ms=50, loss_percent=10)
    network.destroy()
    network.destroy()
    assert not _leftovers(network.prefix)
    assert not any(p.running() for h in network.hosts.values() for p in h.processes)


def _leftovers(prefix: str) -> list[str]:
    """Namespaces, root links and temporary folders whose names hold ``prefix``."""
    namespaces = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    folders = "\n".join(p.name for p in Path(tempfile.gettempdir()).glob(f"{prefix}*"))
    return [line for line in (namespaces + links + folders).splitlines() if prefix in line]


_OWNER_SCRIPT = """
import sys, time
from testbed.netns import Network
network = Network.create(["a", "b"])
print(network.prefix, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("ending", ["SIGKILL", "SIGTERM"])
def test_dead_runs_leave_nothing(ending: str) -> None:
    """SIGTERM: the run cleans up itself. SIGKILL: the next run's sweep removes its network."""
    owner = subprocess.Popen(
        [sys.executable, "-c", _OWNER_SCRIPT], env=_child_env(), stdout=subprocess.PIPE, text=True
    )
    assert owner.stdout is not None
    prefix = owner.stdout.readline().strip()
    assert prefix.startswith(f"sj{owner.pid}x"), prefix
    names = {f"{prefix}hub", f"{prefix}a", f"{prefix}b", f"{prefix}r"}
    assert len(_leftovers(prefix)) == len(names) + 1  # and the folder for delay logs
    assert not names & set(sweep_leftovers()), "the sweep removed a live run's network"

    owner.send_signal(getattr(signal, ending))
    owner.wait(15)
    if ending == "SIGKILL":
        assert len(_leftovers(prefix)) == len(names) + 1
        assert names <= set(sweep_leftovers())
    assert not _leftovers(prefix)


def test_hazelcast_splits_across_a_cut_and_merges_after_heal(
    network: Network, tmp_path: Path
) -> None:
    cluster = HazelcastCluster(
        tmp_path,
        size=3,
        heap="256m",
        hosts=[network["h0"], network["h1"], network["h2"]],
        max_no_heartbeat_seconds=10,
    )
    try:
        cluster.start()
        assert cluster.members() == sorted(f"{network[h].ip}:5701" for h in ("h0", "h1", "h2"))
        assert cluster.owner_index(cluster.client(), "key") in (0, 1, 2)

        network.cut(["h0"], ["h1", "h2"])
        started = time.monotonic()
        wait_until(
            lambda: [(cluster.health(i) or {}).get("clusterSize") for i in range(3)] == [1, 2, 2],
            90,
            "the cluster to split 1 | 2",
            interval=0.5,
        )
        split = time.monotonic() - started

        network.heal()
        started = time.monotonic()
        cluster.wait_cluster_safe(expected_size=3, timeout=180)
        merged = time.monotonic() - started
        log.info("Hazelcast across a cut split_s=%.1f merge_s=%.1f", split, merged)
        assert cluster.members() == sorted(m.address for m in cluster.nodes)
    finally:
        cluster.stop()
