"""An incremental snapshot's writes side by side (``increments.side_by_side``).

A turn's full rewrite and the delta of the other partitions are two Spark jobs started at
once; these tests play the jobs with plain callables (no SparkContext: ``InheritableThread``
is then a plain thread). The real jobs run in ``tests/integration/test_incremental_snapshots.py``.
"""

from __future__ import annotations

import threading
import time

import pytest

from snapshot_protocol.chunks import ChunkDescriptor, ChunkKey
from spark_runtime.state.increments import Written, side_by_side

pytestmark = pytest.mark.unit


def _written(partition: int) -> Written:
    key = ChunkKey(7, "sums", partition, 0)
    return [(ChunkDescriptor(key, 10, 1, "0" * 16, False), f"executor-{partition}")]


def test_the_jobs_run_at_once_and_their_results_come_in_order() -> None:
    both = threading.Barrier(2, timeout=10)  # one job alone would wait here until the timeout

    def job(partition: int) -> Written:
        both.wait()
        return _written(partition)

    assert side_by_side([lambda: job(0), lambda: job(1)]) == [_written(0), _written(1)]


def test_one_job_or_none_runs_in_the_callers_thread() -> None:
    threads: list[threading.Thread] = []

    def job() -> Written:
        threads.append(threading.current_thread())
        return _written(3)

    assert side_by_side([job]) == [_written(3)]
    assert side_by_side([]) == []
    assert threads == [threading.current_thread()]


@pytest.mark.parametrize("failing", [0, 1])
def test_a_failure_is_raised_once_every_job_has_ended(failing: int) -> None:
    """A snapshot that failed must leave no write running: its chunks are discarded next."""
    ended: list[int] = []

    def job(index: int) -> Written:
        if index == failing:
            raise RuntimeError(f"Put refused job={index}")
        time.sleep(0.3)  # the other job is still writing when the failure happens
        ended.append(index)
        return _written(index)

    with pytest.raises(RuntimeError, match=f"job={failing}"):
        side_by_side([lambda: job(0), lambda: job(1)])
    assert ended == [1 - failing]
