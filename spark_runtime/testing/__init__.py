"""The test kit: run your own pipeline on memory sources and sinks, crash it, check its output.

Everything runs in the test process with only the installed package: the runtime's own driver,
the embedded snapshot store in a temporary directory, an execution record in a file. No
Hazelcast, no Kubernetes, no database. A pytest plugin (``pytest_plugin``, registered as the
``snapshotjob`` entry point) gives the fixtures ``snapshotjob_spark`` and ``pipeline_test``::

    from spark_runtime.testing import MemorySink, MemorySource, assert_exactly_once

    def test_no_event_twice(pipeline_test):
        sink = MemorySink()
        job = pipeline_test(
            my_pipeline,
            sources={"events": MemorySource(rows, rows_per_epoch=10)},
            sinks={"event_ids": sink},
        )
        job.crash_at("take.after_step_4")
        job.run()
        assert_exactly_once(sink, "id", expected_ids=range(100))

- :mod:`~spark_runtime.testing.memory`: ``MemorySource``, ``MemorySink``, ``CommittedBatch``
- :mod:`~spark_runtime.testing.harness`: ``PipelineTest``, ``RunResult``,
  ``every_failpoint``, ``assert_exactly_once``, ``check_ids``, ``IdReport``, ``local_spark``
- :mod:`~spark_runtime.testing.pytest_plugin`: the fixtures, ``PipelineTestFactory``

The names are imported on first use (:mod:`spark_runtime.lazy_exports`): pytest loads the
plugin in every test session of an environment the package is installed in, and must not pay
for PySpark there until a test asks for the kit.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from spark_runtime.lazy_exports import lazy_exports

if TYPE_CHECKING:
    from spark_runtime.testing.harness import (
        FailpointNotReached,
        IdReport,
        PipelineRunFailed,
        PipelineTest,
        PipelineTestOptions,
        RunResult,
        RunTimedOut,
        assert_exactly_once,
        check_ids,
        every_failpoint,
        local_spark,
    )
    from spark_runtime.testing.memory import CommittedBatch, MemorySink, MemorySource, RowLike
    from spark_runtime.testing.pytest_plugin import PipelineTestFactory

__all__ = [
    "CommittedBatch",
    "FailpointNotReached",
    "IdReport",
    "MemorySink",
    "MemorySource",
    "PipelineRunFailed",
    "PipelineTest",
    "PipelineTestFactory",
    "PipelineTestOptions",
    "RowLike",
    "RunResult",
    "RunTimedOut",
    "assert_exactly_once",
    "check_ids",
    "every_failpoint",
    "local_spark",
]

if not TYPE_CHECKING:
    # Hidden from mypy, which reads the imports above instead: so it still rejects a
    # misspelt name, where a module-level __getattr__ would let any name pass as Any.
    __getattr__, __dir__ = lazy_exports(
        globals(),
        {
            "CommittedBatch": "memory",
            "FailpointNotReached": "harness",
            "IdReport": "harness",
            "MemorySink": "memory",
            "MemorySource": "memory",
            "PipelineRunFailed": "harness",
            "PipelineTest": "harness",
            "PipelineTestFactory": "pytest_plugin",
            "PipelineTestOptions": "harness",
            "RowLike": "memory",
            "RunResult": "harness",
            "RunTimedOut": "harness",
            "assert_exactly_once": "harness",
            "check_ids": "harness",
            "every_failpoint": "harness",
            "local_spark": "harness",
        },
    )
