"""The tests' Spark JVMs compile with C1 only (:mod:`testbed.jvm`); nothing else changes.

The session turns it on in ``tests/conftest.py``; these check what that does to an
environment, and that this very session has it, so a conftest that lost the call fails here.
"""

from __future__ import annotations

import os

import pytest

from testbed import jvm

pytestmark = pytest.mark.unit


def test_the_session_gives_every_spark_driver_it_starts_the_quick_jit() -> None:
    assert "-XX:TieredStopAtLevel=1" in os.environ.get(jvm.SPARK_SUBMIT_OPTS, "").split()


def test_a_users_spark_submit_options_are_kept_and_the_option_added_once() -> None:
    environ = {jvm.SPARK_SUBMIT_OPTS: "-Dfoo=1 -Xss4m"}
    jvm.use_quick_jit(environ)
    jvm.use_quick_jit(environ)
    assert environ == {jvm.SPARK_SUBMIT_OPTS: "-Dfoo=1 -Xss4m -XX:TieredStopAtLevel=1"}


def test_the_cluster_tests_jobs_ask_for_it_in_their_spark_settings() -> None:
    from tests.e2e.release import QUICK_JIT_CONF

    assert QUICK_JIT_CONF == {
        "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1",
        "spark.executor.extraJavaOptions": "-XX:TieredStopAtLevel=1",
    }
