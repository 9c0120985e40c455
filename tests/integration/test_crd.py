"""The generated CRD in a real API server: it installs, defaults, and rejects invalid specs.

The unit tests check the YAML's shape; only the API server can tell whether the schema is
structural, the CEL rules compile within their cost budget, and the rejections read well, so
these tests install ``crds/snapshotjob.yaml`` into the control-plane testbed and create
SnapshotJobs against it.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import pytest
from kubernetes import client

from snapshot_operator.manifests import (
    build_driver_pod,
    build_role,
    build_role_binding,
    build_service_account,
)
from snapshot_operator.reconcile import CreateDriverPod, JobRef, driver_pod_name, execution_id
from snapshotjob_contract import SnapshotJobSpec, SnapshotJobStatus
from snapshotjob_contract.resource import GROUP, MAX_NAME_LENGTH, PLURAL, VERSION
from testbed.controlplane import KubeAPI
from testbed.snapshotjob_crd import install_crd
from tests.unit.operator.specs import INVALID_SPECS, VALID_SPEC, InvalidSpecCase

pytestmark = [pytest.mark.integration, pytest.mark.kube]

CRD_PATH = Path(__file__).resolve().parents[2] / "crds" / "snapshotjob.yaml"
NAMESPACE = "default"


@pytest.fixture(scope="module")
def objects(kube_api: KubeAPI) -> client.CustomObjectsApi:
    """Installs (or replaces) the generated CRD and waits until its schema is enforced."""
    api_client = kube_api.api_client()
    install_crd(api_client)
    return client.CustomObjectsApi(api_client)


def _create(api: client.CustomObjectsApi, spec: dict[str, Any], name: str | None = None) -> str:
    name = name or f"crd-{uuid.uuid4().hex[:8]}"
    api.create_namespaced_custom_object(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        {
            "apiVersion": f"{GROUP}/{VERSION}",
            "kind": "SnapshotJob",
            "metadata": {"name": name},
            "spec": spec,
        },
    )
    return name


def test_a_minimal_spec_is_admitted_with_the_models_defaults(
    objects: client.CustomObjectsApi,
) -> None:
    name = _create(objects, VALID_SPEC)
    stored = cast(
        dict[str, Any],
        objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name),
    )

    expected = SnapshotJobSpec.model_validate(VALID_SPEC).to_json()
    assert stored["spec"] == expected


@pytest.mark.parametrize("case", INVALID_SPECS, ids=lambda case: case.name)
def test_an_invalid_spec_is_rejected_naming_the_field(
    objects: client.CustomObjectsApi, case: InvalidSpecCase
) -> None:
    with pytest.raises(client.exceptions.ApiException) as rejected:
        _create(objects, case.spec())

    assert rejected.value.status == 422
    body = str(rejected.value.body)
    assert case.field in body
    if case.message is not None:
        assert case.message in body


def test_a_name_longer_than_the_operator_can_label_with_is_refused(
    objects: client.CustomObjectsApi,
) -> None:
    prefix = f"crd-{uuid.uuid4().hex[:8]}-"
    longest = prefix + "a" * (MAX_NAME_LENGTH - len(prefix))

    with pytest.raises(client.exceptions.ApiException) as rejected:
        _create(objects, VALID_SPEC, name=longest + "a")

    assert rejected.value.status == 422
    body = str(rejected.value.body)
    assert f"metadata.name must be at most {MAX_NAME_LENGTH} characters" in body
    assert "choose a shorter name" in body
    assert _create(objects, VALID_SPEC, name=longest) == longest


def test_the_status_the_operator_writes_is_stored_unchanged(
    objects: client.CustomObjectsApi,
) -> None:
    name = _create(objects, VALID_SPEC)
    status = SnapshotJobStatus.model_validate(
        {
            "phase": "RUNNING",
            "observedGeneration": 1,
            "conditions": [
                {
                    "type": "Ready",
                    "status": "True",
                    "reason": "Running",
                    "message": "Job runs executionId=u-1",
                    "lastTransitionTime": "2026-01-02T03:04:05Z",
                    "observedGeneration": 1,
                }
            ],
            "executionRecord": {"snapshotId": 3, "dataMapIndex": 1, "ongoingSnapshotId": 4},
            "execution": {
                "id": "u-1",
                "driverPod": f"{name}-driver-1",
                "startedAt": "2026-01-02T03:00:00Z",
                "attempt": 1,
                "specHash": "0123456789abcdef",
                "statePartitions": 8,
            },
            "exportedSnapshots": [
                {
                    "name": "nightly",
                    "snapshotId": 2,
                    "numBytes": 10,
                    "createdAt": "2026-01-02T02:00:00Z",
                    "terminal": False,
                }
            ],
            "termination": {
                "mode": "CANCEL_GRACEFUL",
                "requestId": "u-1/CANCEL_GRACEFUL",
                "requestedAt": "2026-01-02T03:05:00Z",
                "exportName": "final",
                "reason": "ExportAndCancelRequested",
            },
            "restarts": 0,
            "exportFailure": {
                "name": "cold",
                "attempts": 2,
                "message": "SnapshotStoreError: put indeterminate",
                "time": "2026-01-02T03:06:00Z",
            },
        }
    )
    written = status.model_dump(mode="json")

    stored = cast(
        dict[str, Any],
        objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, name, {"status": written}
        ),
    )

    assert SnapshotJobStatus.model_validate(stored["status"]) == status


def test_kubectl_explain_describes_the_fields(
    objects: client.CustomObjectsApi, kube_api: KubeAPI
) -> None:
    explained = kube_api.kubectl("explain", "snapshotjobs.spec.exportSnapshot")

    assert "cancelJob" in explained
    assert "terminal snapshot" in explained
    partitions = kube_api.kubectl("explain", "snapshotjobs.spec.statePartitions")
    assert "Number of hash partitions of keyed state" in partitions


def test_printer_columns_show_phase_snapshot_age_and_restarts(
    objects: client.CustomObjectsApi, kube_api: KubeAPI
) -> None:
    name = _create(objects, VALID_SPEC)
    objects.patch_namespaced_custom_object_status(
        GROUP,
        VERSION,
        NAMESPACE,
        PLURAL,
        name,
        {
            "status": {
                "phase": "SUSPENDED",
                "executionRecord": {"snapshotId": 7},
                "lastSnapshotTime": "2020-01-01T00:00:00Z",
                "restarts": 2,
            }
        },
    )

    header, row = kube_api.kubectl("get", "sj", name).splitlines()

    assert header.split() == [
        "NAME",
        "PHASE",
        "SNAPSHOT",
        "LAST",
        "SNAPSHOT",
        "AGE",
        "RESTARTS",
        "AGE",
    ]
    name_column, phase, snapshot, snapshot_age, restarts, _age = row.split()
    assert (name_column, phase, snapshot, restarts) == (name, "SUSPENDED", "7", "2")
    assert re.fullmatch(r"\d+y\d*d?", snapshot_age), "the restore point of 2020 is years old"


def _allowed(
    api_client: client.ApiClient,
    account: str,
    verb: str,
    resource: str,
    name: str | None = None,
    *,
    group: str = "",
    subresource: str | None = None,
) -> bool:
    """Asks the API server's authorizer whether the ServiceAccount may do this."""
    review = client.V1SubjectAccessReview(
        spec=client.V1SubjectAccessReviewSpec(
            user=f"system:serviceaccount:{NAMESPACE}:{account}",
            groups=["system:serviceaccounts", f"system:serviceaccounts:{NAMESPACE}"],
            resource_attributes=client.V1ResourceAttributes(
                namespace=NAMESPACE,
                verb=verb,
                group=group,
                resource=resource,
                subresource=subresource,
                name=name,
            ),
        )
    )
    result = client.AuthorizationV1Api(api_client).create_subject_access_review(review)
    assert result.status is not None
    return bool(result.status.allowed)


def test_the_driver_pod_and_its_rbac_are_accepted_and_least_privileged(
    objects: client.CustomObjectsApi, kube_api: KubeAPI
) -> None:
    name, other = _create(objects, VALID_SPEC), _create(objects, VALID_SPEC)
    stored = cast(
        dict[str, Any],
        objects.get_namespaced_custom_object(GROUP, VERSION, NAMESPACE, PLURAL, name),
    )
    job = JobRef(NAMESPACE, name, stored["metadata"]["uid"])
    api_client = kube_api.api_client()
    # The manifests are plain dicts, which the typed client methods accept at run time.
    core: Any = client.CoreV1Api(api_client)
    rbac: Any = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(NAMESPACE, build_service_account(job))
    rbac.create_namespaced_role(NAMESPACE, build_role(job))
    rbac.create_namespaced_role_binding(NAMESPACE, build_role_binding(job))
    spec = SnapshotJobSpec.model_validate(VALID_SPEC)
    create = CreateDriverPod(
        driver_pod_name(name, 1), execution_id(job.uid, 1, datetime.now(UTC)), 1, None
    )

    pod = core.create_namespaced_pod(NAMESPACE, build_driver_pod(job, spec, create))

    assert pod.metadata.owner_references[0].uid == job.uid
    account = build_service_account(job)["metadata"]["name"]
    assert _allowed(api_client, account, "create", "pods")
    assert _allowed(api_client, account, "delete", "pods", "executor-1")
    assert _allowed(api_client, account, "patch", PLURAL, name, subresource="status", group=GROUP)
    assert _allowed(api_client, account, "get", PLURAL, name, group=GROUP)
    assert not _allowed(
        api_client, account, "patch", PLURAL, other, subresource="status", group=GROUP
    )
    assert not _allowed(api_client, account, "get", PLURAL, other, group=GROUP)
    assert not _allowed(api_client, account, "patch", PLURAL, name, group=GROUP), (
        "spec is the user's"
    )
    assert not _allowed(api_client, account, "get", "secrets")
    assert not _allowed(api_client, account, "create", "configmaps")


def test_a_forceful_termination_cannot_carry_an_export(objects: client.CustomObjectsApi) -> None:
    name = _create(objects, VALID_SPEC)
    termination = {
        "mode": "SUSPEND_FORCEFUL",
        "requestId": "u-1/SUSPEND_FORCEFUL",
        "requestedAt": "2026-01-02T03:05:00Z",
        "exportName": "final",
        "reason": "SuspendedOnFailure",
    }

    with pytest.raises(client.exceptions.ApiException) as rejected:
        objects.patch_namespaced_custom_object_status(
            GROUP, VERSION, NAMESPACE, PLURAL, name, {"status": {"termination": termination}}
        )

    assert rejected.value.status == 422
    assert "termination.exportName needs a graceful mode" in str(rejected.value.body)
