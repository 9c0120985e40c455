"""Whether a job's executors reach the snapshot store: checked before the restore, on Kubernetes.

Executors write and read state chunks in the store themselves, so a NetworkPolicy that keeps
them out of the members' port (one of the namespace's own, or the chart's when an executor
lacks the store's label) would surface as a snapshot or a restore failing after the clients'
connect timeouts, with a Spark stack trace that names neither the executors nor a policy. The
driver reaches the store before it asks (it has connected already), so executors that cannot
are told apart: a few tasks each try a TCP connection to every member, and any refused one
ends the execution with a message naming the executor, the member and the likely cause
(:func:`unreached_message`). The driver exits 69, restarted with a backoff and bounded by
the restart policy, so a policy fixed meanwhile lets the next execution run.
"""

from __future__ import annotations

import logging
import socket
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from functools import partial

from pyspark.sql import SparkSession

from snapshotjob_contract.pods import LABEL_STORE

_log = logging.getLogger(__name__)

CONNECT_TIMEOUT_S = 5.0
"""How long one executor waits for one member's TCP handshake (a dropped SYN waits it all)."""
WAIT_S = 120.0
"""How long the check waits for executors to run it; then it gives up without a verdict:
executors that do not start are the operator's ExecutorsNotStarting condition."""


@dataclass(frozen=True)
class Unreached:
    """One member an executor could not connect to."""

    executor: str
    member: str
    error: str


def try_members(members: Sequence[str], timeout_s: float, _task: object = None) -> list[Unreached]:
    """Connects to every ``host:port`` once; returns the ones that failed (runs on executors)."""
    here = socket.gethostname()
    failed: list[Unreached] = []
    for member in members:
        host, _, port = member.rpartition(":")
        try:
            socket.create_connection((host, int(port)), timeout=timeout_s).close()
        except OSError as error:
            failed.append(Unreached(here, member, f"{type(error).__name__}: {error}"))
    return failed


def executors_unreached(
    spark: SparkSession,
    members: Sequence[str],
    tasks: int,
    *,
    timeout_s: float = CONNECT_TIMEOUT_S,
    wait_s: float = WAIT_S,
) -> list[Unreached] | None:
    """The members the executors could not connect to (empty: all reached); None when no
    verdict came within ``wait_s`` (the executors did not run the tasks).

    Args:
        spark: The driver's session.
        members: The store's ``host:port`` addresses, as the executors get them.
        tasks: How many tasks try, spread over the executors (at least one each, ideally).
        timeout_s: One connection's timeout.
        wait_s: How long to wait for the tasks.
    """
    context = spark.sparkContext
    group = f"sj-store-reach-{uuid.uuid4().hex[:8]}"
    found: list[list[Unreached]] = []

    def check() -> None:
        context.setJobGroup(group, "Executors reach the snapshot store", interruptOnCancel=True)
        rdd = context.parallelize(range(tasks), tasks)
        found.append(rdd.flatMap(partial(try_members, list(members), timeout_s)).collect())

    thread = threading.Thread(target=check, name="store-reach", daemon=True)
    thread.start()
    thread.join(wait_s)
    if thread.is_alive():
        context.cancelJobGroup(group)
        thread.join(10.0)
        _log.warning("Executors did not check the store waitedSeconds=%.0f", wait_s)
        return None
    return found[0] if found else None


def unreached_message(unreached: Sequence[Unreached]) -> str:
    """What the job's condition and Event say: who cannot reach what, and what to look at.

    Short (under 400 characters for a store's usual member names): the operator passes on
    only the end of a longer driver message, and the opening must survive.
    """
    first = unreached[0]
    host, _, port = first.member.rpartition(":")
    # A member's first DNS label names its Pod; the rest is the Service and namespace.
    member = f"{host if _is_ip(host) else host.split('.')[0]}:{port}"
    executors = len({u.executor for u in unreached})
    return (
        f"The executors cannot reach the snapshot store, though the driver does: "
        f"{len(unreached)} connections from {executors} executor(s) failed, e.g. to {member}: "
        f"{first.error[:48]}. A NetworkPolicy probably keeps them out: look for one "
        f"selecting spark-role=executor or limiting their egress; the chart's admits Pods "
        f"labelled {LABEL_STORE}"
    )


def _is_ip(host: str) -> bool:
    return host.replace(".", "").isdigit() or ":" in host
