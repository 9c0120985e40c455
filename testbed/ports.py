"""Free TCP ports on 127.0.0.1 for the test bed's servers.

Why this exists: every server the test bed starts listens on loopback only, on a port picked
at start, so two test runs (or a test run and ``make demo``) on one machine never collide.
"""

from __future__ import annotations

import random
import socket


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def free_port_run(count: int, start: int = 15701, stop: int = 16700) -> list[int]:
    """Find ``count`` consecutive free TCP ports on loopback.

    Consecutive ports keep member addresses readable; they stay fixed for the whole run so
    a restarted member comes back at the same address. The search starts at a random run:
    two test runs that start clusters at the same moment would otherwise both find the first
    run free and the second to bind would fail (seen with a benchmark beside ``make test``).

    Raises:
        RuntimeError: If no such run of ports is free in ``start..stop``.
    """
    bases = list(range(start, stop - count + 1, count))
    first = random.randrange(len(bases))
    for base in bases[first:] + bases[:first]:
        ports = list(range(base, base + count))
        if all(port_free(p) for p in ports):
            return ports
    raise RuntimeError(f"No {count} consecutive free ports in {start}..{stop}")


def port_free(port: int) -> bool:
    """Whether ``port`` on 127.0.0.1 can be bound (a port in TIME_WAIT counts as free)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # Members bind with SO_REUSEADDR, so a port in TIME_WAIT from a previous run is free.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True
