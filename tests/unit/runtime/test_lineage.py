"""What the runtime reads from a local checkpoint's partitioning (pure parsing, no Spark).

A merge shuffles only the batch when the state is known to be hash-partitioned by its keys
into the job's partitions; anything else must read as not known, so the merge shuffles the
state too, which is never wrong.
"""

from __future__ import annotations

from typing import Any, cast

import pytest

from spark_runtime.lineage import Checkpointed, hash_partitioned


def _stored(partitioning: str) -> Checkpointed:
    # The frame is never touched by hash_partitioned.
    return Checkpointed(cast(Any, None), {1}, partitioning)


@pytest.mark.parametrize(
    ("partitioning", "keys", "partitions"),
    [
        ("hashpartitioning(key#12L, 4)", ["key"], 4),
        ("hashpartitioning(customer#3, region#40L, 32)", ["customer", "region"], 32),
    ],
)
def test_the_keys_and_partition_count_spark_prints_are_recognised(
    partitioning: str, keys: list[str], partitions: int
) -> None:
    assert hash_partitioned(_stored(partitioning), keys, partitions)


@pytest.mark.parametrize(
    ("partitioning", "keys", "partitions"),
    [
        ("", ["key"], 4),  # not known: read from a snapshot
        ("UnknownPartitioning(0)", ["key"], 4),  # planned adaptively
        ("hashpartitioning(key#12L, 3)", ["key"], 4),  # another partition count
        ("hashpartitioning(key#12L, window_start#7, 4)", ["key"], 4),  # by more columns
        ("hashpartitioning(region#1, customer#2, 4)", ["customer", "region"], 4),  # order
        ("roundrobinpartitioning(4)", ["key"], 4),
        ("hashpartitioning(pmod(key#12L, 7), 4)", ["key"], 4),  # an expression, not the key
    ],
)
def test_anything_else_is_not_known_to_be_partitioned(
    partitioning: str, keys: list[str], partitions: int
) -> None:
    assert not hash_partitioned(_stored(partitioning), keys, partitions)
