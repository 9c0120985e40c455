"""Benchmark: how fast a spec change becomes a termination request in the job's status.

This is the operator's reaction time, the part of a graceful suspend or upgrade the operator
owns: from the user's ``spec.suspend: true`` being accepted by the API server to
``status.termination`` (the request the driver polls for) being written. It runs the real
operator (``python -m snapshot_operator`` in a subprocess) against the real control plane and
a real 3-member Hazelcast cluster, as ``tests/integration/test_operator.py`` does, and plays
the driver between the rounds (exit with TERMINATED, resume, Pod Running again).

Each round: the job RUNNING, then ``suspend: true`` is patched; the time runs from the
moment the patch is sent to the first watch event showing the new request. The baseline, in
the same round and the same watch, is the API's own floor: from sending a patch of an
annotation to the watch event showing it, with no operator involved. The operator reconciles
that annotation change too, so the suspend is sent ``SETTLE_S`` after it: sent at once, it
would wait for the probe's reconcile and measure the probe. Prints every figure; the last
line is JSON with ``median_ms``, ``p99_ms``, ``rounds``, ``baseline_median_ms`` and
``median_ratio_to_baseline`` (median over the baseline's median).

The floor counts one patch and one watch delivery; the operator's path counts a watch
delivery (the spec change reaching it), its reads and decision, and a patch (the request):
about two floors plus the reconcile itself. ``docs/reference/operator.md`` ("The reconcile's time")
says where that time goes, stage by stage.

Run: ``.venv/bin/python bench/reconcile_latency.py`` (``--rounds 20`` for a quick pass).
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client, watch

from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.resource import GROUP, PLURAL, VERSION
from testbed import controlplane, kube_binaries
from testbed.hazelcast import HazelcastCluster
from testbed.operator_harness import OperatorHarness, OperatorProcess
from testbed.snapshotjob_crd import install_crd

JOB = "latency"
PROBE_ANNOTATION = "bench.snapshotjob.io/probe"
SETTLE_S = 0.3
"""After the baseline's probe, the time the operator gets to reconcile it before the suspend."""


class RequestWatch:
    """Records when each termination request first shows in the job's status."""

    def __init__(self, harness: OperatorHarness) -> None:
        self.seen: dict[str, float] = {}
        self.probes: dict[str, float] = {}
        self._stopping = threading.Event()
        self._changed = threading.Condition()
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(harness,), daemon=True)
        self._thread.start()

    def _run(self, harness: OperatorHarness) -> None:
        while not self._stopping.is_set():
            try:
                for event in self._watch.stream(
                    harness.objects.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    harness.namespace,
                    PLURAL,
                    field_selector=f"metadata.name={JOB}",
                    timeout_seconds=600,
                ):
                    now = time.perf_counter()
                    job = event["object"]
                    request = (job.get("status") or {}).get("termination")
                    probe = (job["metadata"].get("annotations") or {}).get(PROBE_ANNOTATION)
                    with self._changed:
                        if request is not None:
                            self.seen.setdefault(request["requestId"], now)
                        if probe is not None:
                            self.probes.setdefault(probe, now)
                        self._changed.notify_all()
            except Exception as error:  # a dropped stream is reopened, as kopf does
                logging.getLogger(__name__).debug("Watch reopened error=%s", error)

    def stop(self) -> None:
        """Stops watching and waits for the watch thread to end."""
        self._stopping.set()
        self._watch.stop()
        self._thread.join(timeout=10)

    def wait_for(self, request_id_prefix: str, timeout: float = 30.0) -> float:
        """Returns when a request whose id starts with the prefix was first seen."""
        return self._wait(self.seen, request_id_prefix, timeout)

    def wait_for_probe(self, value: str, timeout: float = 30.0) -> float:
        """Returns when the probe annotation with this value was first seen."""
        return self._wait(self.probes, value, timeout)

    def _wait(self, seen: dict[str, float], prefix: str, timeout: float) -> float:
        deadline = time.monotonic() + timeout
        with self._changed:
            while True:
                for key, at in seen.items():
                    if key.startswith(prefix):
                        return at
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise TimeoutError(f"Not seen in the job's watch key={prefix}*")
                self._changed.wait(remaining)


def run_round(harness: OperatorHarness, requests: RequestWatch, uid: str) -> tuple[float, float]:
    """One suspend of a running job, then resumes it.

    Returns:
        The latency and the baseline (the API's patch-to-watch floor), in seconds.
    """
    status = harness.wait_phase(JOB, "RUNNING")
    execution = status["execution"]
    probe = uuid.uuid4().hex
    probe_sent = time.perf_counter()
    harness.objects.patch_namespaced_custom_object(
        GROUP,
        VERSION,
        harness.namespace,
        PLURAL,
        JOB,
        {"metadata": {"annotations": {PROBE_ANNOTATION: probe}}},
    )
    baseline = requests.wait_for_probe(probe) - probe_sent
    # The probe is a change of the job too: the operator reconciles it. Sent right away, the
    # suspend would wait for that reconcile to end, which measures the probe, not the path.
    time.sleep(SETTLE_S)
    # From sending the patch: the figure includes the API server accepting the change.
    sent = time.perf_counter()
    harness.patch_spec(JOB, suspend=True)
    seen = requests.wait_for(f"{execution['id']}/SUSPEND_GRACEFUL")
    harness.exit_pod(execution["driverPod"], DriverExit.TERMINATED.value)
    harness.wait_phase(JOB, "SUSPENDED")
    harness.patch_spec(JOB, suspend=False)
    started = harness.wait_status(
        JOB,
        lambda s: s.get("phase") == "STARTING" and s["execution"]["id"] != execution["id"],
        "the next execution",
    )
    pod = started["execution"]["driverPod"]
    harness.wait_pods(uid, [pod])
    harness.run_driver(JOB, pod)
    return seen - sent, baseline


def percentile(values: list[float], fraction: float) -> float:
    """Nearest-rank percentile."""
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, math.ceil(fraction * len(ordered)) - 1))
    return ordered[rank]


def main() -> None:
    """Runs the benchmark and prints the figures."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=100)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    workdir = Path(tempfile.mkdtemp(prefix="sj-latency-"))
    print(f"Logs of the operator, control plane and members in {workdir}", flush=True)
    plane = controlplane.ControlPlane(
        state_dir=workdir / "kube", bin_dir=kube_binaries.ensure_binaries(), tie_to_parent=True
    )
    (workdir / "hazelcast").mkdir()
    store = HazelcastCluster(workdir / "hazelcast")
    operator: OperatorProcess | None = None
    requests: RequestWatch | None = None
    result: dict[str, Any] = {}
    try:
        plane.start()
        store.start()
        kube = plane.kube_api()
        api = kube.api_client()
        install_crd(api)
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "bench"}})
        operator = OperatorProcess(kube, "bench", store, workdir / "operator.log")
        operator.start()
        harness = OperatorHarness(kube, "bench", operator)
        requests = RequestWatch(harness)
        uid = harness.create_job(JOB)
        status = harness.wait_phase(JOB, "STARTING")
        harness.wait_pods(uid, [status["execution"]["driverPod"]])
        harness.run_driver(JOB, status["execution"]["driverPod"])
        latencies: list[float] = []
        baselines: list[float] = []
        for index in range(args.rounds):
            latency, baseline = run_round(harness, requests, uid)
            latencies.append(latency)
            baselines.append(baseline)
            if (index + 1) % 10 == 0:
                print(f"rounds={index + 1} lastMs={latencies[-1] * 1000:.1f}", flush=True)
        millis = [value * 1000 for value in latencies]
        floor = [value * 1000 for value in baselines]
        result = {
            "rounds": len(millis),
            "median_ms": round(statistics.median(millis), 1),
            "p99_ms": round(percentile(millis, 0.99), 1),
            "min_ms": round(min(millis), 1),
            "max_ms": round(max(millis), 1),
            "baseline_median_ms": round(statistics.median(floor), 1),
            "baseline_p99_ms": round(percentile(floor, 0.99), 1),
            "median_ratio_to_baseline": round(
                statistics.median(millis) / statistics.median(floor), 1
            ),
        }
    finally:
        if requests is not None:
            requests.stop()
        if operator is not None:
            operator.stop()
        store.stop()
        plane.stop()
    # After the teardown, whose warnings would otherwise follow the JSON line.
    print(
        f"Spec change to termination request: median={result['median_ms']}ms "
        f"p99={result['p99_ms']}ms min={result['min_ms']}ms max={result['max_ms']}ms "
        f"rounds={result['rounds']}"
    )
    print(
        f"Baseline, patch to watch event without the operator: "
        f"median={result['baseline_median_ms']}ms p99={result['baseline_p99_ms']}ms "
        f"ratio={result['median_ratio_to_baseline']}"
    )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
