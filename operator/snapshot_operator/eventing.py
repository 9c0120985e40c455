"""Emits Kubernetes Events (``events.k8s.io/v1``) on a SnapshotJob.

Events are what ``kubectl describe sj`` shows and what alerting watches; the Hazelcast
operator's users missed them most. The reasons are the decision's fixed set, the type follows
from the reason. An Event that cannot be written is logged and dropped: it must never hold
back the reconcile that produced it.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime
from typing import Any

from kubernetes import client

from snapshot_operator.api.crd import GROUP, KIND, VERSION
from snapshot_operator.reconcile import EmitEvent, JobRef

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = f"{GROUP}/operator"
_MAX_NOTE = 1024


def emit_event(api: client.ApiClient, job: JobRef, event: EmitEvent, instance: str) -> None:
    """Creates one Event regarding the job; failures are logged, not raised."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{job.name}.{uuid.uuid4().hex[:16]}", "namespace": job.namespace},
        "eventTime": now,
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": "Reconcile",
        "reason": event.reason.value,
        "type": event.event_type.value,
        "note": event.message[:_MAX_NOTE],
        "regarding": {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "namespace": job.namespace,
            "name": job.name,
            "uid": job.uid,
        },
    }
    try:
        events: Any = client.EventsV1Api(api)
        events.create_namespaced_event(job.namespace, body)
    except client.exceptions.ApiException as error:
        log.warning(
            "Cannot emit event namespace=%s name=%s reason=%s status=%s",
            job.namespace,
            job.name,
            event.reason.value,
            error.status,
        )
