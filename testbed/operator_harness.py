"""The operator as a subprocess, and a harness that plays user, kubelet and driver around it.

Why this exists: the control-plane test bed (:mod:`testbed.controlplane`) has no kubelet and
no driver runs in it, so whoever tests the operator there has to play both: set the driver
Pod's phase and its container's exit code, write the status a driver writes, and watch what
the operator does in return. The operator's integration tests and
``bench/reconcile_latency.py`` do it the same way, with these classes. The operator runs as
it does in production, ``python -m snapshot_operator``, watching one namespace (or every
one); restarting it is killing the process.
"""

from __future__ import annotations

import contextlib
import json
import sys
import threading
import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import urllib3
from kubernetes import client, watch

from snapshot_operator.reconcile.observe import CHECK_CONTAINER, DRIVER_CONTAINER
from snapshotjob_contract.pods import LABEL_JOB_UID
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from testbed.controlplane import KubeAPI
from testbed.hazelcast import HazelcastCluster
from testbed.processes import ManagedProcess
from testbed.snapshotjob_crd import VALID_SPEC

ROOT = Path(__file__).resolve().parents[1]
# The client's generated models declare nearly every field Optional; the harness reads fields
# the server always sets, so the client and its watch are used untyped.
k8s: Any = client
k8s_watch: Any = watch
WAIT = 30.0
"""Seconds the harness waits for the operator to do something, unless told otherwise."""


class OperatorProcess:
    """The operator as a subprocess watching one namespace (or every one)."""

    def __init__(
        self,
        kube: KubeAPI,
        namespace: str,
        store: HazelcastCluster,
        log_path: Path,
        *extra: str,
        standalone: bool = True,
        all_namespaces: bool = False,
        env: Mapping[str, str] | None = None,
    ) -> None:
        argv = [
            sys.executable,
            "-m",
            "snapshot_operator",
            *(["--all-namespaces"] if all_namespaces else ["--namespace", namespace]),
            *(["--standalone"] if standalone else []),
            "--store-members",
            ",".join(node.address for node in store.nodes),
            "--store-cluster-name",
            store.cluster_name,
            "--store-retry",
            "1",
            "--instance",
            f"test-{namespace}",
            *extra,
        ]
        self.process = ManagedProcess(
            f"operator-{namespace}",
            argv,
            log_path,
            env={"KUBECONFIG": str(kube.kubeconfig), "PYTHONUNBUFFERED": "1", **(env or {})},
            cwd=ROOT,
        )

    def start(self) -> None:
        """Starts the operator."""
        self.process.start()

    def kill(self) -> None:
        """Kills the operator outright, as a crashed or evicted replica."""
        self.process.kill()

    def stop(self) -> None:
        """Stops the operator gracefully."""
        self.process.stop()


class OperatorHarness:
    """Plays user, kubelet and driver against one namespace the operator watches."""

    def __init__(self, kube: KubeAPI, namespace: str, operator: OperatorProcess) -> None:
        self.api = kube.api_client()
        self.namespace = namespace
        self.operator = operator
        self.objects = k8s.CustomObjectsApi(self.api)
        self.core = k8s.CoreV1Api(self.api)

    # --- the user ---------------------------------------------------------------------------

    def create_job(self, name: str, **spec: Any) -> str:
        """Creates a SnapshotJob from VALID_SPEC with top-level spec changes; returns its uid."""
        body = {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SnapshotJob",
            "metadata": {"name": name},
            "spec": {**VALID_SPEC, **spec},
        }
        created = self.objects.create_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, body
        )
        return str(created["metadata"]["uid"])

    def patch_spec(self, name: str, **changes: Any) -> None:
        """Merge-patches the spec."""
        self.objects.patch_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURAL, name, {"spec": changes}
        )

    def delete_job(self, name: str) -> None:
        """Deletes the SnapshotJob (the operator's finalizer holds it until cleanup)."""
        self.objects.delete_namespaced_custom_object(GROUP, VERSION, self.namespace, PLURAL, name)

    def job(self, name: str) -> dict[str, Any] | None:
        """Returns the SnapshotJob, or None once it is gone."""
        try:
            job: dict[str, Any] = self.objects.get_namespaced_custom_object(
                GROUP, VERSION, self.namespace, PLURAL, name
            )
        except client.exceptions.ApiException as exc:
            if exc.status == 404:
                return None
            raise
        return job

    def status(self, name: str) -> dict[str, Any]:
        """Returns the job's status ({} before the first one)."""
        job = self.job(name)
        assert job is not None, f"SnapshotJob {name} is gone"
        return dict(job.get("status") or {})

    def wait_status(
        self, name: str, check: Callable[[dict[str, Any]], bool], what: str, timeout: float = WAIT
    ) -> dict[str, Any]:
        """Waits until the job's status passes ``check``; returns that status."""
        deadline = time.monotonic() + timeout
        status: dict[str, Any] = {}
        while time.monotonic() < deadline:
            status = self.status(name)
            if check(status):
                return status
            time.sleep(0.1)
        raise AssertionError(
            f"Timed out waiting for {what}: status={json.dumps(status, indent=1)}\n"
            f"operator log:\n{self.operator.process.log_tail(60)}"
        )

    def wait_phase(self, name: str, phase: str, timeout: float = WAIT) -> dict[str, Any]:
        """Waits for a phase; returns the status."""
        return self.wait_status(name, lambda s: s.get("phase") == phase, f"phase={phase}", timeout)

    def event_sources(self, name: str) -> dict[str, set[str]]:
        """Returns, per Event reason regarding the job, the replicas that emitted it."""
        events = k8s.EventsV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"regarding.name={name}"
        )
        sources: dict[str, set[str]] = {}
        for event in events.items:
            sources.setdefault(event.reason, set()).add(event.reporting_instance)
        return sources

    def events(self, name: str) -> list[str]:
        """Returns the reasons of the Events regarding the job, oldest first."""
        events = k8s.EventsV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"regarding.name={name}"
        )
        ordered = sorted(events.items, key=lambda e: e.event_time or e.metadata.creation_timestamp)
        return [event.reason for event in ordered]

    def event_messages(self, name: str, reason: str) -> list[str]:
        """Returns the messages (notes) of the Events with ``reason`` regarding the job."""
        events = k8s.EventsV1Api(self.api).list_namespaced_event(
            self.namespace, field_selector=f"regarding.name={name}"
        )
        return [event.note or "" for event in events.items if event.reason == reason]

    def wait_event(self, name: str, reason: str, timeout: float = WAIT) -> None:
        """Waits until an Event with the reason regards the job."""
        deadline = time.monotonic() + timeout
        while reason not in self.events(name):
            if time.monotonic() > deadline:
                raise AssertionError(f"No {reason} Event, got {self.events(name)}")
            time.sleep(0.1)

    # --- the kubelet ------------------------------------------------------------------------

    def pods(self, uid: str) -> list[Any]:
        """The job's Pods (``V1Pod`` objects): its drivers, including a kept failed one."""
        listed = self.core.list_namespaced_pod(
            self.namespace, label_selector=f"{LABEL_JOB_UID}={uid}"
        )
        return list(listed.items)

    def pod_names(self, uid: str) -> list[str]:
        """Names of the job's Pods, sorted."""
        return sorted(pod.metadata.name for pod in self.pods(uid))

    def wait_pods(self, uid: str, names: list[str], timeout: float = WAIT) -> None:
        """Waits until exactly these Pods of the job exist."""
        deadline = time.monotonic() + timeout
        while self.pod_names(uid) != sorted(names):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"Pods {self.pod_names(uid)} != {sorted(names)}\n"
                    f"operator log:\n{self.operator.process.log_tail(40)}"
                )
            time.sleep(0.1)

    def wait_pods_include(self, uid: str, name: str, timeout: float = WAIT) -> None:
        """Waits until the job has a Pod of this name (among others)."""
        deadline = time.monotonic() + timeout
        while name not in self.pod_names(uid):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"No Pod {name} in {self.pod_names(uid)}\n"
                    f"operator log:\n{self.operator.process.log_tail(40)}"
                )
            time.sleep(0.1)

    def uid(self, name: str) -> str:
        """The job's uid."""
        job = self.job(name)
        assert job is not None, name
        return str(job["metadata"]["uid"])

    def run_pod(self, pod: str) -> None:
        """Marks the driver Pod Running, as the kubelet would once the container started."""
        self.core.patch_namespaced_pod_status(pod, self.namespace, {"status": {"phase": "Running"}})

    def exit_pod(
        self, pod: str, code: int, *, container: str = DRIVER_CONTAINER, message: str | None = None
    ) -> None:
        """Marks a container terminated with an exit code (and the termination message the
        kubelet would pass on), and the Pod terminal."""
        terminated: dict[str, Any] = {"exitCode": int(code)}
        if message is not None:
            terminated["message"] = message
        status = {
            "phase": "Succeeded" if code == 0 else "Failed",
            "containerStatuses": [
                {
                    "name": container,
                    "image": VALID_SPEC["image"],
                    "imageID": "",
                    "ready": False,
                    "restartCount": 0,
                    "state": {"terminated": terminated},
                }
            ],
        }
        self.core.patch_namespaced_pod_status(pod, self.namespace, {"status": status})

    # --- the driver -------------------------------------------------------------------------

    def write_status(self, name: str, **fields: Any) -> None:
        """Writes status fields as the driver does: a status patch under the lock."""
        job = self.job(name)
        assert job is not None
        body = {
            "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
            "status": fields,
        }
        self.objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, self.namespace, PLURAL, name, body
        )

    def report_pipeline(self, name: str) -> None:
        """Reports the pipeline running, as the driver does once it restored and ran a Spark job.

        ``status.pipelineStarted`` names the current execution; without it the operator keeps
        the job STARTING however long its driver Pod runs. Written under the lock, again after
        a conflict (the operator patches the status too).
        """
        for _ in range(50):
            job = self.job(name)
            assert job is not None
            execution = (job.get("status") or {}).get("execution") or {}
            report = {
                "executionId": execution["id"],
                # To the microsecond: the operator counts a run from it (maxBackoffSeconds).
                "time": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
            body = {
                "metadata": {"resourceVersion": job["metadata"]["resourceVersion"]},
                "status": {"pipelineStarted": report},
            }
            try:
                self.objects.patch_namespaced_custom_object_status(
                    GROUP, VERSION, self.namespace, PLURAL, name, body
                )
                return
            except client.exceptions.ApiException as error:
                if error.status != 409:
                    raise
                time.sleep(0.05)
        raise AssertionError(f"Could not report the pipeline of {name}: conflicts")

    def run_driver(self, name: str, pod: str) -> None:
        """Plays a driver that starts and gets its pipeline running: the Pod Running, reported."""
        self.run_pod(pod)
        self.report_pipeline(name)

    def answer_upgrade_check(self, name: str, code: int, message: str | None = None) -> str:
        """Plays the upgrade check the operator started for the job: its Pod ends with
        ``code`` (0 compatible, 78 incompatible) and ``message``; returns the Pod's name."""
        status = self.wait_status(
            name,
            lambda s: "upgradeCheck" in s and "passed" not in s["upgradeCheck"],
            "a running upgrade check in the status",
        )
        pod = str(status["upgradeCheck"]["podName"])
        self.wait_pods_include(self.uid(name), pod)
        self.exit_pod(pod, code, container=CHECK_CONTAINER, message=message)
        return pod

    def record_phases(self, name: str) -> PhaseRecorder:
        """Starts recording every phase the job's status passes through."""
        return PhaseRecorder(self, name)

    def start_running(self, name: str, **spec: Any) -> tuple[str, dict[str, Any]]:
        """Creates a job and brings its first execution to RUNNING; returns uid and status.

        Plays the driver's Pod running and its report that the pipeline runs.
        """
        uid = self.create_job(name, **spec)
        status = self.wait_phase(name, "STARTING")
        self.wait_pods(uid, [status["execution"]["driverPod"]])
        self.run_driver(name, status["execution"]["driverPod"])
        return uid, self.wait_phase(name, "RUNNING")


class PhaseRecorder:
    """Watches one SnapshotJob and keeps every phase its status passed through, in order."""

    def __init__(self, harness: OperatorHarness, name: str) -> None:
        self.phases: list[str] = []
        self._watch = k8s_watch.Watch()
        job = harness.job(name)
        assert job is not None
        self._thread = threading.Thread(
            target=self._run,
            args=(harness, name, job["metadata"]["resourceVersion"]),
            daemon=True,
        )
        self._thread.start()

    def _run(self, harness: OperatorHarness, name: str, version: str) -> None:
        stream = self._watch.stream(
            harness.objects.list_namespaced_custom_object,
            GROUP,
            VERSION,
            harness.namespace,
            PLURAL,
            field_selector=f"metadata.name={name}",
            resource_version=version,
            timeout_seconds=120,
        )
        # Stopping the watch ends the stream mid-response; that is the normal end here.
        with contextlib.suppress(urllib3.exceptions.ProtocolError):
            for event in stream:
                phase = (event["object"].get("status") or {}).get("phase")
                if phase and (not self.phases or self.phases[-1] != phase):
                    self.phases.append(phase)

    def stop(self) -> list[str]:
        """Stops watching; returns the phases seen."""
        self._watch.stop()
        return self.phases
