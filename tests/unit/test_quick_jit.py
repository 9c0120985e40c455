"""The tests' JVMs compile with C1 only (:mod:`testbed.jvm`); outside a test session nothing does.

The session turns it on in ``tests/conftest.py``; these check what that does to an
environment, and that this very session has it, so a conftest that lost the call fails here.
"""

from __future__ import annotations

import os

import pytest

from testbed import jvm

pytestmark = pytest.mark.unit


def test_the_session_gives_every_jvm_it_starts_the_quick_jit() -> None:
    assert os.environ.get(jvm.QUICK_JIT_ENV) == "1"
    assert "-XX:TieredStopAtLevel=1" in os.environ.get(jvm.SPARK_SUBMIT_OPTS, "").split()
    assert jvm.server_jvm_options() == ["-XX:TieredStopAtLevel=1"]


def test_a_users_spark_submit_options_are_kept_and_the_option_added_once() -> None:
    environ = {jvm.SPARK_SUBMIT_OPTS: "-Dfoo=1 -Xss4m"}
    jvm.use_quick_jit(environ)
    jvm.use_quick_jit(environ)
    assert environ[jvm.SPARK_SUBMIT_OPTS] == "-Dfoo=1 -Xss4m -XX:TieredStopAtLevel=1"
    assert environ[jvm.QUICK_JIT_ENV] == "1"


def test_without_the_session_the_servers_keep_the_default_jit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(jvm.QUICK_JIT_ENV)
    assert jvm.server_jvm_options() == []
