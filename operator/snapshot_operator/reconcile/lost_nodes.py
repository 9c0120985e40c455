"""Driver Pods on nodes that stopped reporting: deleted at once, in every phase.

A Pod on a node that stops reporting stays Running in the API, and a graceful deletion of it
never ends: only that node's kubelet could confirm it. Every step that waits for the job's
drivers to stop would wait forever: a new execution (at most one driver may run), a restart
after a failure or a spec change, and the deletion of the job, which keeps its finalizer
until no driver may still write the snapshot maps. So this rule runs ahead of the phases, for
every driver Pod of the job, not only the current one: once the node controller has reported
a Pod not Ready for ``driverLostSeconds``, the Pod is deleted without a grace period.

That is safe because a driver that lost its Pod cannot commit: the next execution's id in the
status fences it when it writes the record, and the record fences its snapshot data and
sinks (``docs/concepts/protocol.md``), as for any zombie; its executors go with its Pod.
"""

from __future__ import annotations

from snapshot_operator.reconcile.actions import EventReason
from snapshot_operator.reconcile.plan import Plan


def delete_drivers_on_lost_nodes(plan: Plan) -> frozenset[str]:
    """Deletes at once the driver Pods whose node stopped reporting ``driverLostSeconds`` ago.

    Pods whose node stopped reporting more recently get a requeue for when their time is up.

    Returns:
        The names of the Pods deleted at once (the API forgets them, their drivers may run).
    """
    limit = plan.settings.driver_lost_seconds
    lost: set[str] = set()
    for pod in plan.obs.pods:
        since = pod.node_lost_since
        if since is None or not pod.may_run:
            continue
        lost_for = (plan.now - since).total_seconds()
        if lost_for < limit:
            plan.requeue(max(1, int(limit - lost_for) + 1))
            continue
        plan.delete_pod_at_once(pod)
        plan.event(
            EventReason.DRIVER_NODE_LOST,
            f"Driver Pod's node stopped reporting, deleted the Pod at once to start a new "
            f"execution; fencing stops the old driver if it comes back pod={pod.name} "
            f"executionId={pod.execution_id} notReadySeconds={int(lost_for)}",
        )
        lost.add(pod.name)
    if lost:
        plan.requeue(plan.settings.store_retry_seconds)
    return frozenset(lost)
