"""Emits Kubernetes Events (``events.k8s.io/v1``) on a SnapshotJob or the store.

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

from snapshot_operator.reconcile import EmitEvent, JobRef
from snapshotjob_contract.resource import GROUP, KIND, VERSION

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = f"{GROUP}/operator"
_MAX_NOTE = 1024


def emit_event(api: client.ApiClient, job: JobRef, event: EmitEvent, instance: str) -> None:
    """Creates one Event regarding the job; failures are logged, not raised."""
    create_event(
        api,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": KIND,
            "namespace": job.namespace,
            "name": job.name,
            "uid": job.uid,
        },
        action="Reconcile",
        reason=event.reason.value,
        event_type=event.event_type.value,
        note=event.message,
        instance=instance,
    )


def create_event(
    api: client.ApiClient,
    regarding: dict[str, str],
    *,
    action: str,
    reason: str,
    event_type: str,
    note: str,
    instance: str,
) -> None:
    """Creates one Event regarding any object; failures are logged, not raised.

    Args:
        api: Kubernetes API client.
        regarding: The object reference (apiVersion, kind, namespace, name, uid).
        action: What the operator did, e.g. Reconcile.
        reason: The CamelCase reason.
        event_type: Normal or Warning.
        note: The human-readable message (cut to 1024 characters).
        instance: This operator replica, for ``reportingInstance``.
    """
    namespace, name = regarding["namespace"], regarding["name"]
    body = {
        "apiVersion": "events.k8s.io/v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{uuid.uuid4().hex[:16]}", "namespace": namespace},
        "eventTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        "reportingController": REPORTING_CONTROLLER,
        "reportingInstance": instance[:128],
        "action": action,
        "reason": reason,
        "type": event_type,
        "note": note[:_MAX_NOTE],
        "regarding": regarding,
    }
    try:
        events: Any = client.EventsV1Api(api)
        events.create_namespaced_event(namespace, body)
    except client.exceptions.ApiException as error:
        log.warning(
            "Cannot emit event namespace=%s name=%s reason=%s status=%s",
            namespace,
            name,
            reason,
            error.status,
        )
