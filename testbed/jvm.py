"""The JIT setting of the JVMs the tests start, and why it is not the product's.

Every JVM a test starts lives briefly: a Spark driver for a few dozen epochs, a Hazelcast
member for one module, a Kafka broker for one session. HotSpot's default tiered JIT spends
much of such a JVM's CPU in its C2 compiler, optimising code that does not run long enough to
pay the compilation back. Measured on the project's 2-core machine, idle, a local driver
running 40 small epochs (a session, then ``mapInArrow`` and a keyed sum per epoch) took 71 s
of CPU with the default JIT and 36 s with C1 only (``-XX:TieredStopAtLevel=1``), 40 s wall
against 28 s. ``make test`` on the 2-core CI machine waits for CPU, so the tests run their
JVMs with C1 only.

The product keeps HotSpot's default: a streaming job lives for days, and C2's code is what it
runs then. The benchmarks (``bench/``) keep it too: they measure what users get, so nothing
outside the pytest session turns this on. A user who wants the same for short jobs sets
``spark.driver.extraJavaOptions`` and ``spark.executor.extraJavaOptions`` in ``spec.spark.conf``,
as the cluster tests do (:func:`tests.e2e.release.Release.apply_job`).
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

QUICK_JIT_OPTIONS = ("-XX:TieredStopAtLevel=1",)
"""The options: C1 only, no C2 compilations."""

QUICK_JIT_ENV = "SJ_TESTBED_QUICK_JIT"
"""Set to ``1`` (by ``tests/conftest.py``) for the test bed's servers to use the options."""

SPARK_SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
"""Spark's launcher adds this variable's options to the JVM ``spark-submit`` starts: a local
driver's, so a driver process, a PySpark session in a test and the operator's local drivers
all get the options from the environment they inherit."""


def server_jvm_options() -> list[str]:
    """The options for a server JVM the test bed starts (members, Kafka, s3proxy), if on."""
    return list(QUICK_JIT_OPTIONS) if os.environ.get(QUICK_JIT_ENV) == "1" else []


def use_quick_jit(environ: MutableMapping[str, str]) -> None:
    """Turns the options on in ``environ``: for the test bed's servers and Spark's drivers.

    Args:
        environ: The environment to change (``os.environ`` for a test session); options
            already in ``SPARK_SUBMIT_OPTS`` are kept, the quick JIT's added once.
    """
    environ[QUICK_JIT_ENV] = "1"
    submit = environ.get(SPARK_SUBMIT_OPTS, "").split()
    added = [option for option in QUICK_JIT_OPTIONS if option not in submit]
    environ[SPARK_SUBMIT_OPTS] = " ".join([*submit, *added])
