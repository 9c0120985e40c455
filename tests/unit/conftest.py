"""The unit tier starts no process: every way to start one fails the test that tried.

A unit test that starts a process (a JVM behind a SparkSession, ``helm``, any child) belongs
in ``tests/integration``: it is slow, needs something from outside the venv and fails for
reasons that are not the code's. The guard wraps the setup, call and teardown of every test
under ``tests/unit`` (also the setup of session fixtures a unit test asks for, such as
``spark``), so none of them can start a process. Each attempt raises
:class:`UnitTestStartedProcessError`; the attempt is also remembered and fails the test after the
phase, so code that swallows exceptions cannot hide it.

``tests/unit/test_process_guard.py`` proves that the guard catches each way.
"""

from __future__ import annotations

import _posixsubprocess
import multiprocessing.util
import os
import subprocess
from collections.abc import Callable, Generator
from typing import Any

import pytest


class UnitTestStartedProcessError(RuntimeError):
    """A unit test tried to start a process."""


def _refuse(what: str, attempts: list[str]) -> Callable[..., Any]:
    def refuse(*args: Any, **kwargs: Any) -> Any:
        attempts.append(what)
        raise UnitTestStartedProcessError(
            f"unit tests start no process, this one called {what}; "
            "move it to tests/integration (see tests/unit/conftest.py)"
        )

    return refuse


# (object, attribute): every door to a new process that Python code uses.
# Popen._execute_child is where every subprocess.Popen starts its child (subprocess.run and
# check_output, os.popen, asyncio's subprocesses, PySpark's JVM launcher); patching it rather
# than Popen.__init__ lets Popen close the pipes it opened. os.fork covers os.spawn*, pty.fork
# and multiprocessing's fork start method; _posixsubprocess.fork_exec (also imported by
# subprocess as _fork_exec) is what multiprocessing's spawn and forkserver methods call.
_DOORS: tuple[tuple[Any, str], ...] = (
    (subprocess.Popen, "_execute_child"),
    (os, "fork"),
    (os, "forkpty"),
    (os, "posix_spawn"),
    (os, "posix_spawnp"),
    (os, "system"),
    (_posixsubprocess, "fork_exec"),
    (subprocess, "_fork_exec"),
    (multiprocessing.util, "spawnv_passfds"),
)


def _guarded(item: pytest.Item, phase: str) -> Generator[None, None, None]:
    attempts: list[str] = []
    with pytest.MonkeyPatch.context() as patch:
        for owner, name in _DOORS:
            if hasattr(owner, name):
                patch.setattr(owner, name, _refuse(f"{owner.__name__}.{name}", attempts))
        result = yield
    if attempts:
        pytest.fail(
            f"{item.nodeid} tried to start a process during {phase} ({', '.join(attempts)}); "
            "unit tests start no process: move it to tests/integration",
            pytrace=False,
        )
    return result


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    """Set up the test (and any session fixture it is the first to ask for) guarded."""
    return (yield from _guarded(item, "setup"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    """Run the test guarded."""
    return (yield from _guarded(item, "call"))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(
    item: pytest.Item, nextitem: pytest.Item | None
) -> Generator[None, None, None]:
    """Tear the test down guarded."""
    return (yield from _guarded(item, "teardown"))
