"""End to end with executor Pods on two worker nodes: failures a Spark job meets on a cluster.

Why these tests: users choose this operator because a streaming job keeps its state across
the failures a cluster has (a driver Pod deleted or killed, an executor lost, a Hazelcast
member killed, every member restarted at once, a node drained), and an upserting sink would
hide a replayed epoch. So the
pipeline here (``examples/sequence_sum.py``) also appends one row per input event to a
PostgreSQL table without any key (``events_table``): a duplicate is an extra row, a loss a
missing id. PostgreSQL runs in the cluster (``examples/kubernetes/postgres.yaml``, an image
built from Debian's packages) and is read with ``psql`` through ``kubectl exec``.

The sequence is paced in wall-clock time (``rows_per_second``) and far longer than a test, so
the job is still running at every fault whatever the earlier ones cost; each fault waits for
the job's progress (a newer snapshot), never for a clock, and each test ends its job with a
suspend and checks the exact prefix it committed (every id from 0 once, exact sums). Each
step's duration is printed at the end of the session (``E2E timing ...`` lines).
"""

from __future__ import annotations

import copy
import re
import secrets
import subprocess
from typing import Any

import pytest

from snapshotjob_contract.observability import DRIVER_METRICS_PORT
from snapshotjob_contract.pods import LABEL_STORE
from snapshotjob_contract.record import CHAIN_MAP_INDEX
from snapshotjob_contract.spark import DRIVER_SNAPSHOT_MAX_BYTES_CONF
from tests.e2e.release import (
    CATCH_UP,
    DSN_FROM_SECRET,
    DURABLE_STORAGE,
    S3_SECRET_KEY,
    SECRET_DSN,
    SEQUENCE_SUM,
    UNENDING,
    Release,
    Step,
    attempt,
    deploy_s3,
    durable_copies,
    next_execution,
    patch_spec,
    recreate_the_store,
    sequence_sum_args,
    snapshot_id,
    suspend_with_exact_prefix,
    wait_for,
    wait_snapshot,
)
from tests.e2e.secret_search import SecretSearch
from tests.unit.operator.argocd_lua import argo_health

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.timeout(1200)]


def _signal_driver(release: Release, pod: dict[str, Any], signal: str) -> None:
    """Sends ``signal`` (``KILL``, ``STOP``) to the driver container's main process from its
    node (a kind node container)."""
    node, name = pod["spec"]["nodeName"], pod["metadata"]["name"]
    script = (
        f"pod=$(crictl pods --name '^{name}$' -q | head -1); "
        'cid=$(crictl ps --pod "$pod" --name driver -q | head -1); '
        "pid=$(crictl inspect --output go-template --template '{{.info.pid}}' \"$cid\"); "
        f'kill -{signal} "$pid" && echo "signalled pid=$pid"'
    )
    out = subprocess.run(
        ["docker", "exec", node, "sh", "-c", script],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert out.returncode == 0 and "signalled" in out.stdout, (out.stdout, out.stderr)


def _job_secrets(release: Release, job: str) -> SecretSearch:
    """A PostgreSQL role with a random password and the Secret ``<job>-credentials`` holding
    its DSN (``DSN``), a snapshot key (``snapshots``) and a Kafka password (``kafka``, which
    ``spec.kafka`` hands the driver; this job reads no Kafka, tests/e2e/test_kafka_kind.py's
    does and searches for its password too); the S3 server's secret key is
    examples/kubernetes/s3proxy.yaml's."""
    role = f"{job}_{secrets.token_hex(4)}"
    password = secrets.token_urlsafe(18)
    # As the server's superuser, which trusts its local socket (hack/images/build.sh): the
    # example's own user may not create roles.
    for sql in (
        f"CREATE ROLE {role} LOGIN PASSWORD '{password}'",
        f"GRANT CREATE, USAGE ON SCHEMA public TO {role}",
        # The checks read the job's tables as the example's user (tests/e2e/release.psql).
        f"ALTER DEFAULT PRIVILEGES FOR ROLE {role} IN SCHEMA public GRANT SELECT ON TABLES "
        "TO snapshotjob",
    ):
        release.kubectl(
            "exec", "postgres-0", "--", "psql", "-h", "/tmp", "-U", "postgres", "-d",
            "snapshotjob", "-v", "ON_ERROR_STOP=1", "-c", sql,
        )  # fmt: skip
    key = secrets.token_urlsafe(36)
    kafka_password = secrets.token_urlsafe(18)
    release.apply(
        {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": f"{job}-credentials", "namespace": release.namespace},
            "stringData": {
                "DSN": f"postgresql://{role}:{password}@postgres:5432/snapshotjob",
                "snapshots": key,
                "kafka": kafka_password,
            },
        }
    )
    return SecretSearch(
        {
            "the PostgreSQL password": password,
            "the S3 secret key": S3_SECRET_KEY,
            "the snapshot key": key,
            "the Kafka password": kafka_password,
        }
    )


def _dsn_from(secret: str) -> dict[str, Any]:
    """A ``podTemplate`` giving the driver and executors ``PG_DSN`` from the Secret."""
    template = copy.deepcopy(DSN_FROM_SECRET)
    (env,) = template["spec"]["containers"][0]["env"]
    env["valueFrom"]["secretKeyRef"]["name"] = secret
    return template


def test_driver_executor_and_member_failures_and_the_loss_of_the_store_keep_exactly_once(
    release: Release, postgres: str, service_images: dict[str, str]
) -> None:
    """Executor killed, driver stalled, member killed, every member restarted: one job, exact.

    The job copies its snapshots to an S3-compatible server running as a Pod in the cluster
    (``examples/kubernetes/s3proxy.yaml``: s3proxy from Maven Central in a test-only image).
    Once suspended, its terminal snapshot is copied; then every member Pod is deleted at once
    and the StatefulSet starts three new, empty ones. On resume the driver finds no validation
    record in the store, copies the restore point back from the bucket (verified chunk by
    chunk) and goes on. Restoring an older copy, which needs the user's consent, is tested in
    ``tests/integration/test_durable_restore.py``. A deleted driver Pod is test_kafka_kind's
    fault, with the same checks.

    The job's PostgreSQL DSN (a role with a random password), the S3 server's secret key, its
    snapshot key and its Kafka password all come from Secrets; after every fault, no log line
    of the product's Pods, no field of the job, its exports or their status, no Event and no
    metric holds any of them.
    """
    job = "faults"
    with Step("faults-first-snapshot"):
        deploy_s3(release, service_images["test-s3proxy"])
        # Every credential of the job comes from a Secret, each value distinctive enough to
        # be searched for at the end: a PostgreSQL role of its own, the S3 server's secret
        # key, and the key the job signs its snapshots with.
        given = _job_secrets(release, job)
        release.apply_job(
            job,
            sequence_sum_args(SECRET_DSN, job, UNENDING, rate=100, max_rows_per_epoch=CATCH_UP),
            pipeline=SEQUENCE_SUM,
            durableStorage=DURABLE_STORAGE,
            podTemplate=_dsn_from(f"{job}-credentials"),
            snapshotSigning={"secretName": f"{job}-credentials", "keyId": "snapshots"},
            kafka={
                "securityProtocol": "SASL_SSL",
                "sasl": {
                    "username": job,
                    "passwordSecret": {"name": f"{job}-credentials", "key": "kafka"},
                },
            },
        )
        running = wait_snapshot(release, job, 1, timeout=300)
        uid = running["metadata"]["uid"]

    with Step("faults-executor-killed"):
        executors = release.executor_pods(job)
        assert len(executors) == 2, [p["metadata"]["name"] for p in executors]
        assert len({p["spec"]["nodeName"] for p in executors}) == 2, "executors share a node"
        # The store's NetworkPolicy admits exactly the Pods with its label: the job's own.
        store_label = release.store_label()
        for pod in [*executors, release.current_driver(job)]:
            assert pod["metadata"]["labels"].get(LABEL_STORE) == store_label, pod["metadata"]
        victim = executors[0]["metadata"]["name"]
        release.kubectl("delete", "pod", victim, "--grace-period=0", "--force")
        after = wait_snapshot(release, job, snapshot_id(running) + 2)
        # Spark re-ran the lost tasks and replaced the executor: the execution went on.
        assert attempt(after) == attempt(running), release.why_restarted(
            job, running["status"]["execution"]["driverPod"]
        )
        wait_for(
            release,
            f"job={job} a replacement executor",
            lambda: (
                victim not in {p["metadata"]["name"] for p in release.executor_pods(job)}
                and len(release.executor_pods(job)) == 2
            ),
            timeout=180,
        )

    with Step("faults-driver-stalled"):
        # A driver that lives but takes no snapshot: stopped here (SIGSTOP); a wedged sink
        # call or a driver cut off from the API server look the same from outside. A short
        # stall bound for this step only (no new execution: the operator's bound is not in the
        # execution's fingerprint): Degraded at half of it, then ended through the restart
        # policy; the kubelet's SIGKILL at the end of the grace period ends the process.
        patch_spec(release, job, {"stallDetection": {"intervals": 2, "minSeconds": 10}})
        before = release.job(job) or {}
        driver = release.current_driver(job)
        _signal_driver(release, driver, "STOP")
        health = wait_for(
            release,
            f"job={job} Degraded for Argo CD while its driver is stopped",
            lambda: h if (h := argo_health(release.job(job))).status == "Degraded" else None,
            timeout=60,
            interval=0.5,
        )
        assert health.message.startswith("SnapshotStale: "), health
        after = next_execution(release, job, before)
        assert after["status"].get("restarts", 0) >= 1, after["status"]
        assert after["status"]["lastFailure"]["reason"] == "DriverStalled", after["status"]
        assert attempt(after) == attempt(before) + 1, after["status"]
        assert "DriverStalled" in _event_reasons(release, job)
        patch_spec(release, job, {"stallDetection": None})
        # Deleted by the operator, not left behind as a failed Pod.
        name = driver["metadata"]["name"]
        assert not release.kubectl("get", "pod", name, "--ignore-not-found"), name

    with Step("faults-member-killed"):
        before = release.job(job) or {}
        member = f"{release.fullname}-hazelcast-1"
        release.kubectl("delete", "pod", member, "--grace-period=0", "--force")
        wait_snapshot(release, job, snapshot_id(before) + 3, timeout=300)
        release.kubectl("wait", "--for=condition=Ready", f"pod/{member}", "--timeout=300s")
        last = wait_snapshot(release, job, snapshot_id(before) + 4, timeout=300)
        # The member's loss cost no execution: the job went on with the two left.
        assert attempt(last) == attempt(before), last["status"]

    with Step("faults-suspended"):
        committed = suspend_with_exact_prefix(release, job)
        suspended = release.job(job) or {}
        restore_point = snapshot_id(suspended)
        # The terminal snapshot was copied, and only the newest copy is kept.
        assert durable_copies(release, uid) == [restore_point]
    # Past the rows of the first snapshot: the output crossed every fault above.
    assert committed > CATCH_UP, committed

    with Step("faults-store-recreated"):
        recreate_the_store(release)

    with Step("faults-resumed-from-the-bucket"):
        patch_spec(release, job, {"suspend": False})
        resumed = wait_snapshot(release, job, restore_point, timeout=300)
        pod = resumed["status"]["execution"]["driverPod"]
        assert release.restored_snapshot(pod) == restore_point
        log = release.kubectl("logs", pod, "-c", "driver")
        # The store had lost it: the restore point came back from the bucket.
        copied_back = f"Copying restore point from durable storage map=__sj.b1.snapshot.{uid}."
        assert copied_back in log, log[-3000:]
        assert f"snapshotId={restore_point} copySnapshotId={restore_point} older=False" in log

        # The running driver's metrics: searched with the rest below.
        given.seen.append(release.scrape(pod, DRIVER_METRICS_PORT))

    with Step("faults-suspended-again"):
        assert suspend_with_exact_prefix(release, job) > committed

    with Step("faults-no-secret-in-logs-status-events-metrics"):
        # Logs of every Pod the product runs (the operator, the members, this job's drivers
        # and executors), the job and its exports with their status, every Event of the
        # namespace, and the operator's and the driver's metrics.
        leaks = given.search(release, job)
        assert leaks == [], leaks


def test_a_drained_node_and_a_lost_node_move_the_driver_with_exact_output(
    release: Release, postgres: str
) -> None:
    """A drain interrupts the driver; a lost node is given up on; one job, exact output.

    Drain: the driver's worker is drained (only this job's Pods are evicted, so PostgreSQL and
    the members stay put): the driver exits 143 (``DriverInterrupted``), which its exit report
    tells the operator although the evicted Pod is gone at once; no failure is counted, and
    the new execution runs on the other worker from the last snapshot.

    Lost node: then the new driver's node container is paused. The node stops reporting, the
    node controller marks its Pods not Ready, and once that has lasted ``driverLostSeconds``
    the operator deletes the driver Pod at once (``DriverNodeLost``) and starts a new execution
    on the other worker. The old driver is frozen, not gone: when its node comes back, the
    execution id in the status fences it, so the output stays exact.

    The job takes incremental snapshots of its 10,000 running sums, an epoch changing a few
    hundred of them, written by the executors (the driver would write a state this small
    itself): every execution restores from a chain of a full version and deltas in the job's
    chain map, and the frozen driver, back, is a zombie that may still discard entries of
    that map (docs/concepts/protocol.md, "Where the chunks live and what may be discarded"): the
    exact output says it removed nothing the newer executions needed.
    """
    job = "nodes"
    # Many keys, few of them changed by an epoch: the snapshots' deltas are small.
    keys = 10_000
    args = sequence_sum_args(
        postgres, job, UNENDING, rate=100, max_rows_per_epoch=CATCH_UP, keys=keys
    )
    with Step("nodes-first-snapshot"):
        release.apply_job(
            job,
            args,
            pipeline=SEQUENCE_SUM,
            conf={DRIVER_SNAPSHOT_MAX_BYTES_CONF: "0"},
            incrementalSnapshots=True,
        )
        first = wait_snapshot(release, job, 1, timeout=300)
        # Past the first (full) snapshot of the chain: later ones write deltas.
        before = wait_snapshot(release, job, snapshot_id(first) + 2)
    _assert_deltas_written(release, before)
    driver = release.current_driver(job)
    node = driver["spec"]["nodeName"]
    restarts = int(before["status"].get("restarts", 0))
    try:
        with Step("nodes-drained"):
            release.cluster.kubectl(
                "drain",
                node,
                "--ignore-daemonsets",
                "--delete-emptydir-data",
                f"--pod-selector=snapshotjob.io/job={job}",
                "--timeout=180s",
                timeout=200,
            )
            after = next_execution(release, job, before)
    finally:
        release.cluster.kubectl("uncordon", node)
    # The evicted Pod is gone with its exit code; the driver's exit report told the operator.
    assert "DriverInterrupted" in _event_reasons(release, job), _event_lines(release, job)
    assert int(after["status"].get("restarts", 0)) == restarts, after["status"]
    assert after["status"]["driverExit"]["exitCode"] == 143, after["status"]
    assert release.current_driver(job)["spec"]["nodeName"] != node

    before = wait_snapshot(release, job, snapshot_id(after) + 2)
    # The new execution restored a chain and went on building on it.
    _assert_deltas_written(release, before)
    driver = release.current_driver(job)
    node = driver["spec"]["nodeName"]
    subprocess.run(["docker", "pause", node], check=True, timeout=60)
    try:
        with Step("nodes-lost-new-execution"):
            after = next_execution(release, job, before)
        assert release.current_driver(job)["spec"]["nodeName"] != node
        assert "DriverNodeLost" in _event_reasons(release, job)
    finally:
        subprocess.run(["docker", "unpause", node], check=True, timeout=60)
    with Step("nodes-node-back"):
        release.cluster.kubectl("wait", "--for=condition=Ready", f"node/{node}", "--timeout=300s")
        # The operator deleted the frozen driver's Pod without a grace period, so only the
        # node's kubelet, back, stops its container: whatever that driver did on its way out
        # (the newer execution fences it) is then done before the output is checked.
        old_driver = driver["metadata"]["name"]
        wait_for(
            release,
            f"the containers of pod={old_driver} on node={node} gone",
            lambda: not _running_containers(node, old_driver),
            timeout=180,
        )
        wait_snapshot(release, job, snapshot_id(after) + 1)
    with Step("nodes-suspended"):
        suspend_with_exact_prefix(release, job, keys)


def _assert_deltas_written(release: Release, job_object: dict[str, Any]) -> None:
    """Asserts that the job's restore point is in its chain map and that its current driver
    wrote a delta (its ``Snapshot chunks written ... increment=full:F,delta:D,keep:K`` lines)."""
    record = job_object["status"]["executionRecord"]
    assert record["dataMapIndex"] == CHAIN_MAP_INDEX, record
    pod = job_object["status"]["execution"]["driverPod"]
    log = release.kubectl("logs", pod, "-c", "driver")
    deltas = [int(n) for n in re.findall(r"increment=full:\d+,delta:(\d+),keep:\d+", log)]
    assert any(deltas), f"pod={pod} wrote no delta: {deltas} {log[-3000:]}"


def _running_containers(node: str, pod: str) -> list[str]:
    """The ids of the containers of Pod ``pod`` still running on ``node`` (its kind node)."""
    out = subprocess.run(
        ["docker", "exec", node, "crictl", "ps", "-q", "--label", f"io.kubernetes.pod.name={pod}"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return out.stdout.split()


def _job_events(release: Release, job: str, output: str) -> str:
    """The job's Events, oldest first, in kubectl's ``-o`` format ``output``."""
    return release.kubectl(
        "get",
        "events",
        "--field-selector",
        f"involvedObject.kind=SnapshotJob,involvedObject.name={job}",
        "--sort-by=.lastTimestamp",
        "-o",
        output,
    )


def _event_lines(release: Release, job: str) -> str:
    """The job's Events, a reason and message per line, oldest first: for failure messages."""
    return _job_events(release, job, "custom-columns=REASON:.reason,MESSAGE:.message")


def _event_reasons(release: Release, job: str) -> list[str]:
    """The reasons of the job's Events, oldest first."""
    return _job_events(release, job, "jsonpath={.items[*].reason}").split()
