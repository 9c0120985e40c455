"""Applying a chain read through Python: each key's newest row wins (``newest_rows``).

The same rule the executors' JVMs apply (``ChainRows.java``); both are run on real chains in
``tests/integration/test_incremental_snapshots.py``.
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from spark_runtime.state.changes import newest_rows

pytestmark = pytest.mark.unit


def batch(keys: list[tuple[str, int]], totals: list[int]) -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {
            "name": [k[0] for k in keys],
            "shard": [k[1] for k in keys],
            "total": totals,
        }
    )


def test_later_rows_of_a_key_replace_earlier_ones_across_batches() -> None:
    full = batch([("a", 1), ("a", 2), ("b", 1)], [10, 20, 30])
    first_delta = batch([("a", 2), ("c", 1)], [21, 40])
    second_delta = batch([("a", 2), ("b", 1)], [22, 31])
    merged = pa.Table.from_batches(
        newest_rows([full, first_delta, second_delta], ["name", "shard"])
    )
    rows = sorted(zip(*(merged.column(c).to_pylist() for c in merged.column_names), strict=True))
    assert rows == [("a", 1, 10), ("a", 2, 22), ("b", 1, 31), ("c", 1, 40)]
    assert merged.schema == full.schema


def test_an_empty_chain_has_no_rows() -> None:
    assert newest_rows([], ["name"]) == []
