"""The word statistics pipeline's own tests, written with the test kit as its author would.

They run ``define_pipeline`` unchanged: the kit's pytest plugin (installed with the package)
gives the ``pipeline_test`` fixture, and memory sources and sinks take the place of the files
and the PostgreSQL tables by operator name. Run them with ``pytest examples/word_stats``.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import pytest

from examples.word_stats import pipeline
from spark_runtime.testing import (
    MemorySink,
    MemorySource,
    PipelineTest,
    PipelineTestFactory,
    assert_exactly_once,
)

ARGS = {"dsn": "unused: the sinks are replaced", "input": "unused: the source is replaced"}
"""What define_pipeline reads from p.args: it still builds the production source and sinks."""

VOCABULARY = ("spark", "snapshot", "state", "epoch", "crash", "restore", "sink", "it's")


def messages(first: int, count: int) -> list[dict[str, Any]]:
    """Messages ``first`` .. ``first + count - 1``: one to four words each, some repeated."""
    result = []
    for i in range(first, first + count):
        words = [VOCABULARY[(i * k) % len(VOCABULARY)] for k in range(1, 2 + i % 4)]
        text = " ".join(words).capitalize() + ("!" if i % 3 else ", again.")
        result.append({"id": i, "author": f"user{i % 5}", "text": text})
    return result


def expected_stats(sent: list[dict[str, Any]]) -> dict[str, tuple[int, int, int]]:
    """Word -> (count, first id, last id), computed here without Spark."""
    counts: Counter[str] = Counter()
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for message in sent:
        for word in re.findall(r"[a-z0-9']+", message["text"].lower()):
            counts[word] += 1
            first[word] = min(first.get(word, message["id"]), message["id"])
            last[word] = max(last.get(word, message["id"]), message["id"])
    return {word: (n, first[word], last[word]) for word, n in counts.items()}


def stats_of(sink: MemorySink) -> dict[str, tuple[int, int, int]]:
    """The stats table the upserting sink would hold: the last row per word."""
    return {
        word: (row["count"], row["first_id"], row["last_id"])
        for word, row in sink.latest("word").items()
    }


def word_stats(
    pipeline_test: PipelineTestFactory, source: MemorySource
) -> tuple[PipelineTest, MemorySink, MemorySink]:
    """The pipeline on ``source``, with memory sinks for both tables."""
    stats, ids = MemorySink(), MemorySink()
    job = pipeline_test(
        pipeline,
        args=ARGS,
        sources={"messages": source},
        sinks={"stats": stats, "message_ids": ids},
        state_partitions=2,
    )
    return job, stats, ids


def test_every_word_of_every_message_is_counted(pipeline_test: PipelineTestFactory) -> None:
    sent = messages(0, 30)
    job, stats, ids = word_stats(pipeline_test, MemorySource(sent, rows_per_epoch=10))

    result = job.run()

    assert result.epochs == 3
    assert stats_of(stats) == expected_stats(sent)
    assert_exactly_once(ids, "id", expected_ids=range(30))
    assert not stats.prepared_transactions and not ids.prepared_transactions


@pytest.mark.parametrize("failpoint", ["take.after_step_4", "take.after_step_7"])
def test_a_crash_in_a_snapshot_loses_and_repeats_nothing(
    pipeline_test: PipelineTestFactory, failpoint: str
) -> None:
    """Phase 1 done but not recorded (step 4), or recorded but not committed (step 7): the
    restore rolls back or commits what the crash left, and the epochs after it run again."""
    sent = messages(0, 30)
    job, stats, ids = word_stats(pipeline_test, MemorySource(sent, rows_per_epoch=10))

    job.crash_at(failpoint, occurrence=2)
    job.run()

    assert stats_of(stats) == expected_stats(sent)
    assert_exactly_once(ids, "id", expected_ids=range(30))


def test_messages_added_later_extend_the_statistics(pipeline_test: PipelineTestFactory) -> None:
    """An unbounded source, as a running job sees one: each run() reads what is there and
    stops after a terminal snapshot; the next one restores and reads what came since."""
    source = MemorySource(messages(0, 12), bounded=False)
    job, stats, ids = word_stats(pipeline_test, source)
    job.run()
    assert stats_of(stats) == expected_stats(messages(0, 12))

    source.add(messages(12, 8))
    job.run()

    assert stats_of(stats) == expected_stats(messages(0, 20))
    assert_exactly_once(ids, "id", expected_ids=range(20))
