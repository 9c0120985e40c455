"""A test session's temporary folder (:mod:`testbed.scratch`): made, pointed at, removed."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

from testbed import scratch
from testbed.jvm import SPARK_SUBMIT_OPTS

NO_SUCH_PID = 2**22 + 1
"""Above Linux's largest pid_max: no process has it."""


@pytest.fixture
def root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A system temporary folder of the test's own."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def test_a_session_folder_takes_every_temporary_file_and_goes_with_the_session(
    root: Path,
) -> None:
    environ = {SPARK_SUBMIT_OPTS: "-XX:TieredStopAtLevel=1"}
    folder = scratch.enter(environ, pid=os.getpid())
    assert folder.parent == root
    assert folder.stat().st_mode & 0o7777 == 0o1777, "as /tmp: servers run as other users"
    assert environ["TMPDIR"] == environ["SPARK_LOCAL_DIRS"] == str(folder)
    assert environ[SPARK_SUBMIT_OPTS] == f"-XX:TieredStopAtLevel=1 -Djava.io.tmpdir={folder}"
    assert environ[scratch.TEMPROOT] == str(root), "pytest's own folders stay outside"
    with tempfile.NamedTemporaryFile() as file:
        assert Path(file.name).parent == folder
    (folder / "blockmgr-1").mkdir()
    (folder / "blockmgr-1" / "shuffle_0.data").write_bytes(b"x" * 100)

    scratch.leave(folder, environ)
    assert not folder.exists()
    assert environ == {SPARK_SUBMIT_OPTS: "-XX:TieredStopAtLevel=1", scratch.TEMPROOT: str(root)}
    assert tempfile.tempdir is None


def test_a_later_session_removes_the_folders_of_ended_sessions_only(root: Path) -> None:
    ended = root / f"{scratch.PREFIX}{NO_SUCH_PID}x00ff"
    running = root / f"{scratch.PREFIX}{os.getpid()}x00ff"
    unrelated = root / f"{scratch.PREFIX}notapid"
    for folder in (ended, running, unrelated):
        folder.mkdir()
        (folder / "spark-1").mkdir()

    assert scratch.sweep(root) == [ended]
    assert not ended.exists()
    assert running.exists() and unrelated.exists()


def test_the_session_folder_is_made_after_the_sweep(root: Path) -> None:
    ended = root / f"{scratch.PREFIX}{NO_SUCH_PID}x00ff"
    ended.mkdir()
    environ: dict[str, str] = {}
    folder = scratch.enter(environ, pid=os.getpid())
    try:
        assert not ended.exists()
        assert folder.exists()
    finally:
        scratch.leave(folder, environ)


def test_files_meant_to_outlive_the_session_go_to_the_system_folder(
    root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(scratch.TEMPROOT, str(root / "lasting"))
    assert scratch.lasting_root() == root / "lasting"
    monkeypatch.delenv(scratch.TEMPROOT)
    assert scratch.lasting_root() == root
