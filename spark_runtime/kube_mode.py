"""Kubernetes mode: the job from its SnapshotJob, its execution record in the job's status.

The operator starts the driver Pod with the job's namespace, name and the execution id it
wrote to ``status.execution.id``; everything else the driver reads from the SnapshotJob. The
record is kept in ``status.executionRecord``
(:class:`~spark_runtime.kube_record_store.KubernetesRecordStore`, fenced by that id), the
operator's termination and export requests are polled from the status
(:class:`~spark_runtime.kube_requests.OperatorRequestPoller`), and exports are listed in
``status.exportedSnapshots`` for the operator to see.

Only this mode needs the Kubernetes client, so the command line imports this module only
when ``--kubernetes`` is given.
"""

from __future__ import annotations

import argparse
import json
import os
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from kubernetes import client as kube_client
from kubernetes import config as kube_config

from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import (
    DriverSettings,
    ExportedSnapshot,
    ExportPoll,
    PublishExport,
    TerminationPoll,
)
from spark_runtime.execution import DEFAULT_STATE_PARTITIONS, BadInput, JobConfig
from spark_runtime.guarantee import Guarantee
from spark_runtime.kube_record_store import GROUP, PLURAL, VERSION, KubernetesRecordStore
from spark_runtime.kube_requests import OperatorRequestPoller
from spark_runtime.protocol import JobIdentity

ENV_INITIAL_SNAPSHOT_NAME = "SJ_INITIAL_SNAPSHOT_NAME"
"""Set by the operator on the first execution's driver Pod while the job has no snapshot."""


def kubernetes_config(job: Mapping[str, Any]) -> JobConfig:
    """Builds the job from its SnapshotJob object.

    The Hazelcast address comes from ``spec.hazelcast`` or, for the installation's own
    cluster, from ``SJ_HAZELCAST_ADDRESS`` / ``SJ_HAZELCAST_CLUSTER`` set by the operator.
    ``SJ_INITIAL_SNAPSHOT_NAME``, also from the operator, names the export to start from.

    Raises:
        BadInput: If the spec lacks what the driver needs.
    """
    spec, metadata = job.get("spec") or {}, job.get("metadata") or {}
    pipeline = spec.get("pipeline") or {}
    if not pipeline.get("module"):
        raise BadInput("SnapshotJob has no spec.pipeline.module")
    store = spec.get("hazelcast") or {}
    address = store.get("address") or os.environ.get("SJ_HAZELCAST_ADDRESS")
    if not address:
        raise BadInput("No Hazelcast address: set spec.hazelcast.address or SJ_HAZELCAST_ADDRESS")
    cluster = store.get("clusterName") or os.environ.get("SJ_HAZELCAST_CLUSTER", "dev")
    spark = spec.get("spark") or {}
    conf = {str(k): str(v) for k, v in (spark.get("conf") or {}).items()}
    try:
        partitions = int(spec.get("statePartitions") or DEFAULT_STATE_PARTITIONS)
    except (TypeError, ValueError) as error:
        raise BadInput(f"spec.statePartitions is not an integer: {error}") from error
    if partitions < 1:
        raise BadInput(f"spec.statePartitions must be at least 1, not {partitions}")
    fingerprint = json.dumps(pipeline, sort_keys=True)
    settings = DriverSettings(
        job=JobIdentity(str(metadata["uid"]), str(metadata["namespace"]), fingerprint),
        guarantee=Guarantee(spec.get("processingGuarantee", "EXACTLY_ONCE")),
        snapshot_interval_ms=int(spec.get("snapshotIntervalSeconds", 10)) * 1000,
        state_partitions=partitions,
        store=StoreAddress(tuple(address.split(",")), cluster),
        suspend_on_failure=bool(spec.get("suspendOnFailure", False)),
        initial_snapshot_name=os.environ.get(ENV_INITIAL_SNAPSHOT_NAME) or None,
    )
    return JobConfig(
        pipeline["module"],
        dict(pipeline.get("args") or {}),
        settings,
        spark.get("master", "k8s"),
        conf,
    )


class KubernetesMode:
    """The :class:`~spark_runtime.execution.Mode` of a driver Pod started by the operator.

    Args:
        config: The job.
        records: The record store on the job's status, fenced by this execution's id.
        requests: The poller of the operator's requests, not yet started.
        app_name: The Spark application's name.
    """

    def __init__(
        self,
        config: JobConfig,
        records: KubernetesRecordStore,
        requests: OperatorRequestPoller,
        app_name: str,
    ) -> None:
        self.config = config
        self.records = records
        self.requests = requests
        self.app_name = app_name
        self.poll_termination: TerminationPoll | None = requests.poll_termination
        self.poll_export: ExportPoll | None = requests.poll_export
        self.publish_export: PublishExport | None = self._publish_export

    @classmethod
    def from_args(cls, ns: argparse.Namespace) -> KubernetesMode:
        """Connects to the API server and reads the SnapshotJob named on the command line.

        In a Pod the client uses the Pod's service account, elsewhere the kubeconfig.

        Raises:
            BadInput: If an option is missing or the SnapshotJob lacks what the driver needs.
        """
        if not (ns.namespace and ns.name and ns.execution_id):
            raise BadInput("Kubernetes mode needs --namespace, --name and --execution-id")
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config()  # type: ignore[no-untyped-call]
        api = kube_client.CustomObjectsApi()
        namespace, name = ns.namespace, ns.name

        def fetch() -> Mapping[str, Any]:
            job = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            return cast(Mapping[str, Any], job)

        return cls(
            kubernetes_config(fetch()),
            KubernetesRecordStore(api, namespace, name, ns.execution_id),
            OperatorRequestPoller(fetch),
            f"snapshotjob-{namespace}-{name}",
        )

    def start(self) -> None:
        """Starts polling the operator's requests."""
        self.requests.start()

    def stop(self) -> None:
        """Stops polling."""
        self.requests.stop()

    def _publish_export(self, export: ExportedSnapshot) -> None:
        self.records.append_exported_snapshot(
            name=export.name,
            snapshot_id=export.snapshot_id,
            num_bytes=export.num_bytes,
            created_at=datetime.fromtimestamp(export.created_at / 1000, UTC),
            terminal=export.terminal,
        )
