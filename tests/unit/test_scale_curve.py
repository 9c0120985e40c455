"""The scale curve's pure parts: its grid, what fits the machine, the growth fits, /proc parsing.

``bench.scale_curve`` reports where snapshots stop fitting and how their cost grows; a wrong
point size, a heap that does not hold the state or a wrong slope would report a limit or a
growth law the machine never showed.
"""

from __future__ import annotations

import math

import pytest

from bench.keyed_state import keys_for
from bench.memory_watch import descendants, parent_of, parse_status
from bench.scale_grid import (
    GIB,
    MIB,
    WIDE_KEY_BYTES,
    bytes_and_keys_fit,
    default_points,
    fit_points,
    keys_point,
    linear_fit,
    local_slopes,
    loglog_slope,
    member_heap_needed,
    parse_bytes,
    parse_point,
    plan,
    size_point,
)

pytestmark = pytest.mark.unit


def test_points_are_named_and_sized_on_both_axes() -> None:
    gib = parse_point("1GiB")
    assert (gib.series, gib.label, gib.planned_bytes) == ("size", "1 GiB", GIB)
    assert gib.keys == GIB // WIDE_KEY_BYTES
    assert parse_point("10MiB").label == "10 MiB"
    keys = parse_point("5e7keys")
    assert (keys.series, keys.keys, keys.label) == ("keys", 50_000_000, "5e7 keys")
    assert keys.planned_bytes == 16 * 50_000_000
    assert parse_point("1e3 keys").label == "1e3 keys"
    for bad in ("1TB", "keys", "-1MiB", "0GiB"):
        with pytest.raises(ValueError, match="not a point"):
            parse_point(bad)


def test_the_default_grid_spans_the_issue_ranges() -> None:
    points = default_points()
    sizes = [p.planned_mib for p in points if p.series == "size"]
    keys = [p.keys for p in points if p.series == "keys"]
    assert min(sizes) == pytest.approx(10, rel=1e-3)
    assert max(sizes) == pytest.approx(4096, rel=1e-3)
    assert (min(keys), max(keys)) == (1_000, 50_000_000)
    # No point needs more keys than the key axis' end.
    assert max(p.keys for p in points) <= 50_000_000


def test_plan_sorts_by_size_drops_repeats_and_caps() -> None:
    points = [size_point(100), keys_point(1000), size_point(10), size_point(100)]
    assert [p.label for p in plan(points, None)] == ["1e3 keys", "10 MiB", "100 MiB"]
    assert [p.label for p in plan(points, 50)] == ["1e3 keys", "10 MiB"]


def test_the_running_sum_has_sixteen_bytes_a_key() -> None:
    assert keys_for(100) == 100 * MIB // 16
    assert keys_for(1, tag_bytes=108) == MIB // 128
    assert keys_for(0) == 1


def test_members_get_heap_for_the_state_and_its_backup() -> None:
    assert member_heap_needed(10 * MIB) == GIB
    for state in (GIB, 2 * GIB, 4 * GIB):
        heap = member_heap_needed(state)
        # Two copies over three members must fit in the old generation (2/3 of the heap).
        assert 2 * state / 3 < heap * 2 / 3
        assert heap % GIB == 0


def test_fit_chooses_the_heap_of_the_largest_point_that_fits() -> None:
    points = plan([size_point(mib) for mib in (10, 1024, 2048, 4096)], None)
    heap, fits = fit_points(points, budget=20 * GIB, driver_bytes=6 * GIB)
    assert [fits[p].reason is None for p in points] == [True, True, True, False]
    assert heap == member_heap_needed(2048 * MIB)
    reason = fits[points[-1]].reason or ""
    assert "3 members" in reason and "> 20.0 GiB available" in reason


def test_a_fixed_heap_refuses_states_it_cannot_hold() -> None:
    points = [size_point(10), size_point(1024)]
    heap, fits = fit_points(points, budget=100 * GIB, driver_bytes=GIB, member_heap=GIB)
    assert heap == GIB
    assert fits[points[0]].reason is None
    assert "heap per member" in (fits[points[1]].reason or "")


def test_sizes_in_jvm_syntax() -> None:
    assert parse_bytes("6g") == 6 * GIB
    assert parse_bytes("512m") == 512 * MIB
    assert parse_bytes("3072M") == 3 * GIB
    with pytest.raises(ValueError, match="not a size"):
        parse_bytes("six gigs")


def test_slopes_tell_linear_from_fixed_cost() -> None:
    sizes = [10.0, 100.0, 1000.0, 10000.0]
    assert loglog_slope(sizes, [2 * s for s in sizes]) == pytest.approx(1.0)
    assert loglog_slope(sizes, [s**1.5 for s in sizes]) == pytest.approx(1.5)
    # A fixed cost of 2 s on top of 50 MB/s: flat at first, linear later.
    seconds = [2 + s / 50 for s in sizes]
    bends = local_slopes(sizes, seconds)
    assert bends == sorted(bends)
    assert bends[0] < 0.3 and bends[-1] > 0.9
    assert loglog_slope([5.0, 5.0], [1.0, 2.0]) is None


def test_linear_fit_finds_fixed_cost_and_bandwidth() -> None:
    fixed, per_mib = linear_fit([10, 100, 1000], [2.2, 4, 22]) or (math.nan, math.nan)
    assert fixed == pytest.approx(2.0)
    assert per_mib == pytest.approx(0.02)
    assert linear_fit([1, 1], [1, 2]) is None


def test_bytes_and_keys_separate_with_both_series() -> None:
    # 1 s fixed, 10 s per GiB, 0.5 s per million keys; sizes from both series.
    mib = [10, 100, 1024, 15.3, 152.6, 763]
    mkeys = [0.082, 0.82, 8.39, 1, 10, 50]
    seconds = [1 + 10 * m / 1024 + 0.5 * k for m, k in zip(mib, mkeys, strict=True)]
    fixed, per_mib, per_mkey = bytes_and_keys_fit(mib, mkeys, seconds) or (0, 0, 0)
    assert (fixed, per_mib * 1024, per_mkey) == pytest.approx((1, 10, 0.5))
    # One series alone: keys follow bytes, so the two costs cannot be told apart.
    assert bytes_and_keys_fit([1, 2, 3], [2, 4, 6], [1, 2, 3]) is None


def test_proc_status_and_stat_parsing() -> None:
    status = "Name:\tjava\nVmHWM:\t  13568 kB\nVmRSS:\t   9000 kB\nThreads:\t42\n"
    assert parse_status(status) == {"VmHWM": 13568 * 1024, "VmRSS": 9000 * 1024}
    assert parent_of("4242 (python -m (x) y) S 17 4242 4242 0 -1") == 17
    tree = {1: [2, 3], 2: [4], 4: [5]}
    assert descendants(tree, 2) == [4, 5]
    assert descendants(tree, 1) == [2, 3, 4, 5]
    assert descendants(tree, 9) == []
