"""The scale curve's plan: its points, what fits the machine, and how cost grows.

``bench.scale_curve`` runs a grid of keyed states; which points it runs, the members' heap it
chooses, which points it reports as not fitting and the growth law it prints all follow from
the arithmetic here. Kept apart from the processes it measures so that it can be tested on its
own (``tests/unit/test_scale_curve.py``): pure code, no process, no I/O.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from bench.keyed_state import STATE_PARTITIONS, SUM_KEY_BYTES, TAG_OVERHEAD_BYTES

MIB = 2**20
GIB = 2**30

WIDE_KEY_BYTES = 128
"""Arrow bytes per key of the ``size`` series: the running sum plus a 108-character tag."""

TAG_BYTES = WIDE_KEY_BYTES - SUM_KEY_BYTES - TAG_OVERHEAD_BYTES

SIZE_MIB = (10, 100, 1024, 2048, 4096)
KEY_COUNTS = (10**3, 10**5, 10**7, 5 * 10**7)

# What the machine must hold for a point (see fit_points); rough, on the safe side.
MEMBER_BASE_BYTES = GIB // 4
"""A member's heap before it holds data."""
MEMBER_OLD_GEN_SHARE = 0.6
"""The share of a member's heap its data may fill: ParallelGC's old generation is 2/3."""
MEMBER_SKEW = 1.15
"""The fullest member's data over the mean: a few hundred 4 MiB chunks over 271 partitions."""
WORKERS = 2
"""Python workers at once: ``local[2]`` runs two tasks."""
WORKER_PARTITION_COPIES = 2.0
"""A task holds its whole partition's chunks, and the batches they came from or go to."""
WORKER_BASE_BYTES = 200 * MIB
JVM_OFF_HEAP_BYTES = GIB
"""The driver JVM beyond its heap: metaspace, threads, Netty and Arrow buffers."""
DRIVER_PYTHON_BYTES = GIB // 2
"""This process: the driver's Python side and the raw baseline's client."""


# --- the grid ---------------------------------------------------------------------------


@dataclass(frozen=True, order=True)
class Point:
    """One state to measure.

    Attributes:
        planned_bytes: Arrow bytes the state is planned to hold (the first field, so points
            sort by size).
        series: ``size`` (keys 128 bytes wide) or ``keys`` (the 16-byte running sum).
        keys: Keys in the state.
        tag_bytes: The width of each key's tag (0 in the ``keys`` series).
        label: How the point is named: ``1 GiB``, ``1e7 keys``.
    """

    planned_bytes: int
    series: str
    keys: int
    tag_bytes: int
    label: str

    @property
    def planned_mib(self) -> float:
        """The planned size in MiB."""
        return self.planned_bytes / MIB


def size_point(mib: float) -> Point:
    """A point of the ``size`` series: ``mib`` MiB of keys :data:`WIDE_KEY_BYTES` wide."""
    keys = max(1, int(mib * MIB) // WIDE_KEY_BYTES)
    label = f"{mib / 1024:g} GiB" if mib >= 1024 else f"{mib:g} MiB"
    return Point(keys * WIDE_KEY_BYTES, "size", keys, TAG_BYTES, label)


def keys_point(keys: int) -> Point:
    """A point of the ``keys`` series: ``keys`` running sums of 16 bytes."""
    exponent = math.floor(math.log10(keys))
    mantissa = keys / 10**exponent
    label = f"{mantissa:g}e{exponent} keys" if mantissa != 1 else f"1e{exponent} keys"
    return Point(keys * SUM_KEY_BYTES, "keys", keys, 0, label)


_SPEC = re.compile(r"^\s*([0-9.]+(?:e[0-9]+)?)\s*(mib|gib|keys)\s*$", re.IGNORECASE)


def parse_point(spec: str) -> Point:
    """Reads a point named on the command line: ``10MiB``, ``1GiB``, ``1e5keys``.

    Raises:
        ValueError: If ``spec`` names no point.
    """
    match = _SPEC.match(spec)
    if match is None:
        raise ValueError(f"{spec!r} is not a point: write e.g. 10MiB, 1GiB or 1e5keys")
    number, unit = float(match.group(1)), match.group(2).lower()
    if number <= 0:
        raise ValueError(f"{spec!r} is not a point: the number must be positive")
    if unit == "keys":
        return keys_point(int(number))
    return size_point(number * 1024 if unit == "gib" else number)


def default_points() -> list[Point]:
    """Both series: sizes 10 MiB to 4 GiB and key counts 10^3 to 5*10^7."""
    return [size_point(mib) for mib in SIZE_MIB] + [keys_point(k) for k in KEY_COUNTS]


def plan(points: Sequence[Point], max_mib: float | None) -> list[Point]:
    """The points to consider, smallest first, without those over ``max_mib`` or repeated."""
    kept = {p for p in points if max_mib is None or p.planned_mib <= max_mib}
    return sorted(kept)


# --- what fits the machine --------------------------------------------------------------


@dataclass(frozen=True)
class Fit:
    """Whether a point fits, and the memory it needs.

    Attributes:
        member_heap: The heap each member needs for the state and its backup (whole GiB).
        total: Bytes the machine must hold with the members at the chosen heap.
        reason: Why it does not fit; None when it does.
    """

    member_heap: int
    total: int
    reason: str | None


def member_heap_needed(state_bytes: int) -> int:
    """The heap (whole GiB, at least 1) a member needs for its share of the state and backup.

    One backup doubles the state; three members share it, the fullest one a bit more than
    a third, and the data may fill the old generation only.
    """
    data = 2 * state_bytes / 3 * MEMBER_SKEW
    need = MEMBER_BASE_BYTES + data / MEMBER_OLD_GEN_SHARE
    return max(1, math.ceil(need / GIB)) * GIB


def workers_needed(state_bytes: int) -> int:
    """What the Python workers hold at once: each task takes one state partition whole."""
    partition = state_bytes / STATE_PARTITIONS
    return int(WORKERS * (WORKER_BASE_BYTES + WORKER_PARTITION_COPIES * partition))


def machine_needed(state_bytes: int, member_heap: int, driver_bytes: int) -> int:
    """Bytes a point takes on the machine: members, driver JVM, Python workers, this process."""
    return (
        3 * member_heap
        + driver_bytes
        + JVM_OFF_HEAP_BYTES
        + workers_needed(state_bytes)
        + DRIVER_PYTHON_BYTES
    )


def fit_points(
    points: Sequence[Point], budget: int, driver_bytes: int, member_heap: int | None = None
) -> tuple[int, dict[Point, Fit]]:
    """Chooses the members' heap and tells which points fit in ``budget`` bytes.

    Args:
        points: The points, smallest first.
        budget: The memory the run may use (``MemAvailable`` less a reserve).
        driver_bytes: The driver JVM's heap.
        member_heap: A fixed member heap; None chooses the smallest that holds the largest
            point that fits.

    Returns:
        The members' heap in bytes and each point's :class:`Fit`.
    """
    fits: dict[Point, Fit] = {}
    chosen = member_heap or GIB
    for point in points:
        need = member_heap_needed(point.planned_bytes)
        heap = member_heap if member_heap is not None else max(chosen, need)
        total = machine_needed(point.planned_bytes, heap, driver_bytes)
        reason = None
        if need > heap:
            reason = (
                f"needs {need / GIB:.0f} GiB heap per member (the state and its backup: "
                f"{2 * point.planned_bytes / 3 / GIB:.2f} GiB per member), members have "
                f"{heap / GIB:.0f} GiB"
            )
        elif total > budget:
            reason = (
                f"needs {total / GIB:.1f} GiB: 3 members x {heap / GIB:.0f} GiB heap (the "
                f"state and its backup) + driver JVM {driver_bytes / GIB:.0f} GiB heap + "
                f"{JVM_OFF_HEAP_BYTES / GIB:.0f} GiB off-heap + Python workers "
                f"{workers_needed(point.planned_bytes) / GIB:.1f} GiB + this process "
                f"{DRIVER_PYTHON_BYTES / GIB:.1f} GiB > {budget / GIB:.1f} GiB available"
            )
        elif member_heap is None:
            chosen = heap
        fits[point] = Fit(need, total, reason)
    return chosen, fits


def parse_bytes(text: str) -> int:
    """``6g``, ``512m``, ``2048k`` (the JVM's ``-Xmx`` syntax) in bytes."""
    match = re.fullmatch(r"\s*([0-9]+)\s*([kmgt]?)b?\s*", text.lower())
    if match is None:
        raise ValueError(f"{text!r} is not a size like 6g or 512m")
    scale = {"": 1, "k": 2**10, "m": 2**20, "g": 2**30, "t": 2**40}[match.group(2)]
    return int(match.group(1)) * scale


# --- growth -----------------------------------------------------------------------------


def loglog_slope(xs: Sequence[float], ys: Sequence[float]) -> float | None:
    """The least-squares slope of log y against log x: how y grows as a power of x.

    1 is linear growth, below 1 a fixed cost still shows, above 1 worse than linear. None
    with fewer than two distinct positive x.
    """
    pairs = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len({x for x, _ in pairs}) < 2:
        return None
    mean_x = sum(x for x, _ in pairs) / len(pairs)
    mean_y = sum(y for _, y in pairs) / len(pairs)
    covariance = sum((x - mean_x) * (y - mean_y) for x, y in pairs)
    variance = sum((x - mean_x) ** 2 for x, _ in pairs)
    return covariance / variance


def local_slopes(xs: Sequence[float], ys: Sequence[float]) -> list[float]:
    """The log-log slope between each two neighbouring points (sorted by x): where it bends."""
    pairs = sorted(zip(xs, ys, strict=True))
    return [
        math.log(y1 / y0) / math.log(x1 / x0)
        for (x0, y0), (x1, y1) in pairwise(pairs)
        if x1 > x0 > 0 and y0 > 0 and y1 > 0
    ]


def linear_fit(xs: Sequence[float], ys: Sequence[float]) -> tuple[float, float] | None:
    """Least squares ``y = fixed + per_x * x``; returns ``(fixed, per_x)``, or None."""
    if len(set(xs)) < 2:
        return None
    mean_x, mean_y = sum(xs) / len(xs), sum(ys) / len(ys)
    per_x = sum((x - mean_x) * (y - mean_y) for x, y in zip(xs, ys, strict=True)) / sum(
        (x - mean_x) ** 2 for x in xs
    )
    return mean_y - per_x * mean_x, per_x


def bytes_and_keys_fit(
    mib: Sequence[float], million_keys: Sequence[float], seconds: Sequence[float]
) -> tuple[float, float, float] | None:
    """Least squares ``seconds = fixed + per_mib * mib + per_mkey * million_keys``.

    With both series in the points the two costs separate: the ``keys`` series has eight
    times the keys per byte of the ``size`` series. None when they do not (fewer than three
    points, or every point with the same keys per byte).

    Returns:
        ``(fixed, per_mib, per_mkey)``.
    """
    if len(seconds) < 3:
        return None
    import numpy as np

    design = np.column_stack([np.ones(len(mib)), np.asarray(mib), np.asarray(million_keys)])
    if np.linalg.matrix_rank(design) < 3:
        return None
    solution = np.linalg.lstsq(design, np.asarray(seconds), rcond=None)[0]
    return float(solution[0]), float(solution[1]), float(solution[2])
