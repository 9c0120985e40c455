"""The job's loop around the executor: what one reconcile hands the next.

The handlers' registration with kopf is exercised by ``tests/integration/test_operator.py``;
here the loop's reconcile runs against the in-memory gateways of
:mod:`tests.unit.operator.fake_gateways`.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Iterator
from typing import Any

import kopf
import pytest

from snapshot_operator.executing import Outcome, Seen, Services
from snapshot_operator.handlers import (
    _NoDiffBase,
    _QuietWakes,
    _reconcile,
    _reconcile_job_and_exports,
    configure,
)
from snapshot_operator.settings import OperatorSettings
from tests.unit.operator.fake_gateways import FakeKubernetes, FakeStore
from tests.unit.operator.specs import VALID_SPEC

pytestmark = pytest.mark.unit

DRIVER_READ_WAIT_SECONDS = 2.0
"""How long a job read waits for the driver's read to start before it goes on without."""


class RacedKubernetes(FakeKubernetes):
    """Records, for every read of the job, whether the driver's read was already under way."""

    def __init__(self) -> None:
        super().__init__(VALID_SPEC)
        self.driver_reading = threading.Event()
        self.driver_read_first: list[bool] = []

    def read_pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Signals the read, then reads."""
        self.driver_reading.set()
        return super().read_pod(namespace, name)

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Waits a while for the driver's read to start: it need not wait for this one."""
        self.driver_read_first.append(self.driver_reading.wait(DRIVER_READ_WAIT_SECONDS))
        return super().read_job(namespace, name)


@pytest.fixture
def kube() -> RacedKubernetes:
    return RacedKubernetes()


@pytest.fixture
def services(kube: RacedKubernetes) -> Services:
    settings = OperatorSettings(
        namespaces=("default",), store_members=("hz-0:5701",), store_cluster_name="store"
    )
    return Services(kube=kube, store=FakeStore(), settings=settings)


def _loop(services: Services, seen: Seen | None) -> Outcome:
    return _reconcile_job_and_exports(services, "default", "wordcount", seen)


def test_the_driver_the_last_reconcile_saw_is_read_with_the_job_not_after_it(
    kube: RacedKubernetes, services: Services
) -> None:
    kube.driver_reading.set()  # the reconciles up to RUNNING are not the ones looked at
    outcome = _loop(services, None)
    (pod,) = kube.pods
    kube.set_pod(pod, "Running")
    outcome = _loop(services, outcome.seen)
    kube.report_pipeline()
    outcome = _loop(services, outcome.seen)
    assert kube.status["phase"] == "RUNNING"
    assert outcome.seen is not None and outcome.seen.driver_pod == pod
    assert kube.job is not None
    kube.job["spec"]["suspend"] = True
    kube.job["metadata"]["generation"] = 2
    kube.driver_reading.clear()
    kube.driver_read_first.clear()
    kube.pod_reads.clear()
    _loop(services, outcome.seen)
    assert kube.status["termination"]["mode"] == "SUSPEND_GRACEFUL"
    assert kube.driver_read_first == [True], "the job's read did not wait for the driver's"
    assert kube.pod_reads == [pod]


def test_kopf_copies_no_watched_object_to_compare_it_with_nothing(kube: RacedKubernetes) -> None:
    # kopf builds this for every watch event before it calls a handler; nothing reads it.
    assert kube.job is not None
    essence = _NoDiffBase().build(body=kopf.Body(kube.job), extra_fields=["status.phase"])
    assert essence == {}


@pytest.fixture
def kopf_objects() -> Iterator[logging.Logger]:
    logger = logging.getLogger("kopf.objects")
    filters = list(logger.filters)
    yield logger
    logger.filters[:] = filters


def test_the_handlers_that_only_wake_a_loop_log_no_success_per_event(
    services: Services, kopf_objects: logging.Logger
) -> None:
    configure(settings=kopf.OperatorSettings(), memo=kopf.Memo(services=services))
    configure(settings=kopf.OperatorSettings(), memo=kopf.Memo(services=services))
    assert sum(isinstance(f, _QuietWakes) for f in kopf_objects.filters) == 1

    def logged(level: int, message: str) -> bool:
        return bool(
            kopf_objects.filter(
                kopf_objects.makeRecord("kopf.objects", level, __file__, 1, message, None, None)
            )
        )

    for handler in ("job_changed", "driver_pod_changed", "export_changed"):
        assert not logged(logging.INFO, f"Handler {handler!r} succeeded.")
        assert logged(logging.ERROR, f"Handler {handler!r} failed with an exception.")
    assert logged(logging.INFO, "Handler 'delete' succeeded.")
    assert logged(logging.INFO, "Handler 'supervise' succeeded.")


class FailingKubernetes(RacedKubernetes):
    """Fails every read of the job, as an API error the reconcile does not absorb."""

    def read_job(self, namespace: str, name: str) -> dict[str, Any] | None:
        """Raises."""
        raise RuntimeError("the API server is gone")


def test_a_failed_reconcile_leaves_the_job_and_driver_versions_unknown() -> None:
    kube = FailingKubernetes()
    settings = OperatorSettings(
        namespaces=("default",), store_members=("hz-0:5701",), store_cluster_name="store"
    )
    services = Services(kube=kube, store=FakeStore(), settings=settings)
    seen = Seen("uid-1", "wordcount-driver-1", ("hz-0:5701",), "7", "3")
    outcome = asyncio.run(_reconcile(services, "default", "wordcount", seen))
    # It may have written, created or deleted before it failed: the next one reads both.
    assert outcome.seen == Seen("uid-1", "wordcount-driver-1", ("hz-0:5701",), None, None)
    assert outcome.requeue_after == settings.decision.store_retry_seconds
