"""A temporary folder of each test session's own, removed when the session ends.

Why: the processes a test session starts write into the system's temporary folder and not
all of them clean up. A Spark JVM that a fault test kills never runs its shutdown hooks, and
every Spark driver leaves its local directories (``spark-*`` with the session's jars,
``blockmgr-*``), its native libraries and ``artifacts-*`` folders; the server fixtures'
``mkdtemp`` folders and PySpark's own files go there too. Measured on 2026-11-28, the first
half of ``make test`` had left about 250 MB outside pytest's folders, and the CI machine keeps
its ``/tmp`` across runs: CI failed with ``No space left on device`` on a run of ``715c01d``.

So a session makes a folder of its own (:func:`enter`) and points at it everything its
processes take a temporary folder from: ``TMPDIR`` (Python's :mod:`tempfile`, ``mktemp``,
Go, kind, docker's build contexts), ``SPARK_LOCAL_DIRS`` (Spark's local directories) and
``java.io.tmpdir`` of the Spark drivers (``SPARK_SUBMIT_OPTS``, which Spark's launcher adds to
the JVM of every local driver, :mod:`testbed.jvm`). :func:`leave` removes it when the session
ends; a session that was killed cannot, so every session first removes the folders of
sessions whose process is gone (:func:`sweep`), as :mod:`testbed.netns` does with its
namespaces.

pytest's own ``tmp_path`` folders stay in the system's temporary folder, kept for a look
after a failed test (``tmp_path_retention_policy`` in pyproject.toml; pytest keeps those of
the last three sessions): ``PYTEST_DEBUG_TEMPROOT`` holds that folder for the session and for
the pytest sessions it starts, and :func:`lasting_root` names it for other files meant to be
read after the run.
"""

from __future__ import annotations

import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import MutableMapping
from pathlib import Path

from testbed.jvm import SPARK_SUBMIT_OPTS
from testbed.processes import pid_alive

log = logging.getLogger(__name__)

PREFIX = "sj-session-"
"""A session folder's name: this prefix, the session's pid, ``x`` and random hex."""

TEMPROOT = "PYTEST_DEBUG_TEMPROOT"
"""The variable pytest takes the root of its ``tmp_path`` folders from."""

_NAME = re.compile(rf"^{re.escape(PREFIX)}(\d+)x[0-9a-f]+$")


def sweep(root: Path) -> list[Path]:
    """Removes the session folders in ``root`` whose session's process is gone.

    Args:
        root: The temporary folder the sessions made theirs in.

    Returns:
        The folders removed.
    """
    removed = []
    for folder in sorted(root.glob(f"{PREFIX}*")):
        match = _NAME.match(folder.name)
        if match is None or pid_alive(int(match.group(1))):
            continue
        shutil.rmtree(folder, ignore_errors=True)
        removed.append(folder)
    if removed:
        log.warning("Removed the temporary folders of ended sessions folders=%s", removed)
    return removed


def enter(environ: MutableMapping[str, str], pid: int | None = None) -> Path:
    """Makes the session's folder and points ``environ`` and :mod:`tempfile` at it.

    Args:
        environ: The environment the session's processes inherit (``os.environ``).
        pid: The session's process (this one by default): the folder is removed by a later
            session once it is gone.

    Returns:
        The folder, for :func:`leave`.
    """
    root = Path(tempfile.gettempdir())
    sweep(root)
    folder = root / f"{PREFIX}{os.getpid() if pid is None else pid}x{secrets.token_hex(4)}"
    folder.mkdir()
    # As /tmp: servers the session runs as other users (PostgreSQL as postgres) make their
    # folders here too.
    folder.chmod(0o1777)
    # Before TMPDIR changes: pytest's folders and the pytest sessions started by tests stay
    # in the system's folder.
    environ.setdefault(TEMPROOT, str(root))
    environ["TMPDIR"] = str(folder)
    environ["SPARK_LOCAL_DIRS"] = str(folder)
    submit = [o for o in environ.get(SPARK_SUBMIT_OPTS, "").split() if "java.io.tmpdir" not in o]
    environ[SPARK_SUBMIT_OPTS] = " ".join([*submit, f"-Djava.io.tmpdir={folder}"])
    # tempfile caches the folder it found first; a module may have asked already.
    tempfile.tempdir = str(folder)
    return folder


def leave(folder: Path, environ: MutableMapping[str, str]) -> None:
    """Removes the session's folder and everything its processes left in it.

    Args:
        folder: What :func:`enter` returned.
        environ: The environment :func:`enter` changed: it no longer names the folder.
    """
    for name in ("TMPDIR", "SPARK_LOCAL_DIRS"):
        if environ.get(name) == str(folder):
            del environ[name]
    submit = environ.get(SPARK_SUBMIT_OPTS, "").split()
    environ[SPARK_SUBMIT_OPTS] = " ".join(o for o in submit if o != f"-Djava.io.tmpdir={folder}")
    if tempfile.tempdir == str(folder):
        tempfile.tempdir = None
    shutil.rmtree(folder, ignore_errors=True)


def lasting_root() -> Path:
    """The system's temporary folder, for files meant to outlive the session."""
    return Path(os.environ.get(TEMPROOT) or tempfile.gettempdir())
