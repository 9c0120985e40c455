"""Whether the job and its driver Pod as the watch last delivered them may stand for reads.

A reconcile reads the job first, and a GET from etcd was the slowest of its reads (7 to 9 ms
of the 9 to 12 between the watch event and the status patch, ``bench/reconcile_latency.py``).
kopf already holds the job as its watch last delivered it, and the status patch is locked on
the ``resourceVersion`` the decision read: a status write made on a job that changed since
fails with a conflict, and the job is read again. What the lock does not cover are the other
writes (Pods created or deleted, maps destroyed) and the decisions that write nothing, and
the view most likely to mislead those is one older than the operator's own last write (the
write succeeded, its watch event has not arrived, and the next reconcile, woken by a Pod,
would decide as if it had not happened). So a decision that acts beyond the status is always
made again from a GET (:func:`snapshot_operator.executing.reconcile_once`), and the watched
job is taken only once the watch has shown the version the operator last left the job at.

A watch delivers an object's versions in order: once it has delivered that version, every
later delivery is newer. This module keeps that bookkeeping, with no I/O; the kopf handlers
feed it from the event loop (:mod:`snapshot_operator.handlers`). The job's loop takes the
watched objects only for a reconcile that a watch event woke: a reconcile that is due (a
requeue, the resync) reads them, so an object deleted while the watch was down (kopf re-lists
after "410 Gone" and delivers no DELETED for what went) is noticed within a resync.

The current driver Pod, the other GET of a reconcile (6 to 7 ms once the job's was gone), is
kept the same way: the operator never writes it, but a previous decision may have been made
on a GET newer than the watch's view, and that view must not lead the next one back. A
reconcile that creates or deletes Pods, or names a new driver, leaves its version unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class WatchedObject:
    """Tracks whether the watch has caught up with the operator's last view of one object.

    The versions are compared only for equality: Kubernetes defines no order on them.
    """

    def __init__(self) -> None:
        self._expected: str | None = None
        self._caught_up = False
        self._delivered: set[str] = set()

    @property
    def current(self) -> bool:
        """Whether the watched object is at least as new as the operator's last view of it."""
        return self._caught_up

    def delivered(self, version: str | None) -> None:
        """Records a watch event of the object, with the ``resourceVersion`` it carried."""
        if version is None:
            return
        self._delivered.add(version)
        if version == self._expected:
            self._caught_up = True

    def reconciled(self, version: str | None, watched: str | None) -> None:
        """Records the version a reconcile left the object at, and the watched one's now.

        Args:
            version: The object's ``resourceVersion`` after the reconcile: its last write's,
                or the one its decision saw if it wrote nothing; None if not known (a write
                lost its lock, Pods were created), which makes the next reconcile read it.
            watched: The ``resourceVersion`` of the object as the watch last delivered it.
        """
        # Delivered while the reconcile ran (a write's event often comes before its response):
        # then every later delivery is newer, and the watched object is one of them or it.
        self._caught_up = version is not None and (version == watched or version in self._delivered)
        self._expected = version
        self._delivered = set()


def resource_version(body: Mapping[str, Any] | None) -> str | None:
    """The ``resourceVersion`` of an object as delivered, None if it carries none."""
    version = ((body or {}).get("metadata") or {}).get("resourceVersion")
    return version if isinstance(version, str) else None


class WatchedDriver:
    """The job's current driver Pod as its watch delivered it, with its freshness.

    Args:
        name: The Pod's name (a driver's name is never reused by a later execution).
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.freshness = WatchedObject()
        self._body: dict[str, Any] | None = None

    def delivered(self, body: Mapping[str, Any], deleted: bool) -> None:
        """Records a watch event of the Pod; a deletion leaves no view (the Pod is read)."""
        self._body = None if deleted else dict(body)
        self.freshness.delivered(resource_version(body))

    @property
    def view(self) -> dict[str, Any] | None:
        """The Pod as delivered if it may stand for a read, else None."""
        return self._body if self.freshness.current else None

    def reconciled(self, version: str | None) -> None:
        """Records the Pod's version as the reconcile's performed decision saw it."""
        self.freshness.reconciled(version, resource_version(self._body))
