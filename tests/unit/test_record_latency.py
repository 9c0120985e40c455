"""The latency benchmark's measure: an id's latency ends at the first output reflecting it.

``bench.record_latency`` compares the runtime with Spark's real-time mode by this one
function; counting from a later output, or accepting an output that misses ids, would report
latencies no mode had.
"""

from __future__ import annotations

import pytest

from bench.kafka_pipeline import KEYS
from bench.record_latency import latencies

pytestmark = pytest.mark.unit


def _every_id_at_once(sent: dict[int, float], at: float) -> dict[int, list[tuple[float, int, int]]]:
    """One output per key, at ``at``, reflecting all of its ids."""
    last_id = max(sent)
    return {
        key: [(at, max(range(key, last_id + 1, KEYS)), sum(range(key, last_id + 1, KEYS)))]
        for key in range(KEYS)
    }


def test_an_id_counts_to_the_first_output_that_reflects_it() -> None:
    sent = {n: 100.0 + n * 0.01 for n in range(3 * KEYS)}
    arrivals = _every_id_at_once(sent, 110.0)
    # Key 0 also had an earlier output reflecting id 0 only, and a stale one after it.
    arrivals[0] = [(100.5, 0, 0), (100.7, 0, 0), *arrivals[0]]
    values = latencies(sent, arrivals, first_id=0)
    assert len(values) == 3 * KEYS
    assert values[0] == pytest.approx(500.0)  # id 0: sent at 100.0, first reflected at 100.5
    assert values[1] == pytest.approx((110.0 - sent[KEYS]) * 1000)  # id 100 only at 110.0
    assert max(values) == pytest.approx((110.0 - 100.0 - 1 * 0.01) * 1000)  # id 1 of key 1


def test_ids_before_the_first_counted_one_are_left_out() -> None:
    sent = {n: float(n) for n in range(2 * KEYS)}
    values = latencies(sent, _every_id_at_once(sent, 1000.0), first_id=KEYS)
    assert sorted(values) == sorted((1000.0 - n) * 1000 for n in range(KEYS, 2 * KEYS))


def test_an_id_no_output_reflects_fails_the_measure() -> None:
    sent = {n: float(n) for n in range(2 * KEYS)}
    arrivals = _every_id_at_once(sent, 1000.0)
    # Key 3's only output has the right sum but says it saw id 3, not id 103.
    arrivals[3] = [(1000.0, 3, 3 + 103)]
    with pytest.raises(AssertionError, match="No output reflects id 103"):
        latencies(sent, arrivals, first_id=0)


def test_a_wrong_last_sum_fails_the_measure() -> None:
    sent = {n: float(n) for n in range(2 * KEYS)}
    arrivals = _every_id_at_once(sent, 1000.0)
    arrivals[7] = [(1000.0, 107, 107)]  # id 7 was lost
    with pytest.raises(AssertionError, match="Key 7: last sum is not 114"):
        latencies(sent, arrivals, first_id=0)
