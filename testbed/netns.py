"""Real network partitions for the tests: hosts in network namespaces on a private bridge.

SIGSTOP hangs a process, it does not partition a network: the hung member's peers still
see its TCP connections open, and nothing on either side goes on running. Partition tests
need the real thing, so this module puts each "host" (a Hazelcast member, a driver, an API
server) into a network namespace of its own and lets a test cut and heal links between any
two groups of hosts, or slow a host's link down, while the processes keep running.

What a :class:`Network` looks like (``P`` is the run's prefix, e.g. ``sj4711x3fa-``)::

    root namespace (pytest)          namespace P+"hub"              namespace P+"h0"
    P+"r" 10.123.N.1/24  <--veth-->  "root" -+
                                            br0 -- "v0" <--veth-->  eth0 10.123.N.10/24
                                            |  -- "v1" <--veth-->   (namespace P+"h1") ...

Why the bridge lives in a namespace of its own rather than in the root namespace: this
machine loads ``br_netfilter`` with ``bridge-nf-call-iptables=1`` and Docker sets the root
``FORWARD`` policy to ``DROP``, so frames bridged in the root namespace would pass (and be
dropped by) the root firewall, and making them pass would mean touching that firewall. In
the hub namespace the bridge sees an empty firewall. The root namespace keeps one veth end
with the subnet's ``.1`` address: the pytest process reaches every host directly on the
link (no routing, no forwarding, no NAT), and traffic of the run never leaves the run's
namespaces and that one link.

Faults live in the hub, the network's switch: its firewall's ``FORWARD`` chain sees every
bridged frame (``bridge-nf-call-iptables``), and is rewritten atomically with
``iptables-restore`` from the network's state on every change. Neither the root namespace's
rules nor the hosts' are touched. A cut drops, it does not reject: a partitioned peer is
silent, as in a real partition, and connects time out on both sides (a ``DROP`` in a
host's own ``OUTPUT`` chain would instead fail the sender's ``send`` at once with
``EPERM``). Impairments apply to what a host sends: loss is an iptables ``statistic``
match, and delay an ``NFQUEUE`` served by :mod:`testbed.netdelay` in the hub, because this
machine's kernel has no ``sch_netem`` (``tc qdisc ... netem`` fails with "Specified qdisc
kind is unknown").

Clean-up, in three layers like :mod:`testbed.processes`: :meth:`Network.destroy` (the
fixture's teardown, idempotent); :func:`~testbed.processes.stop_at_exit` with the SIGTERM
handler for an interrupted or terminated pytest; and for a pytest killed outright,
:func:`sweep_leftovers`, which removes what runs whose owning pid is dead left behind (the
prefix carries the pid). A namespace lives on while a process is inside it, so destroying
kills the processes in a namespace before deleting it.
"""

from __future__ import annotations

import contextlib
import fcntl
import ipaddress
import logging
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from testbed.processes import (
    ManagedProcess,
    cancel_stop_at_exit,
    pid_alive,
    stop_at_exit,
    wait_until,
)

log = logging.getLogger(__name__)

DEFAULT_PREFIX = "sj"
ROOT = "root"
"""The name of the root namespace (the pytest process) in :meth:`Network.cut` groups."""

IP = "/usr/sbin/ip"
IPTABLES_RESTORE = "/usr/sbin/iptables-restore"
SYSCTL = "/usr/sbin/sysctl"
NETDELAY = Path(__file__).with_name("netdelay.py")
# Cuts and impairments are IPv4 rules: IPv6 (link-local addresses come by themselves) is off
# in the run's namespaces, so no traffic can go round them.
NO_IPV6 = ["net.ipv6.conf.all.disable_ipv6=1", "net.ipv6.conf.default.disable_ipv6=1"]
# Private /24s are taken from this /16, away from Docker (172.17/16), kind (172.18/16),
# flannel (10.244/16) and Kubernetes' default service range (10.96/12).
SUBNET_POOL = ipaddress.IPv4Network("10.123.0.0/16")
RESERVED = [ipaddress.IPv4Network(n) for n in ("172.17.0.0/16", "172.18.0.0/16", "10.244.0.0/16")]
_LOCK_PATH = Path("/tmp/sj-netns.lock")
_HOST_NAME = re.compile(r"^[a-z][a-z0-9]{0,7}$")
_IFNAMSIZ = 15


def _run(argv: Sequence[str], *, stdin: str | None = None, check: bool = True) -> str:
    """Run a short command and return its stdout; raise with its stderr on failure."""
    result = subprocess.run(
        list(argv), input=stdin, capture_output=True, text=True, timeout=30, check=False
    )
    if check and result.returncode != 0:
        raise RuntimeError(
            f"Command failed rc={result.returncode}: {' '.join(argv)}: {result.stderr.strip()}"
        )
    return result.stdout


@dataclass
class Host:
    """One host of a :class:`Network`: a network namespace with one address.

    Attributes:
        name: The host's short name in the network, e.g. ``h0``.
        namespace: The network namespace's name (``ip netns``), carrying the run's prefix.
        ip: The host's address on the network's /24.
        interface: The host's one link, to the hub's bridge.
        processes: Processes started in the host through :meth:`process`.
    """

    name: str
    namespace: str
    ip: str
    interface: str = "eth0"
    processes: list[ManagedProcess] = field(default_factory=list, compare=False, repr=False)

    def argv(self, command: Sequence[str]) -> list[str]:
        """``command`` run inside this host: ``ip netns exec`` execs it in place (no fork).

        So the pid of the started process is the command's own, and a parent-death signal
        set before the ``exec`` stays with it.
        """
        return [IP, "netns", "exec", self.namespace, *command]

    def run(self, command: Sequence[str], *, check: bool = True) -> str:
        """Run a short command inside this host and return its stdout."""
        return _run(self.argv(command), check=check)

    def process(
        self,
        name: str,
        command: Sequence[str],
        log_path: Path,
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ) -> ManagedProcess:
        """A :class:`~testbed.processes.ManagedProcess` (not started) that runs in this host.

        It keeps every guarantee of one started on the root namespace: own session,
        SIGKILL when pytest dies, stopped at exit; and :meth:`Network.destroy` kills it.
        """
        proc = ManagedProcess(name, self.argv(command), log_path, env=env, cwd=cwd)
        self.processes.append(proc)
        return proc


class Network:
    """A run's private network: a bridge, hosts on it, and link faults between them.

    Build one with :meth:`create`; always :meth:`destroy` it (it is also destroyed at exit).
    """

    def __init__(self, prefix: str, subnet: ipaddress.IPv4Network, hosts: list[Host]) -> None:
        self.prefix = prefix
        self.subnet = subnet
        self.hosts = {h.name: h for h in hosts}
        self.hub_namespace = f"{prefix}hub"
        self.root_link = f"{prefix}r"
        self.root_ip = str(subnet.network_address + 1)
        self._hub = Host("hub", self.hub_namespace, "")
        self._cuts: set[frozenset[str]] = set()
        self._loss: dict[str, float] = {}
        self._delays: dict[str, ManagedProcess] = {}
        self._workdir = Path(tempfile.mkdtemp(prefix=f"{prefix}logs-"))
        self._destroyed = False

    # --- lifecycle ------------------------------------------------------------------------

    @classmethod
    def create(cls, hosts: Iterable[str], *, prefix: str = DEFAULT_PREFIX) -> Network:
        """Create the namespaces, links and addresses for ``hosts``.

        Args:
            hosts: Short host names (lower-case letters and digits, at most 8), e.g.
                ``["h0", "h1", "h2"]``.
            prefix: The start of every name the run creates; the pid of this process and a
                random part follow, so :func:`sweep_leftovers` can tell dead runs' leftovers.

        Returns:
            The network, up, with the root namespace able to reach every host.

        Raises:
            ValueError: On a bad or repeated host name, or a prefix too long for link names.
            RuntimeError: If a command fails (the partial network is removed first).
        """
        names = list(hosts)
        if len(set(names)) != len(names) or not names:
            raise ValueError(f"Host names must be unique and not empty: {names}")
        for name in names:
            if not _HOST_NAME.match(name) or name in (ROOT, "hub"):
                raise ValueError(f"Bad host name {name!r}: want [a-z][a-z0-9]{{0,7}}")
        if len(names) > 200:
            raise ValueError("At most 200 hosts fit the address plan")
        run_prefix = f"{prefix}{os.getpid()}x{secrets.token_hex(2)[:3]}-"
        if len(run_prefix) + 1 > _IFNAMSIZ:
            raise ValueError(f"Prefix {prefix!r} leaves no room in a link name")
        _LOCK_PATH.touch(exist_ok=True)
        with _LOCK_PATH.open() as lock:
            # Held from picking the subnet until its route exists, so that two runs starting
            # together cannot pick the same /24.
            fcntl.flock(lock, fcntl.LOCK_EX)
            subnet = _free_subnet()
            host_list = [
                Host(name, f"{run_prefix}{name}", str(subnet.network_address + 10 + i))
                for i, name in enumerate(names)
            ]
            network = cls(run_prefix, subnet, host_list)
            stop_at_exit(network.destroy, also_on_sigterm=True)
            try:
                network._build()
            except BaseException:
                network.destroy()
                raise
        log.info(
            "Network created prefix=%s subnet=%s hosts=%s",
            run_prefix,
            subnet,
            {h.name: h.ip for h in host_list},
        )
        return network

    def _build(self) -> None:
        hub = self.hub_namespace

        def ip(command: str) -> None:  # names and addresses hold no spaces
            _run([IP, *command.split()])

        ip(f"netns add {hub}")
        # Bridged frames pass the hub's FORWARD chain, where the faults are.
        self._hub.run([SYSCTL, "-qw", "net.bridge.bridge-nf-call-iptables=1", *NO_IPV6])
        ip(f"-n {hub} link add br0 type bridge")
        ip(f"-n {hub} link set br0 up")
        self._apply_rules()
        ip(f"link add {self.root_link} type veth peer name root netns {hub}")
        ip(f"-n {hub} link set dev root master br0 up")
        ip(f"addr add {self.root_ip}/{self.subnet.prefixlen} dev {self.root_link}")
        ip(f"link set {self.root_link} up")
        for index, host in enumerate(self.hosts.values()):
            ns, eth = host.namespace, host.interface
            ip(f"netns add {ns}")
            host.run([SYSCTL, "-qw", *NO_IPV6])
            ip(f"-n {hub} link add v{index} type veth peer name {eth} netns {ns}")
            ip(f"-n {hub} link set v{index} master br0 up")
            ip(f"-n {ns} addr add {host.ip}/{self.subnet.prefixlen} dev {eth}")
            ip(f"-n {ns} link set {eth} up")
            ip(f"-n {ns} link set lo up")

    def destroy(self) -> None:
        """Kill the hosts' processes and remove every namespace and link; idempotent."""
        if self._destroyed:
            return
        self._destroyed = True
        cancel_stop_at_exit(self.destroy)
        for host in [*self.hosts.values(), self._hub]:
            for proc in host.processes:
                proc.kill()
        shutil.rmtree(self._workdir, ignore_errors=True)
        namespaces = [h.namespace for h in self.hosts.values()] + [self.hub_namespace]
        _remove(namespaces, [self.root_link])
        log.info("Network destroyed prefix=%s", self.prefix)

    # --- faults ---------------------------------------------------------------------------

    def cut(self, group_a: Iterable[Host | str], group_b: Iterable[Host | str]) -> None:
        """Drop all traffic between every host of ``group_a`` and every host of ``group_b``.

        Either group may hold :data:`ROOT` to cut hosts off from the pytest process (the
        rules then live in the hosts only). Cuts add up; :meth:`heal` removes them.
        """
        a, b = self._names(group_a), self._names(group_b)
        self._cuts |= {frozenset((x, y)) for x in a for y in b if x != y}
        self._apply_rules()
        log.info("Network cut prefix=%s a=%s b=%s", self.prefix, sorted(a), sorted(b))

    def heal(
        self,
        group_a: Iterable[Host | str] | None = None,
        group_b: Iterable[Host | str] | None = None,
    ) -> None:
        """Remove the cuts between two groups, or with no arguments every cut (root's too)."""
        if group_a is None and group_b is None:
            self._cuts.clear()
        elif group_a is None or group_b is None:
            raise ValueError("Give both groups, or neither to heal every cut")
        else:
            a, b = self._names(group_a), self._names(group_b)
            self._cuts -= {frozenset((x, y)) for x in a for y in b}
        self._apply_rules()
        log.info("Network healed prefix=%s cuts_left=%d", self.prefix, len(self._cuts))

    def isolate(self, host: Host | str) -> None:
        """Cut ``host`` off from every other host and from the pytest process."""
        name = self._names([host])
        self.cut(name, set(self.hosts) - name | {ROOT})

    def impair(
        self, host: Host | str, delay_ms: float, loss_percent: float = 0.0, jitter_ms: float = 0.0
    ) -> None:
        """Delay and lose what ``host`` sends (to hosts and to the pytest process).

        A round trip to the host grows by ``delay_ms``; each packet it sends is lost with
        probability ``loss_percent`` / 100. Replaces an earlier impairment of the host.

        Args:
            host: The host.
            delay_ms: Added one-way delay of each packet the host sends; 0 for none.
            loss_percent: Share of the host's packets dropped, 0 to 100.
            jitter_ms: Each packet's delay varies uniformly by up to this much either way
                (packets may then be reordered, as with netem).
        """
        target = self._host(host)
        if not 0 <= loss_percent <= 100 or delay_ms < 0 or jitter_ms < 0:
            raise ValueError(f"Bad impairment delay={delay_ms} loss={loss_percent}")
        self._stop_delay(target.name)
        self._loss[target.name] = loss_percent
        if delay_ms or jitter_ms:
            queue = self._queue(target.name)
            log_path = self._workdir / f"delay-{target.name}.log"
            proc = self._hub.process(
                f"netdelay-{target.name}",
                [sys.executable, str(NETDELAY), str(queue), str(delay_ms), str(jitter_ms)],
                log_path,
            )
            proc.start()
            self._delays[target.name] = proc
            wait_until(
                lambda: "bound" in log_path.read_text() or not proc.running(),
                10,
                f"the delay of {target.name} to bind its queue",
            )
            if not proc.running():
                raise RuntimeError(f"Delay of {target.name} failed:\n{proc.log_tail()}")
        self._apply_rules()
        log.info(
            "Network impaired host=%s delay_ms=%s jitter_ms=%s loss_percent=%s",
            target.name,
            delay_ms,
            jitter_ms,
            loss_percent,
        )

    def clear_impairment(self, host: Host | str) -> None:
        """Remove ``host``'s impairment (none is fine)."""
        target = self._host(host)
        self._loss.pop(target.name, None)
        self._apply_rules()
        self._stop_delay(target.name)

    def _stop_delay(self, name: str) -> None:
        proc = self._delays.pop(name, None)
        if proc is not None:
            proc.kill()
            self._hub.processes.remove(proc)

    def _queue(self, name: str) -> int:
        return list(self.hosts).index(name) + 1

    # --- helpers --------------------------------------------------------------------------

    def __getitem__(self, name: str) -> Host:
        return self.hosts[name]

    def _host(self, host: Host | str) -> Host:
        return self.hosts[host if isinstance(host, str) else host.name]

    def _names(self, group: Iterable[Host | str]) -> set[str]:
        names = {h if isinstance(h, str) else h.name for h in group}
        unknown = names - set(self.hosts) - {ROOT}
        if unknown:
            raise KeyError(f"Not hosts of this network: {sorted(unknown)}")
        return names

    def _ip(self, name: str) -> str:
        return self.root_ip if name == ROOT else self.hosts[name].ip

    def _apply_rules(self) -> None:
        """Rewrite the hub's firewall from the cuts and impairments, atomically."""
        lines = [
            "*filter",
            ":INPUT ACCEPT [0:0]",
            ":FORWARD ACCEPT [0:0]",
            ":OUTPUT ACCEPT [0:0]",
            ":sj-cut - [0:0]",
            ":sj-impair - [0:0]",
            "-A FORWARD -j sj-cut",
            "-A FORWARD -j sj-impair",
        ]
        for pair in sorted(sorted(p) for p in self._cuts):
            x, y = (self._ip(n) for n in pair)
            lines += [f"-A sj-cut -s {x}/32 -d {y}/32 -j DROP"]
            lines += [f"-A sj-cut -s {y}/32 -d {x}/32 -j DROP"]
        for name, loss in sorted(self._loss.items()):
            if loss:
                lines.append(
                    f"-A sj-impair -s {self._ip(name)}/32 -m statistic --mode random "
                    f"--probability {loss / 100:.6f} -j DROP"
                )
        for name in sorted(self._delays):
            lines.append(
                f"-A sj-impair -s {self._ip(name)}/32 -j NFQUEUE "
                f"--queue-num {self._queue(name)} --queue-bypass"
            )
        lines.append("COMMIT")
        _run(self._hub.argv([IPTABLES_RESTORE]), stdin="\n".join(lines) + "\n")


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of :data:`SUBNET_POOL` that overlaps no route or address of this machine."""
    taken = [*RESERVED]
    for line in _run([IP, "-4", "-o", "route", "show", "table", "all"]).splitlines():
        words = line.split()
        if words and words[0] in ("local", "broadcast", "unicast", "multicast", "anycast"):
            words = words[1:]
        if not words or words[0] == "default":
            continue
        with contextlib.suppress(ValueError):
            taken.append(ipaddress.IPv4Network(words[0], strict=False))
    candidates = list(SUBNET_POOL.subnets(new_prefix=24))
    start = secrets.randbelow(len(candidates))
    for subnet in candidates[start:] + candidates[:start]:
        if not any(subnet.overlaps(t) for t in taken):
            return subnet
    raise RuntimeError(f"No free /24 left in {SUBNET_POOL}")


def _namespaces() -> list[str]:
    """Names of the machine's named network namespaces."""
    return [line.split()[0] for line in _run([IP, "netns", "list"]).splitlines() if line.strip()]


def _root_links() -> list[str]:
    """Names of the root namespace's links (without the ``@peer`` part)."""
    names = []
    for line in _run([IP, "-o", "link", "show"]).splitlines():
        parts = line.split(":", 2)
        if len(parts) >= 2:
            names.append(parts[1].strip().split("@")[0])
    return names


def _remove(namespaces: list[str], links: list[str], timeout: float = 15.0) -> None:
    """Kill what runs in ``namespaces``, delete them and ``links``, wait until both are gone.

    The kernel tears a namespace down asynchronously, its veth ends with it; waiting makes
    "destroyed" mean gone.
    """
    existing = set(_namespaces())
    for ns in namespaces:
        if ns not in existing:
            continue
        for pid in _run([IP, "netns", "pids", ns], check=False).split():
            with contextlib.suppress(ProcessLookupError, ValueError):
                os.kill(int(pid), signal.SIGKILL)
    for link in links:
        _run([IP, "link", "del", link], check=False)
    for ns in namespaces:
        if ns in existing:
            _run([IP, "netns", "del", ns], check=False)
    wanted_ns, wanted_links = set(namespaces), set(links)
    try:
        wait_until(
            lambda: not (wanted_ns & set(_namespaces()) or wanted_links & set(_root_links())),
            timeout,
            f"namespaces {sorted(wanted_ns)} and links {sorted(wanted_links)} to go",
            interval=0.1,
        )
    except TimeoutError as exc:
        log.warning("Network leftovers remain error=%s", exc)


def sweep_leftovers(prefix: str = DEFAULT_PREFIX) -> list[str]:
    """Remove the namespaces, root links and log folders of runs whose owner is dead.

    Args:
        prefix: The ``prefix`` the runs were created with; names look like
            ``<prefix><pid>x<random>-<rest>``.

    Returns:
        The names removed (namespaces, links and folders).
    """
    pattern = re.compile(rf"^{re.escape(prefix)}(\d+)x[0-9a-f]+-")

    def dead(name: str) -> bool:
        match = pattern.match(name)
        return match is not None and not pid_alive(int(match.group(1)))

    namespaces = [ns for ns in _namespaces() if dead(ns)]
    links = [link for link in _root_links() if dead(link)]
    folders = [p for p in Path(tempfile.gettempdir()).glob(f"{prefix}*-logs-*") if dead(p.name)]
    if namespaces or links or folders:
        log.warning(
            "Sweeping network leftovers of dead runs names=%s",
            namespaces + links + [p.name for p in folders],
        )
        _remove(namespaces, links)
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)
    return namespaces + links + [p.name for p in folders]
