"""GitOps against a real API server: what the operator writes never shows as drift.

Argo CD and Flux apply manifests with server-side apply and compare the live object with what
applying the manifest again would give. If anything the operator writes (status, its finalizer,
defaults, annotations) showed up there, every sync would report the SnapshotJob OutOfSync, or
worse, undo the operator's writes. So each SnapshotJob manifest under ``examples/`` is applied
here as a GitOps tool does (``kubectl apply --server-side`` with its own field manager), the
operator (``python -m snapshot_operator``, as in ``test_operator.py``) reconciles it while the
test plays kubelet and driver (:mod:`testbed.operator_harness`), and then:

* ``kubectl diff --server-side`` with the same field manager shows nothing;
* the same apply as a server-side dry run (the Python client, ``dryRun=All``) returns the live
  object unchanged: spec, metadata (finalizers, labels, annotations, generation), the field
  managers and their field sets, status;
* applying it for real again changes nothing (a no-op: same ``resourceVersion``).

That holds while the job runs, once it is suspended from the manifest (``spec.suspend: true``
applied, as a Git commit would), and for a ``SnapshotJobExport`` of the job declared next to it
(``EXPORT_MANIFEST``: the examples hold none), which the operator completes. On the way the
recipes of docs/guides/gitops.md are run as written: ``kubectl wait`` on the Ready condition and on
the phase, the argocd-cm patch, and the Argo CD health check (docs/argocd/health.lua) on the
live objects.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from snapshot_operator.settings import DEFAULT_FINALIZER
from snapshot_store.hazelcast import HazelcastSnapshotStore
from snapshotjob_contract import export_map_name, snapshot_map_name
from snapshotjob_contract.exits import DriverExit
from snapshotjob_contract.exports import EXPORT_KIND, EXPORT_PLURAL
from snapshotjob_contract.resource import GROUP, KIND, PLURAL, VERSION
from testbed.controlplane import KubeAPI
from testbed.operator_harness import WAIT, OperatorHarness
from tests.integration.operator_fixtures import (
    crd,
    harness,
    namespace,
    operator,
    operator_args,
    operator_env,
    store,
    write_snapshot,
)
from tests.unit.operator.argocd_lua import argo_health

pytestmark = [pytest.mark.integration, pytest.mark.kube]
__all__ = ["crd", "harness", "namespace", "operator", "operator_args", "operator_env", "store"]

ROOT = Path(__file__).resolve().parents[2]
FIELD_MANAGER = "gitops-sync"
"""The applier's field manager, as Argo CD's ``argocd-controller`` or Flux's
``kustomize-controller``: the one that owns the fields the manifest sets."""
PLURALS = {KIND: PLURAL, EXPORT_KIND: EXPORT_PLURAL}
SNAPSHOT_ID = 3


def example_manifests() -> list[tuple[str, dict[str, Any]]]:
    """Every SnapshotJob (or SnapshotJobExport) document under examples/, with its file."""
    found = []
    for path in sorted(ROOT.joinpath("examples").rglob("*.y*ml")):
        for document in yaml.safe_load_all(path.read_text(encoding="utf-8")):
            if (
                isinstance(document, dict)
                and str(document.get("apiVersion", "")).split("/")[0] == GROUP
                and document.get("kind") in PLURALS
            ):
                found.append((f"{path.relative_to(ROOT)}:{document['metadata']['name']}", document))
    return found


EXAMPLES = example_manifests()
JOB_EXAMPLES = [(name, manifest) for name, manifest in EXAMPLES if manifest["kind"] == KIND]


def export_manifest(job: str) -> dict[str, Any]:
    """A SnapshotJobExport of the job, as a GitOps repository declares one next to it."""
    return {
        "apiVersion": f"{GROUP}/{VERSION}",
        "kind": EXPORT_KIND,
        "metadata": {"name": f"{job}-baseline", "labels": {"app.kubernetes.io/part-of": "gitops"}},
        "spec": {"jobName": job},
    }


class GitOps:
    """Applies manifests as a GitOps tool does and checks that nothing shows as drift."""

    def __init__(self, kube_api: KubeAPI, namespace: str, workdir: Path) -> None:
        self.kube_api = kube_api
        self.namespace = namespace
        self.workdir = workdir
        self.objects: Any = client.CustomObjectsApi(kube_api.api_client())

    def kubectl(self, *args: str) -> subprocess.CompletedProcess[str]:
        """Runs the test bed's kubectl against the control plane; returns it, whatever it exits."""
        return subprocess.run(
            [
                str(self.kube_api.binary("kubectl")),
                f"--kubeconfig={self.kube_api.kubeconfig}",
                "--namespace",
                self.namespace,
                *args,
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            # kubectl diff runs `diff -u -N` unless told otherwise.
            env={k: v for k, v in os.environ.items() if k != "KUBECTL_EXTERNAL_DIFF"},
        )

    def write(self, manifest: dict[str, Any]) -> Path:
        path = self.workdir / f"{manifest['kind']}-{manifest['metadata']['name']}.yaml"
        path.write_text(yaml.safe_dump(manifest, sort_keys=False), encoding="utf-8")
        return path

    def apply(self, manifest: dict[str, Any]) -> None:
        """``kubectl apply --server-side`` of the manifest under the applier's field manager."""
        result = self.kubectl(
            "apply",
            "--server-side",
            f"--field-manager={FIELD_MANAGER}",
            "-f",
            str(self.write(manifest)),
        )
        assert result.returncode == 0, result.stderr
        assert "serverside-applied" in result.stdout, result.stdout

    def get(self, manifest: dict[str, Any]) -> dict[str, Any]:
        found: dict[str, Any] = self.objects.get_namespaced_custom_object(
            GROUP, VERSION, self.namespace, PLURALS[manifest["kind"]], manifest["metadata"]["name"]
        )
        return found

    def dry_run_apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The object a server-side apply of the manifest would leave, written nowhere."""
        result: dict[str, Any] = self.objects.patch_namespaced_custom_object(
            GROUP,
            VERSION,
            self.namespace,
            PLURALS[manifest["kind"]],
            manifest["metadata"]["name"],
            manifest,
            dry_run="All",
            field_manager=FIELD_MANAGER,
            _content_type="application/apply-patch+yaml",
        )
        return result

    def settled(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """The live object once nobody has written it for two seconds."""
        deadline = time.monotonic() + WAIT
        live = self.get(manifest)
        while True:
            time.sleep(2)
            again = self.get(manifest)
            if again["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"]:
                return again
            assert time.monotonic() < deadline, "the object kept changing"
            live = again

    def assert_no_drift(self, manifest: dict[str, Any]) -> dict[str, Any]:
        """Checks the manifest against the settled live object three ways; returns the object.

        Retried while something else (the operator's resync) writes the object meanwhile.
        """
        for _ in range(3):
            live = self.settled(manifest)
            shown = self.diff(manifest)
            would = self.dry_run_apply(manifest)
            if (
                self.get(manifest)["metadata"]["resourceVersion"]
                == (live["metadata"]["resourceVersion"])
            ):
                break
        else:
            raise AssertionError("the object kept changing during the check")

        assert shown.returncode == 0 and shown.stdout == "", (
            f"kubectl diff --server-side shows drift (exit {shown.returncode}):\n"
            f"{shown.stdout}{shown.stderr}"
        )
        assert comparable(would) == comparable(live), (
            "a server-side apply would change the object:\n"
            f"live: {json.dumps(comparable(live), indent=1)}\n"
            f"dry run: {json.dumps(comparable(would), indent=1)}"
        )
        # The applier owns exactly the fields of its manifest's spec; nobody else owns any.
        owned = managers(live)
        assert (FIELD_MANAGER, "Apply", "") in owned, owned
        applied = owned[(FIELD_MANAGER, "Apply", "")]
        assert set(applied.get("f:spec", {})) == {f"f:{key}" for key in manifest["spec"]}
        for (manager, _, subresource), fields in owned.items():
            if manager != FIELD_MANAGER and subresource == "":
                assert "f:spec" not in fields, f"{manager} writes the spec: {fields}"

        self.apply(manifest)
        after = self.get(manifest)
        assert after["metadata"]["resourceVersion"] == live["metadata"]["resourceVersion"], (
            "applying the same manifest again wrote the object"
        )
        return live

    def diff(self, manifest: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        """``kubectl diff --server-side`` of the manifest under the applier's field manager."""
        path = str(self.write(manifest))
        return self.kubectl("diff", "--server-side", f"--field-manager={FIELD_MANAGER}", "-f", path)


def comparable(job: dict[str, Any]) -> dict[str, Any]:
    """The object without what a no-op write may still touch: the field managers' times."""
    job = copy.deepcopy(job)
    for entry in job["metadata"].get("managedFields", []):
        entry.pop("time", None)
    return job


def managers(job: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
    """The field sets by (manager, operation, subresource)."""
    return {
        (entry["manager"], entry["operation"], entry.get("subresource", "")): entry["fieldsV1"]
        for entry in job["metadata"].get("managedFields", [])
    }


def test_the_examples_hold_a_snapshotjob() -> None:
    assert JOB_EXAMPLES, "no SnapshotJob manifest under examples/"


@pytest.mark.parametrize(
    "manifest", [m for _, m in JOB_EXAMPLES], ids=[name for name, _ in JOB_EXAMPLES]
)
def test_what_the_operator_writes_is_no_drift(
    kube_api: KubeAPI,
    harness: OperatorHarness,
    store: HazelcastSnapshotStore,
    tmp_path: Path,
    manifest: dict[str, Any],
) -> None:
    gitops = GitOps(kube_api, harness.namespace, tmp_path)
    name = manifest["metadata"]["name"]
    maps: list[str] = []
    try:
        # Applied, started by the operator, its driver's pipeline running.
        gitops.apply(manifest)
        starting = harness.wait_phase(name, "STARTING")
        uid = gitops.get(manifest)["metadata"]["uid"]
        driver = starting["execution"]["driverPod"]
        harness.wait_pods(uid, [driver])
        harness.run_driver(name, driver)
        ready = gitops.kubectl(
            "wait", f"snapshotjob/{name}", "--for=condition=Ready", "--timeout=60s"
        )
        assert ready.returncode == 0, ready.stderr
        running = gitops.kubectl(
            "wait", f"snapshotjob/{name}", "--for=jsonpath={.status.phase}=RUNNING", "--timeout=60s"
        )
        assert running.returncode == 0, running.stderr

        live = gitops.assert_no_drift(manifest)
        assert live["metadata"]["finalizers"] == [DEFAULT_FINALIZER]
        assert live["status"]["observedGeneration"] == live["metadata"]["generation"] == 1
        assert argo_health(live).status == "Healthy"

        # A restore point, as the driver writes it; then suspended from the manifest.
        maps.append(snapshot_map_name(uid, 0, 1))
        write_snapshot(store, maps[-1], uid, SNAPSHOT_ID)
        harness.write_status(
            name,
            executionRecord={
                "snapshotId": SNAPSHOT_ID,
                "dataMapIndex": 0,
                "dataMapBackupCount": 1,
                "ongoingSnapshotId": SNAPSHOT_ID,
            },
        )
        suspend = copy.deepcopy(manifest)
        suspend["spec"]["suspend"] = True
        gitops.apply(suspend)
        # docs/guides/gitops.md: wait for the generation first, since Ready is still True from the
        # last one until the operator has seen the change; then Ready tells the truth.
        seen = gitops.kubectl(
            "wait",
            f"snapshotjob/{name}",
            "--for=jsonpath={.status.observedGeneration}=2",
            "--timeout=60s",
        )
        assert seen.returncode == 0, seen.stderr
        not_ready = gitops.kubectl(
            "wait", f"snapshotjob/{name}", "--for=condition=Ready=false", "--timeout=10s"
        )
        assert not_ready.returncode == 0, not_ready.stderr
        harness.wait_status(name, lambda s: "termination" in s, "the suspend request")
        progressing = argo_health(gitops.get(manifest))
        assert progressing.status == "Progressing", progressing
        harness.exit_pod(driver, DriverExit.TERMINATED)
        suspended = gitops.kubectl(
            "wait",
            f"snapshotjob/{name}",
            "--for=jsonpath={.status.phase}=SUSPENDED",
            "--timeout=60s",
        )
        assert suspended.returncode == 0, suspended.stderr

        live = gitops.assert_no_drift(suspend)
        assert live["status"]["observedGeneration"] == live["metadata"]["generation"] == 2
        health = argo_health(live)
        assert (health.status, health.message) == (
            "Suspended",
            "Suspended: Job is suspended as requested",
        )
        # The manifest of before the suspend is drift now, in spec.suspend (and so generation):
        # the diff does see what differs, so its silence above means something.
        shown = gitops.diff(manifest)
        assert shown.returncode == 1, shown.stderr
        changed = [
            line
            for line in shown.stdout.splitlines()
            if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))
        ]
        assert any("suspend: true" in line for line in changed), shown.stdout
        assert all("suspend" in line or "generation" in line for line in changed), shown.stdout

        # An export declared next to the job: the operator copies the restore point.
        export = export_manifest(name)
        maps.append(export_map_name(harness.namespace, export["metadata"]["name"]))
        gitops.apply(export)
        deadline = time.monotonic() + WAIT
        while gitops.get(export).get("status", {}).get("phase") != "Completed":
            assert time.monotonic() < deadline, gitops.get(export)
            time.sleep(0.2)
        live_export = gitops.assert_no_drift(export)
        assert live_export["status"]["snapshotId"] == SNAPSHOT_ID
        assert live_export["metadata"]["finalizers"], "the operator guards the export's data"
        gitops.assert_no_drift(suspend)
    finally:
        for map_name in maps:
            store.destroy(map_name)


def test_the_argocd_cm_snippet_patches_in_as_documented(kube_api: KubeAPI, namespace: str) -> None:
    """docs/guides/gitops.md: ``kubectl patch configmap argocd-cm --type merge --patch-file``."""
    core: Any = client.CoreV1Api(kube_api.api_client())
    core.create_namespaced_config_map(
        namespace,
        {
            "metadata": {
                "name": "argocd-cm",
                "labels": {"app.kubernetes.io/part-of": "argocd"},
            },
            "data": {"url": "https://argocd.example.com"},
        },
    )
    kube_api.kubectl(
        "--namespace",
        namespace,
        "patch",
        "configmap",
        "argocd-cm",
        "--type",
        "merge",
        "--patch-file",
        str(ROOT / "docs" / "argocd" / "argocd-cm.yaml"),
    )

    data = core.read_namespaced_config_map("argocd-cm", namespace).data
    lua = (ROOT / "docs" / "argocd" / "health.lua").read_bytes()
    key = f"resource.customizations.health.{GROUP}_{KIND}"
    assert data[key].encode("utf-8") == lua
    assert data["url"] == "https://argocd.example.com", "the patch keeps the other settings"
