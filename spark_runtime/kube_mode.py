"""Kubernetes mode: the job from its SnapshotJob, its execution record in the job's status.

The operator starts the driver Pod with the job's namespace, name and the execution id it
wrote to ``status.execution.id``, and with the Spark settings it derives from the spec as
``--conf`` arguments (the master among them: ``spec.spark.master: k8s`` becomes the in-cluster
API server, so Spark's Kubernetes scheduler runs the executors as Pods owned by the driver
Pod); everything else the driver reads from the SnapshotJob. For executor Pods the driver
writes Spark's executor pod template from the contract (:mod:`snapshotjob_contract.pods`). The
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
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any, cast

from kubernetes import client as kube_client
from kubernetes import config as kube_config
from pydantic import ValidationError

from snapshot_protocol import JobIdentity
from snapshotjob_contract import pod_template
from snapshotjob_contract.base import explain
from snapshotjob_contract.environment import (
    ENV_DURABLE_RESTORE,
    ENV_HAZELCAST_ADDRESS,
    ENV_HAZELCAST_CLUSTER,
    ENV_INITIAL_SNAPSHOT_ID,
    ENV_INITIAL_SNAPSHOT_JOB_UID,
    ENV_INITIAL_SNAPSHOT_NAME,
)
from snapshotjob_contract.pods import EXECUTOR_POD_TEMPLATE_CONF, executor_pod_template
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from snapshotjob_contract.spec import SnapshotJobSpec, SparkSpec
from snapshotjob_contract.status import ExportedSnapshot
from spark_runtime import pipeline_args
from spark_runtime.chunk_io import StoreAddress
from spark_runtime.driver import (
    DriverSettings,
    ExportPoll,
    PublishExport,
    TerminationPoll,
)
from spark_runtime.driver_settings import (
    chain_policy,
    initial_snapshot_identity,
    snapshot_keys,
)
from spark_runtime.durable import DurableStorage
from spark_runtime.execution import BadInput, JobConfig
from spark_runtime.kube_record_store import KubernetesRecordStore
from spark_runtime.kube_requests import OperatorRequestPoller
from spark_runtime.local_mode import key_value_pairs

SPARK_MASTER_CONF = "spark.master"


def spark_settings(
    spark: SparkSpec, operator_conf: Mapping[str, str]
) -> tuple[str, dict[str, str]]:
    """Returns the Spark master and configuration the driver runs with.

    The operator's settings (``--conf``) already hold the spec's ``spark.conf``, which won
    over its derived values where allowed; they win over the spec here because only they
    turn ``master: k8s`` into a URL Spark accepts and tie the executors to the driver Pod.
    Without them (a driver started by hand) the spec's own master and conf are used.
    """
    conf = dict(spark.conf) | dict(operator_conf)
    master = conf.pop(SPARK_MASTER_CONF, spark.master)
    return master, conf


def write_executor_pod_template(
    directory: Path | None = None, spec: SnapshotJobSpec | None = None
) -> Path:
    """Writes Spark's executor pod template (JSON, which Spark reads as YAML) to a new file.

    Spark reads the file in the driver process (client mode), so a local file is enough and
    no ConfigMap is needed. The spec's pod templates (``spec.podTemplate``, then
    ``spec.spark.executor.podTemplate``) are merged in by the rules the driver Pod follows
    (:func:`snapshotjob_contract.pod_template.merge`).

    Args:
        directory: Where to write; the temporary directory by default.
        spec: The job's spec, for its pod templates; none merged without it.

    Returns:
        The file's path.
    """
    descriptor, name = tempfile.mkstemp(
        prefix="snapshotjob-executor-pod-", suffix=".json", dir=directory
    )
    with os.fdopen(descriptor, "w", encoding="utf-8") as file:
        templates = (spec.pod_template, spec.spark.executor.pod_template) if spec else ()
        json.dump(pod_template.merge(executor_pod_template(), *templates), file, indent=2)
    return Path(name)


def with_executor_pod_template(
    config: JobConfig, directory: Path | None = None, spec: SnapshotJobSpec | None = None
) -> JobConfig:
    """Adds the executor pod template to a job whose executors run as Pods.

    A template the spec's ``spark.conf`` names is kept, and a ``local[N]`` job needs none.

    Raises:
        BadInput: If the master is still the spec's ``k8s``: the operator's settings are missing.
    """
    if config.master == "k8s":
        raise BadInput(
            "spec.spark.master k8s needs the operator's Spark settings "
            f"(--conf {SPARK_MASTER_CONF}=k8s://...)"
        )
    if not config.master.startswith("k8s://") or EXECUTOR_POD_TEMPLATE_CONF in config.spark_conf:
        return config
    path = write_executor_pod_template(directory, spec)
    config.spark_conf[EXECUTOR_POD_TEMPLATE_CONF] = str(path)
    return config


def kubernetes_config(
    job: Mapping[str, Any],
    operator_conf: Mapping[str, str] | None = None,
    store_lost_s: float = 30.0,
) -> JobConfig:
    """Builds the job from its SnapshotJob object, read through the contract's spec model.

    The API server has already validated the spec against the CRD rendered from the same
    model, so parsing only fails for an object that never went through it (a test, an API
    server without the CRD's schema); the defaults are the model's, the operator's too. The
    Hazelcast address comes from ``spec.hazelcast`` or, for the installation's own cluster,
    from the environment the operator sets (:mod:`snapshotjob_contract.environment`), as does
    the export to start from. The Spark master and settings are :func:`spark_settings`.

    Args:
        job: The SnapshotJob.
        operator_conf: The operator's ``--conf`` settings of the driver Pod; None outside one.
        store_lost_s: Stop after reaching no store member for this long.

    Raises:
        BadInput: If the spec is not a valid SnapshotJob spec or lacks a store address.
    """
    metadata = job.get("metadata") or {}
    try:
        spec = SnapshotJobSpec.model_validate(job.get("spec") or {})
    except ValidationError as error:
        raise BadInput(f"SnapshotJob spec is invalid: {explain(error)}") from error
    address = spec.hazelcast.address or os.environ.get(ENV_HAZELCAST_ADDRESS)
    if not address:
        raise BadInput(
            f"No Hazelcast address: set spec.hazelcast.address or {ENV_HAZELCAST_ADDRESS}"
        )
    cluster = spec.hazelcast.cluster_name or os.environ.get(ENV_HAZELCAST_CLUSTER, "dev")
    try:
        identity = initial_snapshot_identity(
            os.environ.get(ENV_INITIAL_SNAPSHOT_JOB_UID), os.environ.get(ENV_INITIAL_SNAPSHOT_ID)
        )
        keys = snapshot_keys(os.environ)
    except ValueError as error:
        raise BadInput(str(error)) from error
    settings = DriverSettings(
        job=JobIdentity(
            str(metadata["uid"]),
            str(metadata["namespace"]),
            spec.hazelcast.backup_count,
            incremental=spec.incremental_snapshots,
        ),
        guarantee=spec.processing_guarantee,
        snapshot_interval_ms=spec.snapshot_interval_seconds * 1000,
        state_partitions=spec.state_partitions,
        store=StoreAddress(tuple(address.split(",")), cluster),
        suspend_on_failure=spec.suspend_on_failure,
        initial_snapshot_name=os.environ.get(ENV_INITIAL_SNAPSHOT_NAME) or None,
        initial_snapshot_identity=identity,
        split_brain_protection=spec.split_brain_protection,
        store_lost_s=store_lost_s,
        durable_storage=DurableStorage.from_environment(os.environ),
        durable_restore=durable_restore(os.environ.get(ENV_DURABLE_RESTORE)),
        chain_policy=chain_policy(spec.snapshot_chains),
        snapshot_keys=keys,
        epoch_timeout_s=float(spec.stall_detection.epoch_timeout_seconds),
        sink_timeout_s=float(spec.stall_detection.sink_timeout_seconds),
        expired_offsets=spec.expired_offsets,
    )
    master, conf = spark_settings(spec.spark, operator_conf or {})
    try:
        args = pipeline_args.expand(spec.pipeline.args, os.environ)
    except pipeline_args.MissingVariableError as error:
        raise BadInput(str(error)) from error
    return JobConfig(spec.pipeline.module, args, settings, master, conf)


def durable_restore(value: str | None) -> tuple[int, int] | None:
    """The ``(accept, insteadOf)`` snapshot ids of ``SJ_DURABLE_RESTORE``, or None.

    Raises:
        BadInput: If the value is not two snapshot ids (the operator always writes two).
    """
    if not value:
        return None
    accept, _, instead_of = value.partition(":")
    try:
        return int(accept), int(instead_of)
    except ValueError as error:
        raise BadInput(
            f"{ENV_DURABLE_RESTORE} must be <acceptSnapshotId>:<insteadOfSnapshotId>, not {value}"
        ) from error


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

        In a Pod the client uses the Pod's service account, elsewhere the kubeconfig. The
        ``--conf`` arguments are the operator's Spark settings (:func:`spark_settings`).

        Raises:
            BadInput: If an option is missing or the SnapshotJob lacks what the driver needs.
        """
        if not (ns.namespace and ns.name and ns.execution_id):
            raise BadInput("Kubernetes mode needs --namespace, --name and --execution-id")
        operator_conf = key_value_pairs(ns.conf, "--conf")
        if "KUBERNETES_SERVICE_HOST" in os.environ:
            kube_config.load_incluster_config()  # type: ignore[no-untyped-call]
        else:
            kube_config.load_kube_config()  # type: ignore[no-untyped-call]
        api = kube_client.CustomObjectsApi()
        namespace, name = ns.namespace, ns.name

        def fetch() -> Mapping[str, Any]:
            job = api.get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
            return cast(Mapping[str, Any], job)

        job = fetch()
        config = with_executor_pod_template(
            kubernetes_config(job, operator_conf, ns.store_lost_seconds),
            spec=SnapshotJobSpec.model_validate(job.get("spec") or {}),
        )
        return cls(
            config,
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
            created_at=export.created_at,
            terminal=export.terminal,
            durable_location=export.durable_location,
        )
