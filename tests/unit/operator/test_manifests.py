"""The objects the operator creates for a job: owned by it, and with the least privilege."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from snapshot_operator.manifests import (
    IN_CLUSTER_MASTER,
    build_driver_pod,
    build_role,
    build_role_binding,
    build_service_account,
    container_memory_mib,
    driver_spark_conf,
    owner_reference,
    spark_memory_mib,
)
from snapshot_operator.reconcile import CreateDriverPod, JobRef, driver_pod_name, execution_id
from snapshot_operator.reconcile.observe import LABEL_EXECUTION_ID
from snapshotjob_contract import SnapshotJobSpec
from snapshotjob_contract.base import LABEL_VALUE_MAX_LENGTH
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
    executor_pod_template,
)
from snapshotjob_contract.resource import MAX_NAME_LENGTH, NAME_RULE
from snapshotjob_contract.spark import PROACTIVE_REPLICATION_CONF, STATE_REPLICAS_CONF
from snapshotjob_contract.spec import DurableStorageSpec

JOB = JobRef(namespace="analytics", name="wordcount", uid="0b7e6c1a-uid")
CREATE = CreateDriverPod("wordcount-driver-3", "0b7e6c1a-uid-3", 3, None)


def spec(**fields: Any) -> SnapshotJobSpec:
    return SnapshotJobSpec.model_validate(
        {"image": "snapshotjob/runtime:1", "pipeline": {"module": "pipelines.wordcount"}, **fields}
    )


def env_of(pod: dict[str, Any]) -> dict[str, Any]:
    [container] = pod["spec"]["containers"]
    return {item["name"]: item.get("value", item.get("valueFrom")) for item in container["env"]}


def conf_of(pod: dict[str, Any]) -> dict[str, str]:
    [container] = pod["spec"]["containers"]
    pairs = [arg.removeprefix("--conf=").split("=", 1) for arg in container["args"]]
    return dict((key, value) for key, value in pairs)


def test_every_object_is_controlled_by_the_job() -> None:
    objects = [
        build_driver_pod(JOB, spec(), CREATE),
        build_service_account(JOB),
        build_role(JOB),
        build_role_binding(JOB),
    ]

    for manifest in objects:
        assert manifest["metadata"]["ownerReferences"] == [owner_reference(JOB)]
        assert manifest["metadata"]["namespace"] == JOB.namespace
        assert manifest["metadata"]["labels"][LABEL_JOB_UID] == JOB.uid
    assert owner_reference(JOB)["controller"] is True


def test_the_driver_names_its_failure_in_the_termination_message() -> None:
    [container] = build_driver_pod(JOB, spec(), CREATE)["spec"]["containers"]

    assert container["terminationMessagePath"] == "/dev/termination-log"
    assert container["terminationMessagePolicy"] == "FallbackToLogsOnError"


def test_the_driver_pod_runs_one_execution_and_is_never_restarted_by_the_kubelet() -> None:
    pod = build_driver_pod(JOB, spec(), CREATE)

    assert pod["metadata"]["name"] == CREATE.pod_name
    assert pod["metadata"]["labels"][LABEL_EXECUTION_ID] == CREATE.execution_id
    assert pod["spec"]["restartPolicy"] == "Never"
    assert pod["spec"]["serviceAccountName"] == build_service_account(JOB)["metadata"]["name"]
    env = env_of(pod)
    assert env["SJ_EXECUTION_ID"] == CREATE.execution_id
    assert (env["SJ_NAMESPACE"], env["SJ_JOB_NAME"]) == (JOB.namespace, JOB.name)
    assert "SJ_INITIAL_SNAPSHOT_NAME" not in env
    [container] = pod["spec"]["containers"]
    assert container["command"] == ["python", "-m", "spark_runtime", "run", "--kubernetes"]


def test_a_first_start_from_an_export_names_it() -> None:
    create = CreateDriverPod("wordcount-driver-1", "0b7e6c1a-uid-1", 1, "nightly")

    assert env_of(build_driver_pod(JOB, spec(), create))["SJ_INITIAL_SNAPSHOT_NAME"] == "nightly"


def test_the_driver_serves_metrics_on_a_named_port_and_logs_as_the_operator() -> None:
    pod = build_driver_pod(JOB, spec(), CREATE, log_format=LogFormat.JSON)
    [container] = pod["spec"]["containers"]
    assert container["ports"] == [
        {"name": METRICS_PORT_NAME, "containerPort": DRIVER_METRICS_PORT, "protocol": "TCP"}
    ]
    env = env_of(pod)
    assert env[ENV_METRICS_PORT] == str(DRIVER_METRICS_PORT)
    assert env[ENV_LOG_FORMAT] == "json"
    assert env_of(build_driver_pod(JOB, spec(), CREATE))[ENV_LOG_FORMAT] == "text"


def test_the_installations_store_is_used_unless_the_spec_names_one() -> None:
    own = build_driver_pod(JOB, spec(), CREATE, store_address="hz:5701", store_cluster_name="sj")
    external = build_driver_pod(
        JOB,
        spec(hazelcast={"address": "ext:5701", "clusterName": "ext"}),
        CREATE,
        store_address="hz:5701",
    )

    assert (env_of(own)["SJ_HAZELCAST_ADDRESS"], env_of(own)["SJ_HAZELCAST_CLUSTER"]) == (
        "hz:5701",
        "sj",
    )
    assert "SJ_HAZELCAST_ADDRESS" not in env_of(external)


def executor_labels(pod: dict[str, Any]) -> dict[str, str]:
    return {
        key.removeprefix("spark.kubernetes.executor.label."): value
        for key, value in conf_of(pod).items()
        if key.startswith("spark.kubernetes.executor.label.")
    }


def test_the_driver_and_executors_of_a_job_on_the_installations_store_carry_its_label() -> None:
    """The store's NetworkPolicy admits exactly these Pods; a user's conf cannot remove it."""
    own = build_driver_pod(
        JOB,
        spec(spark={"conf": {f"spark.kubernetes.executor.label.{LABEL_STORE}": "other"}}),
        CREATE,
        store_address="hz:5701",
        store_label="sj.store",
    )
    external = build_driver_pod(
        JOB,
        spec(hazelcast={"address": "ext:5701", "clusterName": "ext"}),
        CREATE,
        store_address="hz:5701",
        store_label="sj.store",
    )
    unnamed = build_driver_pod(JOB, spec(), CREATE, store_address="hz:5701")

    assert own["metadata"]["labels"][LABEL_STORE] == "sj.store"
    assert executor_labels(own)[LABEL_STORE] == "sj.store"
    for pod in (external, unnamed):
        assert LABEL_STORE not in pod["metadata"]["labels"]
        assert LABEL_STORE not in executor_labels(pod)


def test_durable_storage_is_the_specs_or_else_the_installations_with_secret_credentials() -> None:
    default = DurableStorageSpec.model_validate(
        {"bucket": "shared", "credentialsSecret": "shared-s3", "endpoint": "http://s3:9000"}
    )
    own = spec(
        durableStorage={
            "bucket": "team-a",
            "prefix": "jobs/wc",
            "region": "eu-west-1",
            "credentialsSecret": "team-a-s3",
        }
    )

    none = env_of(build_driver_pod(JOB, spec(), CREATE))
    installation = env_of(build_driver_pod(JOB, spec(), CREATE, default_durable_storage=default))
    job = env_of(build_driver_pod(JOB, own, CREATE, default_durable_storage=default))

    assert not [name for name in none if name.startswith(("SJ_DURABLE", "AWS_"))]
    assert (installation["SJ_DURABLE_BUCKET"], installation["SJ_DURABLE_ENDPOINT"]) == (
        "shared",
        "http://s3:9000",
    )
    assert installation["AWS_ACCESS_KEY_ID"] == {
        "secretKeyRef": {"name": "shared-s3", "key": "accessKeyId"}
    }
    assert (job["SJ_DURABLE_BUCKET"], job["SJ_DURABLE_PREFIX"], job["SJ_DURABLE_REGION"]) == (
        "team-a",
        "jobs/wc",
        "eu-west-1",
    )
    assert "SJ_DURABLE_ENDPOINT" not in job  # AWS S3 itself, not the installation's server
    assert job["AWS_SECRET_ACCESS_KEY"] == {
        "secretKeyRef": {"name": "team-a-s3", "key": "secretAccessKey"}
    }


def test_durable_storage_without_a_secret_leaves_the_credentials_to_the_sdk() -> None:
    """No ``AWS_*`` from the operator: boto3's default chain (web identity, the pod
    template's environment, the node's role) finds them."""
    env = env_of(build_driver_pod(JOB, spec(durableStorage={"bucket": "team-a"}), CREATE))
    assert env["SJ_DURABLE_BUCKET"] == "team-a"
    assert not [name for name in env if name.startswith("AWS_")]


def test_executors_run_in_the_cluster_owned_by_the_driver_pod() -> None:
    conf = conf_of(build_driver_pod(JOB, spec(spark={"executor": {"instances": 4}}), CREATE))

    assert conf["spark.master"] == IN_CLUSTER_MASTER
    assert conf["spark.kubernetes.driver.pod.name"] == CREATE.pod_name
    assert conf["spark.executor.instances"] == "4"
    assert conf["spark.kubernetes.container.image"] == "snapshotjob/runtime:1"
    assert conf["spark.kubernetes.executor.disableConfigMap"] == "true"


def test_executor_pods_carry_the_jobs_labels() -> None:
    conf = driver_spark_conf(JOB, spec(), CREATE.pod_name)

    labels = {
        key.removeprefix("spark.kubernetes.executor.label."): value
        for key, value in conf.items()
        if key.startswith("spark.kubernetes.executor.label.")
    }
    assert labels == {
        LABEL_JOB: JOB.name,
        LABEL_JOB_UID: JOB.uid,
        LABEL_COMPONENT: "executor",
        LABEL_MANAGED_BY: MANAGED_BY,
    }


def test_small_executors_ask_for_a_fraction_of_a_core_and_their_own_overhead() -> None:
    executor = {"instances": 2, "cores": 1, "coresRequest": "250m", "memoryOverhead": "256m"}

    conf = driver_spark_conf(JOB, spec(spark={"executor": executor}), CREATE.pod_name)

    assert conf["spark.executor.cores"] == "1"
    assert conf["spark.kubernetes.executor.request.cores"] == "250m"
    assert conf["spark.executor.memoryOverhead"] == "256m"


def test_executors_ask_for_sparks_defaults_when_the_spec_names_no_request() -> None:
    conf = driver_spark_conf(JOB, spec(), CREATE.pod_name)

    assert "spark.kubernetes.executor.request.cores" not in conf
    assert "spark.executor.memoryOverhead" not in conf


def test_spark_touches_no_claims_or_services_the_role_does_not_grant() -> None:
    # Spark's defaults list claims before creating executors and delete claims and services
    # by label when it stops; the Role grants nothing on either kind.
    conf = driver_spark_conf(JOB, spec(), CREATE.pod_name)

    assert conf["spark.kubernetes.driver.reusePersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.ownPersistentVolumeClaim"] == "false"
    assert conf["spark.kubernetes.driver.service.deleteOnTermination"] == "false"
    resources = {resource for rule in build_role(JOB)["rules"] for resource in rule["resources"]}
    assert "persistentvolumeclaims" not in resources
    assert "services" not in resources


def test_user_conf_wins_except_where_it_would_detach_executors() -> None:
    user = {
        "spark.executor.memory": "3g",
        "spark.kubernetes.driver.pod.name": "someone-else",
        f"spark.kubernetes.executor.label.{LABEL_JOB}": "other-job",
    }

    conf = conf_of(build_driver_pod(JOB, spec(spark={"conf": user}), CREATE))

    assert conf["spark.executor.memory"] == "3g"
    assert conf["spark.kubernetes.driver.pod.name"] == CREATE.pod_name
    assert conf[f"spark.kubernetes.executor.label.{LABEL_JOB}"] == JOB.name


def test_a_local_master_is_passed_through() -> None:
    conf = conf_of(build_driver_pod(JOB, spec(spark={"master": "local[2]"}), CREATE))

    assert conf["spark.master"] == "local[2]"
    assert "spark.kubernetes.container.image" not in conf


def test_the_driver_container_asks_for_the_heap_plus_sparks_overhead() -> None:
    pod = build_driver_pod(JOB, spec(spark={"driver": {"cores": 2, "memory": "8g"}}), CREATE)

    [container] = pod["spec"]["containers"]
    assert container["resources"]["requests"] == {"cpu": "2", "memory": "9011Mi"}
    assert container["resources"]["limits"] == {"memory": "9011Mi"}


def test_the_driver_container_asks_for_the_heap_plus_its_memory_overhead() -> None:
    driver = {"memory": "1g", "memoryOverhead": "1536m"}
    pod = build_driver_pod(JOB, spec(spark={"driver": driver}), CREATE)

    [container] = pod["spec"]["containers"]
    assert container["resources"]["requests"]["memory"] == "2560Mi"
    assert container["resources"]["limits"] == {"memory": "2560Mi"}


def test_the_driver_container_may_ask_for_less_cpu_than_its_cores() -> None:
    driver = {"cores": 2, "coresRequest": "500m", "memory": "1g"}

    pod = build_driver_pod(JOB, spec(spark={"driver": driver}), CREATE)

    [container] = pod["spec"]["containers"]
    assert container["resources"]["requests"]["cpu"] == "500m"
    assert conf_of(pod)["spark.driver.cores"] == "2"


def test_driver_and_executor_containers_run_under_the_same_restricted_context() -> None:
    [driver] = build_driver_pod(JOB, spec(), CREATE)["spec"]["containers"]
    [executor] = executor_pod_template()["spec"]["containers"]

    assert driver["securityContext"] == executor["securityContext"]
    assert driver["securityContext"] == {
        "runAsNonRoot": True,
        "readOnlyRootFilesystem": True,
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    # The one writable directory of both, a volume of the Pod's own.
    for pod in (build_driver_pod(JOB, spec(), CREATE), executor_pod_template()):
        [container] = pod["spec"]["containers"]
        assert container["volumeMounts"] == [{"name": "sj-tmp", "mountPath": "/tmp"}]
        assert pod["spec"]["volumes"] == [{"name": "sj-tmp", "emptyDir": {}}]
    # Spark fetches jars into an executor's working directory.
    assert executor["workingDir"] == "/tmp"


@pytest.mark.parametrize(
    ("memory", "mib"),
    [("512m", 512), ("2g", 2048), ("2G", 2048), ("1t", 1048576), ("1024k", 1), ("700", 700)],
)
def test_spark_memory_strings_are_read_as_spark_does(memory: str, mib: int) -> None:
    assert spark_memory_mib(memory) == mib


def test_the_memory_overhead_has_sparks_minimum() -> None:
    assert container_memory_mib(512) == 512 + 384
    assert container_memory_mib(10_000) == 11_000


def test_a_malformed_memory_string_is_refused() -> None:
    with pytest.raises(ValueError, match="memory=lots"):
        spark_memory_mib("lots")


def test_the_driver_may_manage_pods_and_its_own_job_only() -> None:
    rules = build_role(JOB)["rules"]

    granted = {
        (group, resource, name, verb)
        for rule in rules
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for name in rule.get("resourceNames", ["*"])
        for verb in rule["verbs"]
    }
    assert granted == {
        *{
            ("", "pods", "*", verb)
            for verb in ("create", "delete", "deletecollection", "get", "list", "watch")
        },
        ("snapshotjob.io", "snapshotjobs", JOB.name, "get"),
        ("snapshotjob.io", "snapshotjobs/status", JOB.name, "get"),
        ("snapshotjob.io", "snapshotjobs/status", JOB.name, "patch"),
    }


def test_the_role_is_bound_to_the_drivers_service_account() -> None:
    binding = build_role_binding(JOB)
    account = build_service_account(JOB)["metadata"]["name"]

    assert binding["roleRef"] == {
        "apiGroup": "rbac.authorization.k8s.io",
        "kind": "Role",
        "name": build_role(JOB)["metadata"]["name"],
    }
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": account, "namespace": JOB.namespace}
    ]


# The longest job name (MAX_NAME_LENGTH, the CRD's rule on metadata.name) is derived from these
# builders: every object built from it must be valid, and one character more must not be.

_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DNS_SUBDOMAIN_MAX = 253


def _dns_subdomain(name: str) -> bool:
    parts = name.split(".")
    return len(name) <= _DNS_SUBDOMAIN_MAX and all(_DNS_LABEL.match(part) for part in parts)


def _problems(job: JobRef) -> list[str]:
    """Returns what the API server would refuse in the objects built for the job."""
    create = CreateDriverPod(
        driver_pod_name(job.name, 1_000_000),
        execution_id(job.uid, 1_000_000, datetime(2286, 1, 1, tzinfo=UTC)),
        1_000_000,
        None,
    )
    pod = build_driver_pod(job, spec(), create)
    objects = [pod, build_service_account(job), build_role(job), build_role_binding(job)]
    problems = []
    for manifest in objects:
        kind, metadata = manifest["kind"], manifest["metadata"]
        if not _dns_subdomain(metadata["name"]):
            problems.append(f"{kind} name {metadata['name']}")
        for key, value in metadata["labels"].items():
            if len(value) > LABEL_VALUE_MAX_LENGTH or not _LABEL_VALUE.match(value):
                problems.append(f"{kind} label {key}={value}")
    # Spark names the driver's Service after the Pod: a DNS label.
    if not _DNS_LABEL.match(pod["metadata"]["name"]) or len(pod["metadata"]["name"]) > 63:
        problems.append(f"driver Pod name {pod['metadata']['name']} is no DNS label")
    for key, value in conf_of(pod).items():
        if key.startswith("spark.kubernetes.executor.label.") and len(value) > 63:
            problems.append(f"executor label {key}={value}")
    binding = build_role_binding(job)
    if binding["roleRef"]["name"] != build_role(job)["metadata"]["name"]:
        problems.append("RoleBinding names another Role")
    return problems


@pytest.mark.parametrize("name", ["a" * MAX_NAME_LENGTH, "a-" * 31 + "b", "wordcount"])
def test_every_object_built_from_a_name_of_the_longest_length_is_valid(name: str) -> None:
    job = JobRef(namespace="n" * 63, name=name, uid=str(uuid.uuid4()))

    assert len(name) <= MAX_NAME_LENGTH
    assert _problems(job) == []
    assert NAME_RULE.holds(name)


def test_one_character_more_than_the_longest_name_breaks_an_object() -> None:
    name = "a" * (MAX_NAME_LENGTH + 1)
    job = JobRef(namespace="analytics", name=name, uid=str(uuid.uuid4()))

    assert _problems(job) != [], "MAX_NAME_LENGTH could be longer: derive it again"
    assert not NAME_RULE.holds(name)
    assert f"at most {MAX_NAME_LENGTH} characters" in NAME_RULE.message


def test_two_executors_or_more_keep_every_state_block_on_two_executors() -> None:
    one = SnapshotJobSpec.model_validate(
        {"image": "i", "pipeline": {"module": "m"}, "spark": {"executor": {"instances": 1}}}
    )
    two = SnapshotJobSpec.model_validate(
        {"image": "i", "pipeline": {"module": "m"}, "spark": {"executor": {"instances": 2}}}
    )
    local = SnapshotJobSpec.model_validate(
        {"image": "i", "pipeline": {"module": "m"}, "spark": {"master": "local[2]"}}
    )
    assert driver_spark_conf(JOB, two, "p")[STATE_REPLICAS_CONF] == "2"
    assert driver_spark_conf(JOB, two, "p")[PROACTIVE_REPLICATION_CONF] == "true"
    assert STATE_REPLICAS_CONF not in driver_spark_conf(JOB, one, "p")
    assert STATE_REPLICAS_CONF not in driver_spark_conf(JOB, local, "p")


def test_snapshot_keys_reach_the_driver_by_reference_only() -> None:
    signing = {"secretName": "wc-keys", "keyId": "k2", "verifyKeyIds": ["k1"]}
    env = env_of(build_driver_pod(JOB, spec(snapshotSigning=signing), CREATE))
    assert env["SJ_SNAPSHOT_KEY_IDS"] == "k2,k1"
    assert env["SJ_SNAPSHOT_KEY_0"] == {"secretKeyRef": {"name": "wc-keys", "key": "k2"}}
    assert env["SJ_SNAPSHOT_KEY_1"] == {"secretKeyRef": {"name": "wc-keys", "key": "k1"}}
    assert "SJ_SNAPSHOT_ACCEPT_UNSIGNED" not in env
    accepting = spec(snapshotSigning={**signing, "acceptUnsigned": True})
    assert env_of(build_driver_pod(JOB, accepting, CREATE))["SJ_SNAPSHOT_ACCEPT_UNSIGNED"] == "true"
    assert not [name for name in env_of(build_driver_pod(JOB, spec(), CREATE)) if "KEY" in name]


def test_kafka_security_reaches_the_driver_with_its_secrets_by_reference_only() -> None:
    kafka = {
        "securityProtocol": "SASL_SSL",
        "sasl": {"username": "app", "passwordSecret": {"name": "app", "key": "password"}},
        "tls": {"caSecret": {"name": "my-cluster-cluster-ca-cert", "key": "ca.crt"}},
    }
    pod = build_driver_pod(JOB, spec(kafka=kafka), CREATE)
    env = env_of(pod)
    assert env["SJ_KAFKA_SECURITY_PROTOCOL"] == "SASL_SSL"
    assert env["SJ_KAFKA_SASL_MECHANISM"] == "SCRAM-SHA-512"
    assert env["SJ_KAFKA_SASL_USERNAME"] == "app"
    assert env["SJ_KAFKA_SASL_PASSWORD"] == {"secretKeyRef": {"name": "app", "key": "password"}}
    assert env["SJ_KAFKA_CA_PEM"] == {
        "secretKeyRef": {"name": "my-cluster-cluster-ca-cert", "key": "ca.crt"}
    }
    assert env["SJ_KAFKA_ORIGIN"] == (
        "password from Secret app key password, "
        "CA from Secret my-cluster-cluster-ca-cert key ca.crt"
    )
    assert not [name for name in env_of(build_driver_pod(JOB, spec(), CREATE)) if "KAFKA" in name]
    # A change of the block is a change of what the execution runs with: it rolls out.
    assert spec().execution_fingerprint() != spec(kafka=kafka).execution_fingerprint()
