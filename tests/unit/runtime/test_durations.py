"""Spark's duration strings as the state operators keep them (no Spark session needed)."""

from __future__ import annotations

import pytest

from spark_runtime.streaming.durations import parse_seconds, whole_seconds


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("10 seconds", 10.0),
        ("1 second", 1.0),
        ("1 minute 30 seconds", 90.0),
        ("2 HOURS", 7200.0),
        ("interval 1 day", 86400.0),
        ("1 week", 604800.0),
        ("500 milliseconds", 0.5),
        ("0 second", 0.0),
    ],
)
def test_spark_durations_parse_to_seconds(text: str, seconds: float) -> None:
    assert parse_seconds(text, "Delay") == seconds


@pytest.mark.parametrize("text", ["", "10", "ten seconds", "10 parsecs", "seconds", "5 s"])
def test_what_is_not_a_duration_says_so_with_the_text(text: str) -> None:
    with pytest.raises(ValueError, match="Delay") as caught:
        parse_seconds(text, "Delay")
    assert "duration" in str(caught.value)


def test_state_operators_take_whole_seconds_above_a_minimum() -> None:
    assert whole_seconds("1 minute", "The window", minimum=1) == 60
    with pytest.raises(ValueError, match="must be whole seconds"):
        whole_seconds("1500 milliseconds", "The window", minimum=1)
    with pytest.raises(ValueError, match="at least 1 seconds"):
        whole_seconds("0 seconds", "The window", minimum=1)
