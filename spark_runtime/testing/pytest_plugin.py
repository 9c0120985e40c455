"""The test kit's pytest plugin: the fixtures ``snapshotjob_spark`` and ``pipeline_test``.

Registered as the ``snapshotjob`` entry point of the ``pytest11`` group, so pytest loads it in
any environment the package is installed in: a pipeline's tests ask for ``pipeline_test`` and
need no ``conftest.py`` (``-p no:snapshotjob`` turns it off). Fixture names start with
``snapshotjob_`` or name the kit, so they do not clash with a suite's own ``spark`` fixture.

One SparkSession per process: ``snapshotjob_spark`` uses the session that is already active
(a suite's own fixture's, if it ran first) and leaves it running; only a session it started
itself is stopped at the end. A suite that has its own session fixture says which one to use by
overriding it in its ``conftest.py``::

    @pytest.fixture(scope="session")
    def snapshotjob_spark(spark):
        return spark

Each run of the kit sets on that session only what the driver would set on its own (shuffle
partitions, Arrow, state chunks through the Python workers), and puts the previous values
back when the run ends (:class:`~spark_runtime.testing.PipelineTest`).

This module imports without pytest (an image or the ``runtime`` extra has none, and every
module of the package must import there); the fixtures are then plain functions, unused.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, TypeVar, Unpack

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

    from spark_runtime.pipeline import DefinePipeline
    from spark_runtime.testing.harness import PipelineTest, PipelineTestOptions

_Function = TypeVar("_Function", bound=Callable[..., Any])

if TYPE_CHECKING or importlib.util.find_spec("pytest") is not None:
    import pytest

    fixture = pytest.fixture
else:  # pragma: no cover - only where pytest is not installed, and so never loads this

    def fixture(*_args: Any, **_kwargs: Any) -> Callable[[_Function], _Function]:
        """Leaves the function as it is: there is no pytest to register it with."""
        return lambda function: function


class PipelineTestFactory:
    """Makes :class:`~spark_runtime.testing.PipelineTest` jobs, each in a directory of its own
    under one directory: what the ``pipeline_test`` fixture hands a test.

    Args:
        spark: The session every job runs on.
        directory: Where the jobs' directories go (``job-1``, ``job-2``, ...).
    """

    def __init__(self, spark: SparkSession, directory: Path) -> None:
        self.spark = spark
        self.directory = directory
        self._made = 0

    def __call__(
        self, pipeline: DefinePipeline | ModuleType, /, **options: Unpack[PipelineTestOptions]
    ) -> PipelineTest:
        """A new job of ``pipeline``; ``options`` are :class:`PipelineTest`'s keywords."""
        from spark_runtime.testing.harness import PipelineTest

        self._made += 1
        return PipelineTest(
            pipeline, self.directory / f"job-{self._made}", spark=self.spark, **options
        )


@fixture(scope="session")
def snapshotjob_spark() -> Iterator[SparkSession]:
    """The SparkSession pipelines run on: the active one, else a ``local[2]`` session of the
    test session's own, stopped at its end (:func:`~spark_runtime.testing.local_spark`)."""
    from pyspark.sql import SparkSession

    from spark_runtime.testing.harness import local_spark

    already_active = SparkSession.getActiveSession() is not None
    session = local_spark()
    yield session
    if not already_active:
        session.stop()


@fixture()
def pipeline_test(snapshotjob_spark: SparkSession, tmp_path: Path) -> PipelineTestFactory:
    """Makes a :class:`~spark_runtime.testing.PipelineTest` of a pipeline, in the test's
    temporary directory: ``pipeline_test(my_pipeline, sources={...}, sinks={...})``."""
    return PipelineTestFactory(snapshotjob_spark, tmp_path / "pipeline-tests")
