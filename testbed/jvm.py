"""The JIT setting of the Spark JVMs the tests start, and why it is not the product's.

A Spark driver a test starts lives briefly: one execution of a few dozen epochs, often less
(the chaos test starts 25 of them, most killed within seconds). HotSpot's default tiered JIT
spends much of such a JVM's CPU in its C2 compiler, optimising code that does not run long
enough to pay the compilation back. Measured on the project's 2-core machine, idle, a local
driver running 40 small epochs (a session, then ``mapInArrow`` and a keyed sum per epoch)
took 71 s of CPU with the default JIT and 36 s with C1 only (``-XX:TieredStopAtLevel=1``),
40 s wall against 28 s. ``make test`` on the 2-core CI machine waits for CPU, so the tests'
Spark JVMs compile with C1 only.

The servers the tests start (Hazelcast members, Kafka, s3proxy) keep the default: they serve
a whole session, where C2's code pays back. The product keeps HotSpot's default too: a
streaming job lives for days. So do the benchmarks (``bench/``), which measure what users
get: nothing outside the pytest session sets this. A user who wants the same for short jobs
sets ``spark.driver.extraJavaOptions`` and ``spark.executor.extraJavaOptions`` in
``spec.spark.conf``, as the cluster tests do (:func:`tests.e2e.release.Release.apply_job`).
"""

from __future__ import annotations

from collections.abc import MutableMapping

QUICK_JIT_OPTIONS = ("-XX:TieredStopAtLevel=1",)
"""The options: C1 only, no C2 compilations."""

SPARK_SUBMIT_OPTS = "SPARK_SUBMIT_OPTS"
"""Spark's launcher adds this variable's options to the JVM ``spark-submit`` starts: a local
driver's, so a driver process, a PySpark session in a test and the operator's local drivers
all get the options from the environment they inherit."""


def use_quick_jit(environ: MutableMapping[str, str]) -> None:
    """Turns the options on in ``environ`` for the Spark drivers started with it.

    Args:
        environ: The environment to change (``os.environ`` for a test session); options
            already in ``SPARK_SUBMIT_OPTS`` are kept, the quick JIT's added once.
    """
    submit = environ.get(SPARK_SUBMIT_OPTS, "").split()
    added = [option for option in QUICK_JIT_OPTIONS if option not in submit]
    environ[SPARK_SUBMIT_OPTS] = " ".join([*submit, *added])
