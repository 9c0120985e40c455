"""What a driver runs with and how it hears the world: settings, requests, stop signals.

Why a module of its own: the modes (:mod:`spark_runtime.local_mode`,
:mod:`spark_runtime.kube_mode`) build these from a command line or a SnapshotJob, and the
driver's loop (:mod:`spark_runtime.driver`) consumes them; neither needs the other's code to
say what a setting or a request is. :mod:`spark_runtime.driver` re-exports every name here.
"""

from __future__ import annotations

import logging
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import FrameType
from typing import Protocol, runtime_checkable

from snapshot_protocol import ExportIdentity, JobIdentity, TerminationRequest
from snapshot_protocol.incremental import ChainPolicy
from snapshot_protocol.signing import SnapshotKeys
from snapshotjob_contract.environment import (
    ENV_SNAPSHOT_ACCEPT_UNSIGNED,
    ENV_SNAPSHOT_KEY_IDS,
    ENV_SNAPSHOT_KEY_PREFIX,
)
from snapshotjob_contract.exits import EXIT_REPORT_AFTER_SIGNAL_SECONDS
from snapshotjob_contract.spec import (
    ExpiredOffsetsPolicy,
    ProcessingGuarantee,
    SnapshotChainsSpec,
    StallDetectionSpec,
)
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.durable import DurableStorage

# The driver's own messages have always come from this logger, whichever module logs them.
_log = logging.getLogger("spark_runtime.driver")

TerminationPoll = Callable[[], TerminationRequest | None]


@dataclass(frozen=True)
class ExportRequest:
    """The operator's request for an export-only snapshot (``status.exportRequest``).

    Attributes:
        name: The export name.
        request_id: Unique id of the request; each is served once.
    """

    name: str
    request_id: str


ExportPoll = Callable[[], ExportRequest | None]
PublishExport = Callable[[ExportedSnapshot], None]
"""Reports a successful export; may raise ZombieExecution, other errors are logged."""


@runtime_checkable
class PipelineStartReporter(Protocol):
    """A record store that can tell the operator the pipeline runs (``status.pipelineStarted``)."""

    def report_pipeline_started(self) -> None:
        """Reports, fenced by the execution id, that this execution's pipeline runs.

        Raises:
            ZombieExecution: If the job belongs to another execution.
            RecordStoreError: If the report could not be written.
        """
        ...


@dataclass(frozen=True)
class DriverSettings:
    """How one job runs.

    Attributes:
        job: Names the snapshot maps and sink transactions.
        guarantee: The processing guarantee.
        snapshot_interval_ms: From the end of one snapshot to the start of the next.
        state_partitions: The fixed number of keyed state partitions.
        store: The snapshot store executors write to.
        idle_sleep_s: Pause when no source has new data.
        suspend_on_failure: Suspend instead of failing (``spec.suspendOnFailure``).
        initial_snapshot_name: Restore from this exported snapshot while the job has no
            snapshot of its own (``spec.initialSnapshotName``).
        initial_snapshot_identity: The export that name must resolve to, as its
            SnapshotJobExport recorded it; None to take the name's highest snapshot id.
        split_brain_protection: Run only while the store members the driver reaches are a
            quorum (``spec.splitBrainProtection``).
        store_lost_s: Stop after reaching no store member for this long.
        source_lost_s: Stop (exit 69) after this long of failing to find where the next
            epoch's range ends, e.g. a Kafka cluster that is down; retried until then.
        durable_storage: Where exports are copied to, and initial snapshots looked for when
            the store lacks them; None without durable storage.
        durable_restore: ``(copy, record)`` snapshot ids the user accepts restoring the older
            durable copy of (``spec.durableRestore``).
        chain_policy: The bounds of incremental snapshots' chains (``spec.snapshotChains``).
        snapshot_keys: The keys validation records are signed and verified with
            (``spec.snapshotSigning``); None to sign nothing.
        epoch_timeout_s: An epoch that runs longer ends the execution (exit 70,
            ``spec.stallDetection.epochTimeoutSeconds``).
        sink_timeout_s: A sink call of a snapshot that runs longer ends the execution (exit
            70, ``spec.stallDetection.sinkTimeoutSeconds``).
        expired_offsets: What a restore does with a Kafka offset that retention deleted
            (``spec.expiredOffsets``).
    """

    job: JobIdentity
    guarantee: ProcessingGuarantee
    snapshot_interval_ms: int
    state_partitions: int
    store: StoreAddress
    idle_sleep_s: float = 0.2
    suspend_on_failure: bool = False
    initial_snapshot_name: str | None = None
    split_brain_protection: bool = False
    store_lost_s: float = 30.0
    source_lost_s: float = 60.0
    durable_storage: DurableStorage | None = None
    durable_restore: tuple[int, int] | None = None
    chain_policy: ChainPolicy = field(default_factory=ChainPolicy)
    initial_snapshot_identity: ExportIdentity | None = None
    snapshot_keys: SnapshotKeys | None = None
    epoch_timeout_s: float = float(StallDetectionSpec().epoch_timeout_seconds)
    sink_timeout_s: float = float(StallDetectionSpec().sink_timeout_seconds)
    expired_offsets: ExpiredOffsetsPolicy = ExpiredOffsetsPolicy.FAIL


def chain_policy(chains: SnapshotChainsSpec | None) -> ChainPolicy:
    """The protocol's chain bounds from ``spec.snapshotChains``; its defaults when unset."""
    if chains is None:
        return ChainPolicy()
    return ChainPolicy(chains.max_deltas, chains.max_delta_percent / 100)


_STOP_SIGNALS = frozenset({int(signal.SIGTERM), int(signal.SIGINT)})


class StopSignals:
    """Turns SIGTERM and SIGINT into a flag the loop checks at the next epoch boundary.

    The current step (an epoch, a snapshot's phases) always finishes: a signal in the middle
    of a snapshot would otherwise leave it to be repaired by the next restore, which is safe
    but slower. No new snapshot is taken after the signal.

    A step can outlast the Pod's grace period (an epoch waiting for executors evicted with
    the driver): the kubelet then kills the driver before it says how it ends. So, when
    ``on_overdue`` is given, a watchdog thread calls it once if the signal has not been served
    ``overdue_after_s`` after it arrived (:meth:`served` not called), while the Pod can still
    report.

    The watchdog learns of the signal from the interpreter's wakeup fd, not from the Python
    handler: the kernel may deliver a process signal to any thread, and the handler then runs
    only when the main thread next executes bytecode, which a main thread blocked in a C-level
    wait does not do until the wait ends (after the kubelet's SIGKILL, in the worst case).
    """

    def __init__(
        self,
        on_overdue: Callable[[], None] | None = None,
        overdue_after_s: float = EXIT_REPORT_AFTER_SIGNAL_SECONDS,
    ) -> None:
        self._event = threading.Event()
        self._served = threading.Event()
        self._on_overdue = on_overdue
        self._overdue_after_s = overdue_after_s
        # Kept while installed, so the writer is not closed while the interpreter writes to it.
        self._wakeup_sockets: tuple[socket.socket, socket.socket] | None = None

    def install(self) -> None:
        """Handles SIGTERM and SIGINT in this (main) thread, and starts the watchdog.

        Raises:
            ValueError: If called from another thread than the main one.
        """
        signal.signal(signal.SIGTERM, self._handle)
        signal.signal(signal.SIGINT, self._handle)
        if self._on_overdue is None:
            return
        wakeups, wakeup_writer = socket.socketpair()
        wakeup_writer.setblocking(False)
        previous = signal.set_wakeup_fd(wakeup_writer.fileno(), warn_on_full_buffer=False)
        if previous != -1:
            _log.info("Replaced the interpreter's signal wakeup fd previous=%d", previous)
        self._wakeup_sockets = (wakeups, wakeup_writer)
        # Started now, not from the handler: a handler that starts a thread could find
        # the interrupted main thread holding threading's own locks.
        threading.Thread(
            target=self._watch, args=(wakeups,), name="stop-signal-watchdog", daemon=True
        ).start()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        _log.warning("Received signal=%s, stopping at the next epoch boundary", signum)
        self._event.set()

    def _watch(self, wakeups: socket.socket) -> None:
        while not self._event.is_set():
            try:
                numbers = wakeups.recv(64)
            except OSError:
                return
            if not numbers:
                return  # The sockets were closed: nothing to watch.
            stops = [number for number in numbers if number in _STOP_SIGNALS]
            if stops:
                _log.warning("Stop signal seen by the watchdog signal=%s", stops[0])
                # Set here too: the loop must see the signal even if the handler has yet to run.
                self._event.set()
        if self._served.wait(self._overdue_after_s) or self._on_overdue is None:
            return
        _log.warning(
            "Stop signal not served in time seconds=%s, reporting the exit before the grace "
            "period ends",
            self._overdue_after_s,
        )
        try:
            self._on_overdue()
        except Exception as error:  # A watchdog that dies says so and changes nothing.
            _log.warning("Could not report the overdue stop error=%s", error)

    def served(self) -> None:
        """Tells the watchdog the driver is exiting on its own: nothing is overdue."""
        self._served.set()

    @property
    def received(self) -> bool:
        """Whether a stop signal arrived."""
        return self._event.is_set()


def snapshot_keys(environ: Mapping[str, str]) -> SnapshotKeys | None:
    """The job's snapshot keys from the operator's variables (``spec.snapshotSigning``).

    Raises:
        ValueError: If a key is missing or too short, naming it and what to do.
    """
    ids = [key_id for key_id in environ.get(ENV_SNAPSHOT_KEY_IDS, "").split(",") if key_id]
    if not ids:
        return None
    keys: dict[str, bytes] = {}
    for index, key_id in enumerate(ids):
        value = environ.get(f"{ENV_SNAPSHOT_KEY_PREFIX}{index}")
        if not value:
            raise ValueError(
                f"spec.snapshotSigning key {key_id!r} is empty: give the Secret's key a value "
                "of at least 32 bytes (e.g. `openssl rand -base64 48`)"
            )
        keys[key_id] = value.encode()
    try:
        return SnapshotKeys(
            ids[0], keys, accept_unsigned=environ.get(ENV_SNAPSHOT_ACCEPT_UNSIGNED) == "true"
        )
    except ValueError as error:
        raise ValueError(f"spec.snapshotSigning: {error}") from error


def initial_snapshot_identity(
    job_uid: str | None, snapshot_id: str | None
) -> ExportIdentity | None:
    """The export ``initialSnapshotName`` must resolve to, from the operator's two variables.

    Raises:
        ValueError: If only one is set, or the id is not a positive integer.
    """
    if not job_uid and not snapshot_id:
        return None
    if not job_uid or not snapshot_id or not snapshot_id.isdigit() or int(snapshot_id) < 1:
        raise ValueError(
            "SJ_INITIAL_SNAPSHOT_JOB_UID and SJ_INITIAL_SNAPSHOT_ID must both be set, the id a "
            f"positive integer; got jobUid={job_uid!r} snapshotId={snapshot_id!r}"
        )
    return ExportIdentity(job_uid, int(snapshot_id))
