"""The Kubernetes objects the operator creates for a SnapshotJob, as plain manifests.

Pure functions from the job and the decision's actions to dictionaries, so the exact objects
are unit-tested and the kopf layer only sends them. Every object is owned by its SnapshotJob
(controller owner reference), so deleting the job lets the garbage collector remove them, and
the driver Pod in turn owns its executors (Spark sets that up from
``spark.kubernetes.driver.pod.name``).

The driver gets the least it needs, through a per-job ServiceAccount and Role: manage executor
Pods, read its own SnapshotJob (spec and termination requests) and patch that job's status (the
execution record). It can neither see other jobs nor touch anything else; a Role cannot narrow
``create`` on Pods to executors, which is why it is a separate identity per job.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from snapshot_operator.kafka_env import kafka_env
from snapshot_operator.reconcile import CreateDriverPod, JobRef
from snapshot_operator.reconcile.observe import (
    DRIVER_CONTAINER,
    LABEL_EXECUTION_ID,
    TERMINATION_MESSAGE_PATH,
)
from snapshotjob_contract import DRIVER_GRACE_SECONDS, SnapshotJobSpec, pod_template
from snapshotjob_contract.environment import (
    DRIVER_COMMAND,
    ENV_DURABLE_ACCESS_KEY_ID,
    ENV_DURABLE_BUCKET,
    ENV_DURABLE_ENDPOINT,
    ENV_DURABLE_PREFIX,
    ENV_DURABLE_REGION,
    ENV_DURABLE_RESTORE,
    ENV_DURABLE_SECRET_ACCESS_KEY,
    ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS,
    ENV_EXECUTION_ID,
    ENV_HAZELCAST_ADDRESS,
    ENV_HAZELCAST_CLUSTER,
    ENV_INITIAL_SNAPSHOT_ID,
    ENV_INITIAL_SNAPSHOT_JOB_UID,
    ENV_INITIAL_SNAPSHOT_NAME,
    ENV_JOB_NAME,
    ENV_NAMESPACE,
    ENV_SNAPSHOT_ACCEPT_UNSIGNED,
    ENV_SNAPSHOT_KEY_IDS,
    ENV_SNAPSHOT_KEY_PREFIX,
    SECRET_ACCESS_KEY_ID_KEY,
    SECRET_SECRET_ACCESS_KEY_KEY,
)
from snapshotjob_contract.observability import (
    DRIVER_METRICS_PORT,
    ENV_LOG_FORMAT,
    ENV_METRICS_PORT,
    METRICS_PORT_NAME,
    LogFormat,
)
from snapshotjob_contract.pods import (
    LABEL_COMPONENT,
    LABEL_JOB,
    LABEL_JOB_UID,
    LABEL_MANAGED_BY,
    LABEL_STORE,
    MANAGED_BY,
    restricted_container_security_context,
    scratch_mount,
    scratch_volume,
)
from snapshotjob_contract.resource import GROUP, KIND, PLURAL, VERSION
from snapshotjob_contract.spark import PROACTIVE_REPLICATION_CONF, STATE_REPLICAS_CONF
from snapshotjob_contract.spark_ui import driver_ui_conf, driver_ui_ports
from snapshotjob_contract.spec import DurableStorageSpec, SnapshotSigningSpec

IN_CLUSTER_MASTER = "k8s://https://kubernetes.default.svc"
"""What ``spec.spark.master: k8s`` means from inside the cluster."""

PULL_SECRETS_CONF = "spark.kubernetes.container.image.pullSecrets"
"""Spark's image pull Secrets of the executor Pods, comma-separated."""

_SPARK_MEMORY = re.compile(r"^([1-9][0-9]*)([kKmMgGtT]?)$")
_MIB_PER_UNIT = {"k": 1 / 1024, "m": 1, "": 1, "g": 1024, "t": 1024 * 1024}
_MIN_OVERHEAD_MIB = 384
_OVERHEAD_FACTOR = 0.10


def spark_memory_mib(memory: str) -> int:
    """Returns a Spark memory string in MiB (no unit means MiB, as for ``spark.driver.memory``).

    Raises:
        ValueError: If ``memory`` is not in Spark's notation.
    """
    match = _SPARK_MEMORY.match(memory)
    if match is None:
        raise ValueError(f"Not a Spark memory string memory={memory}")
    return max(1, int(int(match.group(1)) * _MIB_PER_UNIT[match.group(2).lower()]))


def container_memory_mib(heap_mib: int, overhead_mib: int | None = None) -> int:
    """Returns the container memory for a JVM heap and the memory beyond it.

    Args:
        heap_mib: The JVM heap.
        overhead_mib: The memory beyond the heap; Spark's default overhead when None.
    """
    if overhead_mib is None:
        overhead_mib = max(_MIN_OVERHEAD_MIB, int(heap_mib * _OVERHEAD_FACTOR))
    return heap_mib + overhead_mib


def driver_service_account_name(job: JobRef) -> str:
    """Returns the name of the job's driver ServiceAccount, Role and RoleBinding."""
    return f"{job.name}-driver"


def owner_reference(job: JobRef) -> dict[str, Any]:
    """Returns the reference that makes the SnapshotJob the controller of an object."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": KIND,
        "name": job.name,
        "uid": job.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(job: JobRef, name: str, component: str) -> dict[str, Any]:
    return {
        "name": name,
        "namespace": job.namespace,
        "labels": {
            LABEL_JOB: job.name,
            LABEL_JOB_UID: job.uid,
            LABEL_COMPONENT: component,
            LABEL_MANAGED_BY: MANAGED_BY,
        },
        "ownerReferences": [owner_reference(job)],
    }


def driver_spark_conf(
    job: JobRef,
    spec: SnapshotJobSpec,
    pod_name: str,
    image_pull_secrets: Sequence[str] = (),
    store_label: str | None = None,
    service_account: str | None = None,
) -> dict[str, str]:
    """Returns the Spark configuration the operator derives for a driver Pod.

    The driver runs Spark with exactly these settings (``--conf`` arguments), the master
    included. The user's ``spec.spark.conf`` wins over everything but the keys that tie
    executors to this driver Pod and its job (their owner and labels), which must stay right
    for the garbage collector and for "never two drivers" to cover executors too.

    Args:
        job: The SnapshotJob.
        spec: Its spec.
        pod_name: The driver Pod's name.
        image_pull_secrets: The installation's pull Secrets for the executors: added to
            :data:`PULL_SECRETS_CONF` of ``spec.spark.conf``, except those the executors'
            pod templates name already (Spark adds the conf's to the template's).
        store_label: The installation store's :data:`LABEL_STORE` value, for the executors
            of a job that uses that store; None for no label.
        service_account: The drivers' ServiceAccount the installation created in advance
            (the chart's ``jobs.rbac.precreate``); None for the job's own.
    """
    executor = spec.spark.executor
    derived = {
        "spark.executor.instances": str(executor.instances),
        "spark.executor.cores": str(executor.cores),
        "spark.executor.memory": executor.memory,
        "spark.driver.memory": spec.spark.driver.memory,
        "spark.driver.cores": str(spec.spark.driver.cores),
    }
    if spec.spark.master == "k8s" and executor.instances >= 2:
        derived |= {STATE_REPLICAS_CONF: "2", PROACTIVE_REPLICATION_CONF: "true"}
    if executor.memory_overhead is not None:
        derived["spark.executor.memoryOverhead"] = executor.memory_overhead
    if spec.spark.master == "k8s":
        derived |= {
            "spark.master": IN_CLUSTER_MASTER,
            "spark.kubernetes.namespace": job.namespace,
            "spark.kubernetes.container.image": spec.image,
            "spark.kubernetes.container.image.pullPolicy": spec.image_pull_policy.value,
            "spark.kubernetes.authenticate.driver.serviceAccountName": (
                service_account or driver_service_account_name(job)
            ),
            # The driver's Role may not create ConfigMaps.
            "spark.kubernetes.executor.disableConfigMap": "true",
            # Client mode creates neither a driver Service nor claims; left at Spark's
            # defaults the allocator lists PersistentVolumeClaims to reuse them and stopping
            # deletes both kinds by label, which the Role rightly forbids.
            "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
            "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
            "spark.kubernetes.driver.service.deleteOnTermination": "false",
        }
        if executor.cores_request is not None:
            derived["spark.kubernetes.executor.request.cores"] = executor.cores_request
    else:
        derived["spark.master"] = spec.spark.master
    pinned = {
        "spark.kubernetes.driver.pod.name": pod_name,
        f"spark.kubernetes.executor.label.{LABEL_JOB}": job.name,
        f"spark.kubernetes.executor.label.{LABEL_JOB_UID}": job.uid,
        f"spark.kubernetes.executor.label.{LABEL_COMPONENT}": "executor",
        f"spark.kubernetes.executor.label.{LABEL_MANAGED_BY}": MANAGED_BY,
    }
    if store_label is not None:
        pinned[f"spark.kubernetes.executor.label.{LABEL_STORE}"] = store_label
    # The driver's UI when asked for, on the port its Service targets (spec.sparkUi).
    conf = derived | dict(spec.spark.conf) | pinned | driver_ui_conf(spec.spark_ui)
    if spec.spark.master == "k8s" and image_pull_secrets:
        templated = _pull_secret_names(spec.pod_template, executor.pod_template)
        given = [name.strip() for name in conf.get(PULL_SECRETS_CONF, "").split(",")]
        added = [name for name in image_pull_secrets if name not in templated]
        names = list(dict.fromkeys(name for name in (*given, *added) if name))
        if names:
            conf[PULL_SECRETS_CONF] = ",".join(names)
    return conf


def _pull_secret_names(*templates: Mapping[str, Any] | None) -> set[str]:
    """Returns the names of the image pull Secrets the pod templates list."""
    return {
        str(item.get("name"))
        for template in templates
        for item in ((template or {}).get("spec") or {}).get("imagePullSecrets") or []
        if isinstance(item, Mapping)
    }


def build_driver_pod(
    job: JobRef,
    spec: SnapshotJobSpec,
    create: CreateDriverPod,
    *,
    store_address: str | None = None,
    store_cluster_name: str | None = None,
    store_label: str | None = None,
    service_account: str | None = None,
    default_durable_storage: DurableStorageSpec | None = None,
    log_format: LogFormat = LogFormat.TEXT,
    image_pull_secrets: Sequence[str] = (),
    initial_export: tuple[str, int] | None = None,
) -> dict[str, Any]:
    """Returns the driver Pod of one execution.

    Args:
        job: The SnapshotJob.
        spec: Its spec (the one the execution runs, fingerprinted in the status).
        create: The decision that asked for the Pod.
        store_address: Members of the installation's Hazelcast cluster, used when the spec
            names no external cluster.
        store_cluster_name: Cluster name of the installation's Hazelcast cluster.
        store_label: The installation store's name, the :data:`LABEL_STORE` of the driver and
            executors of a job that uses that store (the store's NetworkPolicy admits only
            them); None when the installation names none.
        service_account: The ServiceAccount every driver runs as, created with its Role by
            the installation in advance (the chart's ``jobs.rbac.precreate``); None for the
            job's own, which the operator creates (:func:`build_service_account`).
        default_durable_storage: The installation's durable storage, for a spec without
            ``durableStorage``.
        log_format: The driver's log format, the operator's own.
        image_pull_secrets: The installation's image pull Secrets, for the driver Pod (after
            its pod templates' ones) and its executors (:func:`driver_spark_conf`).
        initial_export: ``(job uid, snapshot id)`` of the completed SnapshotJobExport named
            by ``create.initial_snapshot_name``, which the restore must find under the name;
            None if no completed SnapshotJobExport has that name.
    """
    metadata = _metadata(job, create.pod_name, "driver")
    metadata["labels"][LABEL_EXECUTION_ID] = create.execution_id
    # A job with an external store (spec.hazelcast.address) never reaches the installation's.
    uses_installation_store = spec.hazelcast.address is None and store_label is not None
    if uses_installation_store:
        metadata["labels"][LABEL_STORE] = store_label
    env: list[dict[str, Any]] = [
        {"name": ENV_NAMESPACE, "value": job.namespace},
        {"name": ENV_JOB_NAME, "value": job.name},
        {"name": ENV_EXECUTION_ID, "value": create.execution_id},
        # Spark advertises this as spark.driver.host: Pod names do not resolve, Pod IPs do.
        {"name": "SPARK_LOCAL_HOSTNAME", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": ENV_METRICS_PORT, "value": str(DRIVER_METRICS_PORT)},
        {"name": ENV_LOG_FORMAT, "value": log_format.value},
    ]
    if spec.hazelcast.address is None:
        if store_address is not None:
            env.append({"name": ENV_HAZELCAST_ADDRESS, "value": store_address})
        if store_cluster_name is not None:
            env.append({"name": ENV_HAZELCAST_CLUSTER, "value": store_cluster_name})
    if create.initial_snapshot_name is not None:
        env.append({"name": ENV_INITIAL_SNAPSHOT_NAME, "value": create.initial_snapshot_name})
        if initial_export is not None:
            env.append({"name": ENV_INITIAL_SNAPSHOT_JOB_UID, "value": initial_export[0]})
            env.append({"name": ENV_INITIAL_SNAPSHOT_ID, "value": str(initial_export[1])})
    env += durable_storage_env(spec.durable_storage or default_durable_storage)
    env += snapshot_signing_env(spec.snapshot_signing)
    env += kafka_env(spec.kafka)
    if spec.durable_restore is not None:
        restore = spec.durable_restore
        env.append(
            {
                "name": ENV_DURABLE_RESTORE,
                "value": f"{restore.accept_snapshot_id}:{restore.instead_of_snapshot_id}",
            }
        )
    conf = driver_spark_conf(
        job,
        spec,
        create.pod_name,
        image_pull_secrets,
        store_label=store_label if uses_installation_store else None,
        service_account=service_account,
    )
    driver = spec.spark.driver
    overhead_mib = (
        None if driver.memory_overhead is None else spark_memory_mib(driver.memory_overhead)
    )
    memory = f"{container_memory_mib(spark_memory_mib(driver.memory), overhead_mib)}Mi"
    cores = driver.cores_request or str(driver.cores)
    pod: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": metadata,
        "spec": {
            # The operator restarts executions (with a new id); the kubelet must not.
            "restartPolicy": "Never",
            "serviceAccountName": service_account or driver_service_account_name(job),
            "enableServiceLinks": False,
            "terminationGracePeriodSeconds": DRIVER_GRACE_SECONDS,
            "containers": [
                {
                    "name": DRIVER_CONTAINER,
                    "image": spec.image,
                    "imagePullPolicy": spec.image_pull_policy.value,
                    "command": list(DRIVER_COMMAND),
                    "args": [f"--conf={key}={value}" for key, value in sorted(conf.items())],
                    "env": env,
                    # Named, so a PodMonitor selects it by name (docs/reference/metrics.md).
                    "ports": [
                        {
                            "name": METRICS_PORT_NAME,
                            "containerPort": DRIVER_METRICS_PORT,
                            "protocol": "TCP",
                        },
                        *driver_ui_ports(spec.spark_ui),
                    ],
                    # The driver names its failure there before it exits; without a message
                    # (a crash) the kubelet takes the log's last lines instead.
                    "terminationMessagePath": TERMINATION_MESSAGE_PATH,
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "resources": {
                        "requests": {"cpu": cores, "memory": memory},
                        "limits": {"memory": memory},
                    },
                    # The executors' template has the same (snapshotjob_contract.pods).
                    "securityContext": restricted_container_security_context(),
                    "volumeMounts": [scratch_mount()],
                }
            ],
            "volumes": [scratch_volume()],
        },
    }
    if image_pull_secrets:
        pod["spec"]["imagePullSecrets"] = [{"name": name} for name in image_pull_secrets]
    merged = pod_template.merge(pod, spec.pod_template, driver.pod_template)
    if image_pull_secrets:
        # The templates' Secrets come first; one named twice is listed once.
        by_name: dict[Any, Any] = {}
        for item in merged["spec"]["imagePullSecrets"]:
            by_name.setdefault(item.get("name"), item)
        merged["spec"]["imagePullSecrets"] = list(by_name.values())
    return merged


def snapshot_signing_env(signing: SnapshotSigningSpec | None) -> list[dict[str, Any]]:
    """Returns the driver's environment for signed snapshots; none without ``snapshotSigning``.

    Each key is a reference to the Secret's key, so the operator never reads it and it never
    appears in the Pod's spec; a missing Secret or key keeps the container from starting
    with a reason that names them (``CreateContainerConfigError``, the DriverNotStarting
    condition).
    """
    if signing is None:
        return []
    ids = list(dict.fromkeys([signing.key_id, *signing.verify_key_ids]))
    env: list[dict[str, Any]] = [{"name": ENV_SNAPSHOT_KEY_IDS, "value": ",".join(ids)}]
    env += [
        {
            "name": f"{ENV_SNAPSHOT_KEY_PREFIX}{index}",
            "valueFrom": {"secretKeyRef": {"name": signing.secret_name, "key": key_id}},
        }
        for index, key_id in enumerate(ids)
    ]
    if signing.accept_unsigned:
        env.append({"name": ENV_SNAPSHOT_ACCEPT_UNSIGNED, "value": "true"})
    return env


def durable_storage_env(storage: DurableStorageSpec | None) -> list[dict[str, Any]]:
    """Returns the driver's environment for durable storage; none without it.

    The credentials are references to the Secret's keys, so they never appear in the Pod's
    spec, and a missing Secret or key keeps the container from starting with a reason that
    names them (``CreateContainerConfigError``). Without a Secret the driver finds credentials
    as any AWS SDK does (boto3's default chain: web identity, container credentials, the
    environment, the instance's role).
    """
    if storage is None:
        return []
    env: list[dict[str, Any]] = [
        {"name": ENV_DURABLE_BUCKET, "value": storage.bucket},
        {"name": ENV_DURABLE_PREFIX, "value": storage.prefix},
        {"name": ENV_DURABLE_REGION, "value": storage.region},
    ]
    if storage.endpoint is not None:
        env.append({"name": ENV_DURABLE_ENDPOINT, "value": storage.endpoint})
    if storage.snapshot_copy_interval_seconds is not None:
        interval = str(storage.snapshot_copy_interval_seconds)
        env.append({"name": ENV_DURABLE_SNAPSHOT_COPY_INTERVAL_SECONDS, "value": interval})
    if storage.credentials_secret is None:
        return env
    for name, key in (
        (ENV_DURABLE_ACCESS_KEY_ID, SECRET_ACCESS_KEY_ID_KEY),
        (ENV_DURABLE_SECRET_ACCESS_KEY, SECRET_SECRET_ACCESS_KEY_KEY),
    ):
        env.append(
            {
                "name": name,
                "valueFrom": {"secretKeyRef": {"name": storage.credentials_secret, "key": key}},
            }
        )
    return env


def build_service_account(job: JobRef) -> dict[str, Any]:
    """Returns the identity of the job's drivers."""
    return {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": _metadata(job, driver_service_account_name(job), "driver"),
    }


def build_role(job: JobRef) -> dict[str, Any]:
    """Returns what the job's drivers may do: executors, and this job's spec and status."""
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "Role",
        "metadata": _metadata(job, driver_service_account_name(job), "driver"),
        "rules": [
            {
                # Spark's executor allocator creates, watches and removes executor Pods, and
                # reads its own driver Pod to make it their owner.
                "apiGroups": [""],
                "resources": ["pods"],
                "verbs": ["create", "delete", "deletecollection", "get", "list", "watch"],
            },
            {
                # The spec and status.termination: what to run and when to stop.
                "apiGroups": [GROUP],
                "resources": [PLURAL],
                "resourceNames": [job.name],
                "verbs": ["get"],
            },
            {
                # The execution record, written with an optimistic lock.
                "apiGroups": [GROUP],
                "resources": [f"{PLURAL}/status"],
                "resourceNames": [job.name],
                "verbs": ["get", "patch"],
            },
        ],
    }


def build_role_binding(job: JobRef) -> dict[str, Any]:
    """Returns the binding of the job's Role to its drivers' ServiceAccount."""
    name = driver_service_account_name(job)
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "RoleBinding",
        "metadata": _metadata(job, name, "driver"),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": job.namespace}],
    }
