"""Named failpoints before and after every step of the taking and restore procedures.

The protocol's correctness is argued step by step (what an indeterminate result or a crash
at each step leads to, see ``docs/concepts/protocol.md``), so the tests need to stop the protocol
exactly between two steps. Every step N of
the taking procedure (1-10) and of the restore procedure (1-5) has ``<procedure>.before_step_N``
and ``<procedure>.after_step_N``; :data:`FAILPOINTS` lists them all so chaos tests can iterate
over them.

Actions:
    crash: raises :class:`FailpointCrash`, a ``BaseException`` that no protocol code catches, as
        if the process died there; the chaos harness turns it into ``os._exit`` in the driver.
    indeterminate: only at steps whose store write can be indeterminate (taking steps 2, 4, 5,
        7 and restore step 2); raises :class:`FailpointIndeterminate`, which the coordinator
        handles like the indeterminate result of that step's write. ``before_step_N`` means the
        write was not applied, ``after_step_N`` means it was.
    pause: allowed everywhere; calls the pause hook the runtime gave :class:`Failpoints`, and
        goes on when the hook returns. It makes a zombie driver on purpose: the driver's hook
        (``spark_runtime/execution.py``) stops its own process with ``SIGSTOP`` exactly there,
        so a test can start a newer execution meanwhile and send ``SIGCONT`` when it wants the
        stale one to carry on from that very point. A random ``SIGSTOP`` from outside could
        not pick the step, and could stop the driver while it holds the record file's lock.
        This module stays pure: it never signals anything itself, and refuses to arm ``pause``
        without a hook.

Failpoints are armed programmatically or through ``SJ_FAILPOINTS``, for example
``SJ_FAILPOINTS="take.after_step_7=crash,take.before_step_5=indeterminate"``. An armed failpoint
fires once and then disarms itself, so a restarted protocol run in the same process goes on.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from snapshot_protocol.errors import IndeterminateChunkWrite, IndeterminateRecordWrite

ENV_VAR = "SJ_FAILPOINTS"

TAKE = "take"
RESTORE = "restore"
_STEPS = {TAKE: 10, RESTORE: 5}
# Steps whose store write can have an indeterminate result (docs/concepts/protocol.md: taking steps
# 2, 4, 5, 7; restore step 2). Clears cannot (taking steps 3 and 8), reads and pure steps neither.
_INDETERMINATE_STEPS = {TAKE: frozenset({2, 4, 5, 7}), RESTORE: frozenset({2})}


class FailpointAction(enum.Enum):
    """What an armed failpoint does when reached."""

    CRASH = "crash"
    INDETERMINATE = "indeterminate"
    PAUSE = "pause"


PauseHook = Callable[[str], None]
"""Called with the failpoint's name when a ``pause`` failpoint fires; returning resumes."""


class FailpointCrash(BaseException):
    """The process "dies" at a failpoint.

    A ``BaseException`` so that no ``except Exception`` in the protocol or a participant can
    swallow it, just as nothing survives a real crash.
    """

    def __init__(self, failpoint: str) -> None:
        self.failpoint = failpoint
        super().__init__(f"crash at failpoint {failpoint}")


class FailpointIndeterminate(IndeterminateRecordWrite, IndeterminateChunkWrite):
    """An injected indeterminate result of the write at a failpoint's step."""

    def __init__(self, failpoint: str) -> None:
        self.failpoint = failpoint
        super().__init__(f"indeterminate result injected at failpoint {failpoint}")


@dataclass(frozen=True)
class Failpoint:
    """One point between two steps of a procedure.

    Attributes:
        name: ``<procedure>.<before|after>_step_<step>``.
        procedure: ``take`` or ``restore``.
        step: The step number as in docs/concepts/protocol.md.
        actions: The actions allowed here.
    """

    name: str
    procedure: str
    step: int
    actions: frozenset[FailpointAction]


def failpoint_name(procedure: str, position: str, step: int) -> str:
    """Returns the name of the failpoint ``position`` ("before" or "after") step ``step``."""
    return f"{procedure}.{position}_step_{step}"


def _all_failpoints() -> tuple[Failpoint, ...]:
    failpoints = []
    for procedure, steps in _STEPS.items():
        for step in range(1, steps + 1):
            actions = {FailpointAction.CRASH, FailpointAction.PAUSE}
            if step in _INDETERMINATE_STEPS[procedure]:
                actions.add(FailpointAction.INDETERMINATE)
            for position in ("before", "after"):
                failpoints.append(
                    Failpoint(
                        failpoint_name(procedure, position, step),
                        procedure,
                        step,
                        frozenset(actions),
                    )
                )
    return tuple(failpoints)


FAILPOINTS: tuple[Failpoint, ...] = _all_failpoints()
"""Every failpoint of both procedures, in procedure and step order."""

_BY_NAME: dict[str, Failpoint] = {failpoint.name: failpoint for failpoint in FAILPOINTS}


class Failpoints:
    """The registry of armed failpoints that the coordinator passes on its way.

    Args:
        armed: Failpoints to arm, by name.
        pause: What a ``pause`` failpoint does; without it ``pause`` cannot be armed.
    """

    def __init__(
        self,
        armed: Mapping[str, FailpointAction] | None = None,
        *,
        pause: PauseHook | None = None,
    ) -> None:
        self._armed: dict[str, FailpointAction] = {}
        self._pause = pause
        for name, action in (armed or {}).items():
            self.arm(name, action)

    @classmethod
    def parse(cls, spec: str, *, pause: PauseHook | None = None) -> Failpoints:
        """Reads ``name=action[,name=action...]``, the format of ``SJ_FAILPOINTS``.

        Args:
            spec: The armed failpoints.
            pause: The pause hook (see :class:`Failpoints`).

        Raises:
            ValueError: On a malformed entry, an unknown failpoint or action, an action the
                failpoint does not allow, or ``pause`` without a hook.
        """
        armed: dict[str, FailpointAction] = {}
        for entry in spec.split(","):
            if not entry.strip():
                continue
            name, separator, action = entry.partition("=")
            if not separator:
                raise ValueError(f"{ENV_VAR} entry {entry.strip()!r} is not name=action")
            try:
                armed[name.strip()] = FailpointAction(action.strip())
            except ValueError:
                choices = ", ".join(a.value for a in FailpointAction)
                raise ValueError(
                    f"{ENV_VAR} entry {entry.strip()!r}: action must be one of {choices}"
                ) from None
        return cls(armed, pause=pause)

    @classmethod
    def from_env(cls, environ: Mapping[str, str], *, pause: PauseHook | None = None) -> Failpoints:
        """Arms the failpoints named in ``environ[SJ_FAILPOINTS]``, if set.

        Raises:
            ValueError: As :meth:`parse`.
        """
        return cls.parse(environ.get(ENV_VAR, ""), pause=pause)

    @property
    def armed(self) -> Mapping[str, FailpointAction]:
        """The failpoints that will fire, by name."""
        return dict(self._armed)

    def arm(self, name: str, action: FailpointAction) -> None:
        """Arms one failpoint to fire once.

        Raises:
            ValueError: If the failpoint is unknown or does not allow the action, or the action
                is ``pause`` and no pause hook was given.
        """
        failpoint = _BY_NAME.get(name)
        if failpoint is None:
            raise ValueError(f"unknown failpoint {name!r}; see snapshot_protocol.FAILPOINTS")
        if action not in failpoint.actions:
            raise ValueError(
                f"failpoint {name!r} does not allow {action.value!r}: "
                "no store write there can be indeterminate"
            )
        if action is FailpointAction.PAUSE and self._pause is None:
            raise ValueError(
                f"failpoint {name!r} cannot pause: no pause hook was given to Failpoints "
                "(the driver process gives one)"
            )
        self._armed[name] = action

    def disarm_all(self) -> None:
        """Disarms every failpoint."""
        self._armed.clear()

    def hit(self, name: str) -> None:
        """Passes the failpoint ``name``: fires and disarms it if armed.

        A ``pause`` failpoint calls the pause hook and returns once the hook does.

        Raises:
            FailpointCrash: If armed with ``crash``.
            FailpointIndeterminate: If armed with ``indeterminate``.
        """
        action = self._armed.pop(name, None)
        if action is FailpointAction.CRASH:
            raise FailpointCrash(name)
        if action is FailpointAction.INDETERMINATE:
            raise FailpointIndeterminate(name)
        if action is FailpointAction.PAUSE:
            assert self._pause is not None, "arm() refuses pause without a hook"
            self._pause(name)
