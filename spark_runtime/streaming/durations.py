"""Spark's duration strings (``"10 seconds"``, ``"1 minute 30 seconds"``) as whole seconds.

``withWatermark`` and ``F.window`` take durations as interval text; the state operators keep
them as whole seconds. Parsing here, without a Spark session, lets a malformed or sub-second
duration fail when the pipeline is defined, with the text the user wrote in the message.
"""

from __future__ import annotations

import re

_UNITS = {
    "week": 7 * 86400.0,
    "day": 86400.0,
    "hour": 3600.0,
    "minute": 60.0,
    "second": 1.0,
    "millisecond": 1e-3,
    "microsecond": 1e-6,
}
_PART = re.compile(r"\s*(-?\d+(?:\.\d+)?)\s*([a-z]+)\s*", re.IGNORECASE)


def parse_seconds(text: str, what: str) -> float:
    """Returns the length of a duration such as ``"1 minute 30 seconds"`` in seconds.

    Args:
        text: The duration, as ``withWatermark`` or ``F.window`` take it; an optional leading
            ``interval`` is allowed.
        what: What the duration is, for the error message.

    Raises:
        ValueError: If ``text`` is not a sequence of ``<number> <unit>`` parts.
    """
    body = text.strip()
    if body.lower().startswith("interval"):
        body = body[len("interval") :]
    position, total, parts = 0, 0.0, 0
    while position < len(body):
        match = _PART.match(body, position)
        unit = match.group(2).lower().removesuffix("s") if match else ""
        if match is None or unit not in _UNITS:
            raise ValueError(
                f"{what} {text!r} is not a duration: write it as Spark does, e.g. '10 seconds' "
                f"or '1 minute 30 seconds' (units: {', '.join(_UNITS)})"
            )
        total += float(match.group(1)) * _UNITS[unit]
        parts += 1
        position = match.end()
    if parts == 0:
        raise ValueError(f"{what} is empty: give a duration such as '10 seconds'")
    return total


def whole_seconds(text: str, what: str, *, minimum: int) -> int:
    """Returns :func:`parse_seconds` as an int, rejecting fractions and values below ``minimum``.

    Raises:
        ValueError: If the duration is malformed, not whole seconds or below ``minimum``.
    """
    seconds = parse_seconds(text, what)
    if seconds != int(seconds):
        raise ValueError(f"{what} {text!r} must be whole seconds: state operators keep seconds")
    if seconds < minimum:
        raise ValueError(f"{what} {text!r} must be at least {minimum} seconds")
    return int(seconds)
