"""The watched job stands for a read only once the watch has shown the operator's last view.

A rule machine plays the API server (versions counted up), a watch that delivers them in
order but late, other writers (the driver), and the job's loop: a reconcile takes the watched
job when :class:`WatchedObject` says it is current and reads the server otherwise, may write,
and events arrive while it runs. The invariant is the one the executor relies on: whenever
the tracker says current, the watched job is not older than the version the operator last
knew (read or wrote). Versions are plain counters here so the model can order them; the
tracker only compares them for equality.
"""

from __future__ import annotations

import pytest
from hypothesis import settings
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from snapshot_operator.reconcile.freshness import WatchedDriver, WatchedObject

pytestmark = pytest.mark.unit


def test_nothing_is_current_before_a_reconcile() -> None:
    watched = WatchedObject()
    watched.delivered("1")
    assert not watched.current


def test_a_reconcile_that_read_the_watched_version_leaves_it_current() -> None:
    watched = WatchedObject()
    watched.reconciled("7", watched="7")
    assert watched.current


def test_a_write_is_current_once_its_event_arrives() -> None:
    watched = WatchedObject()
    watched.reconciled("8", watched="7")
    assert not watched.current
    watched.delivered("7")
    assert not watched.current
    watched.delivered("8")
    assert watched.current
    watched.delivered("9")  # later versions keep it current
    assert watched.current


def test_a_write_whose_event_came_before_its_response_is_current() -> None:
    watched = WatchedObject()
    watched.reconciled("7", watched="7")
    watched.delivered("8")  # the reconcile's own write, delivered while it ran
    watched.delivered("9")  # and another writer's, after it
    watched.reconciled("8", watched="9")
    assert watched.current


def test_an_unknown_version_makes_the_next_reconcile_read() -> None:
    watched = WatchedObject()
    watched.reconciled("7", watched="7")
    watched.reconciled(None, watched="7")
    assert not watched.current
    watched.delivered("8")
    assert not watched.current


def test_a_version_the_watch_has_not_shown_is_not_current() -> None:
    watched = WatchedObject()
    watched.delivered("5")
    watched.reconciled("4", watched="5")  # 4 read from the server; no order is known
    assert not watched.current


def _pod(version: str) -> dict[str, object]:
    return {"metadata": {"name": "job-driver-1", "resourceVersion": version}}


def test_a_watched_driver_is_a_view_once_the_watch_shows_what_the_decision_saw() -> None:
    driver = WatchedDriver("job-driver-1")
    driver.reconciled("5")  # read by GET; nothing delivered since it was named
    assert driver.view is None
    driver.delivered(_pod("5"), deleted=False)
    assert driver.view == _pod("5")
    driver.delivered(_pod("6"), deleted=False)
    driver.reconciled("6")
    assert driver.view == _pod("6")


def test_a_deleted_driver_has_no_view_and_an_unknown_version_none() -> None:
    driver = WatchedDriver("job-driver-1")
    driver.delivered(_pod("5"), deleted=False)
    driver.reconciled("5")
    driver.delivered(_pod("6"), deleted=True)
    assert driver.view is None
    driver.delivered(_pod("7"), deleted=False)
    driver.reconciled(None)  # the reconcile deleted or created Pods
    assert driver.view is None


class WatchAndLoop(RuleBasedStateMachine):
    """The API server, a lagging watch, another writer and the job's loop."""

    def __init__(self) -> None:
        super().__init__()
        self.server = 1  # the job's newest version on the server
        self.shown = 1  # the newest version the watch delivered: kopf's view of the job
        self.known = 0  # the version the operator last knew (read or wrote)
        self.tracker = WatchedObject()
        self.reading: int | None = None  # the version a reconcile under way works on
        self.left: int | None = None  # the version that reconcile leaves the job at

    @rule()
    def deliver(self) -> None:
        if self.shown < self.server:
            self.shown += 1
            self.tracker.delivered(str(self.shown))

    @rule()
    def another_writer(self) -> None:
        self.server += 1

    @precondition(lambda self: self.reading is None)
    @rule()
    def reconcile_starts(self) -> None:
        # The loop takes the watched job if current, else reads the server.
        self.reading = self.shown if self.tracker.current else self.server
        self.left = self.reading

    @precondition(lambda self: self.reading is not None and self.left is not None)
    @rule()
    def reconcile_writes(self) -> None:
        # A status write is locked on the version the decision worked on; a reconcile stops
        # at a write that lost the lock.
        if self.left == self.server:
            self.server += 1
            self.left = self.server
        else:
            self.left = None  # lost the lock: the version is not known

    @precondition(lambda self: self.reading is not None)
    @rule()
    def reconcile_ends(self) -> None:
        self.tracker.reconciled(
            str(self.left) if self.left is not None else None, watched=str(self.shown)
        )
        self.known = self.left if self.left is not None else self.known
        self.reading = None
        self.left = None

    @invariant()
    def current_means_not_older_than_known(self) -> None:
        if self.tracker.current:
            assert self.shown >= self.known, (
                f"watched version {self.shown} taken while the operator knew {self.known}"
            )


WatchAndLoop.TestCase.settings = settings(max_examples=300, stateful_step_count=40)
test_the_watched_job_is_never_older_than_the_operators_last_view = WatchAndLoop.TestCase
