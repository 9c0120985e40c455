"""The failpoint registry: names, parsing of SJ_FAILPOINTS, firing."""

from __future__ import annotations

import pytest

from snapshot_protocol import (
    FAILPOINTS,
    FAILPOINTS_ENV_VAR,
    FailpointAction,
    FailpointCrash,
    FailpointIndeterminate,
    Failpoints,
    IndeterminateChunkWrite,
    IndeterminateRecordWrite,
)

pytestmark = pytest.mark.unit


def test_every_step_of_both_procedures_has_a_failpoint_before_and_after() -> None:
    names = [failpoint.name for failpoint in FAILPOINTS]
    expected = [
        f"{procedure}.{position}_step_{step}"
        for procedure, steps in (("take", 10), ("restore", 5))
        for step in range(1, steps + 1)
        for position in ("before", "after")
    ]
    assert names == expected
    assert len(set(names)) == 30


def test_indeterminate_is_allowed_only_where_a_write_can_be_indeterminate() -> None:
    indeterminate = {
        (failpoint.procedure, failpoint.step)
        for failpoint in FAILPOINTS
        if FailpointAction.INDETERMINATE in failpoint.actions
    }
    assert indeterminate == {("take", 2), ("take", 4), ("take", 5), ("take", 7), ("restore", 2)}
    assert all(FailpointAction.CRASH in failpoint.actions for failpoint in FAILPOINTS)


def test_pause_is_allowed_at_every_failpoint() -> None:
    assert all(FailpointAction.PAUSE in failpoint.actions for failpoint in FAILPOINTS)
    failpoints = Failpoints(pause=lambda name: None)
    for failpoint in FAILPOINTS:
        failpoints.arm(failpoint.name, FailpointAction.PAUSE)
    assert set(failpoints.armed.values()) == {FailpointAction.PAUSE}
    assert len(failpoints.armed) == 30


def test_parse_env_var() -> None:
    failpoints = Failpoints.from_env(
        {FAILPOINTS_ENV_VAR: " take.after_step_7=crash, take.before_step_5=indeterminate ,"}
    )
    assert failpoints.armed == {
        "take.after_step_7": FailpointAction.CRASH,
        "take.before_step_5": FailpointAction.INDETERMINATE,
    }
    assert Failpoints.from_env({}).armed == {}


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("take.after_step_7", "name=action"),
        ("take.after_step_7=explode", "action must be one of crash, indeterminate, pause"),
        ("take.after_step_11=crash", "unknown failpoint"),
        ("take.after_step_3=indeterminate", "does not allow 'indeterminate'"),
        ("restore.before_step_4=indeterminate", "does not allow 'indeterminate'"),
    ],
)
def test_parse_rejects_bad_specs(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        Failpoints.parse(spec)


def test_pause_without_a_hook_is_refused_when_armed() -> None:
    # Silently skipping the pause would let a zombie test pass without any zombie.
    with pytest.raises(ValueError, match="no pause hook"):
        Failpoints.parse("take.before_step_5=pause")
    with pytest.raises(ValueError, match="no pause hook"):
        Failpoints({"take.before_step_5": FailpointAction.PAUSE})
    with pytest.raises(ValueError, match="no pause hook"):
        Failpoints().arm("restore.after_step_2", FailpointAction.PAUSE)


def test_pause_calls_the_hook_once_with_the_name_and_goes_on() -> None:
    paused: list[str] = []
    failpoints = Failpoints.from_env(
        {FAILPOINTS_ENV_VAR: "take.before_step_5=pause,take.after_step_5=indeterminate"},
        pause=paused.append,
    )
    assert failpoints.armed == {
        "take.before_step_5": FailpointAction.PAUSE,
        "take.after_step_5": FailpointAction.INDETERMINATE,
    }
    failpoints.hit("take.after_step_4")
    assert paused == []
    failpoints.hit("take.before_step_5")  # returns: the process carries on at this point
    assert paused == ["take.before_step_5"]
    failpoints.hit("take.before_step_5")
    assert paused == ["take.before_step_5"]
    assert failpoints.armed == {"take.after_step_5": FailpointAction.INDETERMINATE}
    with pytest.raises(FailpointIndeterminate):
        failpoints.hit("take.after_step_5")


def test_a_hook_that_raises_propagates_and_the_failpoint_stays_disarmed() -> None:
    def refuse(name: str) -> None:
        raise RuntimeError(f"cannot pause at {name}")

    failpoints = Failpoints({"take.after_step_8": FailpointAction.PAUSE}, pause=refuse)
    with pytest.raises(RuntimeError, match=r"cannot pause at take\.after_step_8"):
        failpoints.hit("take.after_step_8")
    assert failpoints.armed == {}


def test_crash_fires_once_and_is_not_an_exception() -> None:
    failpoints = Failpoints({"restore.after_step_4": FailpointAction.CRASH})
    failpoints.hit("restore.after_step_3")
    with pytest.raises(FailpointCrash) as crash:
        failpoints.hit("restore.after_step_4")
    assert crash.value.failpoint == "restore.after_step_4"
    # No ``except Exception`` in the protocol or a participant may swallow a crash.
    assert not isinstance(crash.value, Exception)
    failpoints.hit("restore.after_step_4")
    assert failpoints.armed == {}


def test_indeterminate_is_an_indeterminate_write_of_either_store() -> None:
    failpoints = Failpoints()
    failpoints.arm("take.after_step_2", FailpointAction.INDETERMINATE)
    with pytest.raises(FailpointIndeterminate) as indeterminate:
        failpoints.hit("take.after_step_2")
    assert isinstance(indeterminate.value, IndeterminateRecordWrite)
    assert isinstance(indeterminate.value, IndeterminateChunkWrite)


def test_disarm_all_leaves_no_failpoint_to_fire() -> None:
    armed = ("take.after_step_1", "take.before_step_5", "restore.after_step_2")
    failpoints = Failpoints.parse(
        "take.after_step_1=crash,take.before_step_5=indeterminate,restore.after_step_2=crash"
    )
    assert set(failpoints.armed) == set(armed)

    failpoints.disarm_all()

    assert failpoints.armed == {}
    for name in armed:
        failpoints.hit(name)  # raises FailpointCrash / FailpointIndeterminate if still armed
    # The registry still works: a failpoint armed again fires.
    failpoints.arm("take.after_step_1", FailpointAction.CRASH)
    with pytest.raises(FailpointCrash):
        failpoints.hit("take.after_step_1")
