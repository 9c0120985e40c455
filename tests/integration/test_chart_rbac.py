"""The drivers' RBAC created by the chart (``jobs.rbac.precreate``), rendered by helm.

By default the operator creates each job's ServiceAccount, Role and RoleBinding when it
first starts the job's driver, so it must hold the right to create Roles. With
``jobs.rbac.precreate`` the chart creates one set per watched namespace and the operator holds
no RBAC right at all; these tests tie that Role to the operator's own (``build_role``), the
account to the name the operator reads (``SJ_OPERATOR_DRIVER_SERVICE_ACCOUNT`` through its own
parser), and show the operator's rights shrink.
"""

from __future__ import annotations

from typing import Any

import pytest

from snapshot_operator.manifests import build_role
from snapshot_operator.reconcile import JobRef
from snapshot_operator.settings import parse_settings
from tests.integration.chart_render import (
    CHART,
    RELEASE,
    by_kind,
    covers,
    operator,
    render,
    run_helm,
)

pytestmark = pytest.mark.helm

NAMESPACED = ("operator.allNamespaces=false", "operator.namespaces={team-a,team-b}")
PRECREATE = (*NAMESPACED, "jobs.rbac.precreate=true")
ACCOUNT = f"{RELEASE}-snapshotjob-operator-driver"
RBAC_RIGHTS = (
    {"apiGroups": [""], "resources": ["serviceaccounts"], "verbs": ["create"]},
    {"apiGroups": ["rbac.authorization.k8s.io"], "resources": ["roles"], "verbs": ["create"]},
    {
        "apiGroups": ["rbac.authorization.k8s.io"],
        "resources": ["rolebindings"],
        "verbs": ["create"],
    },
)


def named(objects: list[dict[str, Any]], kind: str, name: str) -> list[dict[str, Any]]:
    return [o for o in by_kind(objects, kind) if o["metadata"]["name"] == name]


def without_names(rules: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in rule.items() if k != "resourceNames"} for rule in rules]


def test_each_watched_namespace_gets_the_drivers_account_with_the_operators_rules() -> None:
    objects = render(*PRECREATE, "jobs.rbac.serviceAccountAnnotations.iam\\.gke\\.io/gsa=x")
    job_rules = without_names(build_role(JobRef("ns", "job", "uid"))["rules"])
    for namespace in ("team-a", "team-b"):
        (account,) = [
            a for a in named(objects, "ServiceAccount", ACCOUNT)
            if a["metadata"]["namespace"] == namespace
        ]  # fmt: skip
        assert account["metadata"]["annotations"] == {"iam.gke.io/gsa": "x"}
        (role,) = [
            r for r in named(objects, "Role", ACCOUNT) if r["metadata"]["namespace"] == namespace
        ]
        assert role["rules"] == job_rules
        (binding,) = [
            b for b in named(objects, "RoleBinding", ACCOUNT)
            if b["metadata"]["namespace"] == namespace
        ]  # fmt: skip
        assert binding["roleRef"]["name"] == ACCOUNT
        assert binding["subjects"] == [
            {"kind": "ServiceAccount", "name": ACCOUNT, "namespace": namespace}
        ]
    env = {
        item["name"]: item["value"]
        for item in operator(objects)["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in item
    }
    settings = parse_settings([], env)
    assert settings.driver_service_account == ACCOUNT


def test_with_precreated_rbac_the_operator_holds_no_right_to_create_any() -> None:
    def operator_roles(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return named(objects, "Role", f"{RELEASE}-snapshotjob-operator")

    default = operator_roles(render(*NAMESPACED))
    precreated = operator_roles(render(*PRECREATE))
    assert len(default) == len(precreated) == 2
    for role in default:
        assert all(covers(role["rules"], right) for right in RBAC_RIGHTS)
    for role in precreated:
        assert not any(covers(role["rules"], right) for right in RBAC_RIGHTS), role["rules"]
        assert not any(
            rule["apiGroups"] == ["rbac.authorization.k8s.io"] for rule in role["rules"]
        ), role["rules"]
    assert named(render(*NAMESPACED), "ServiceAccount", ACCOUNT) == []


def test_precreated_rbac_needs_the_namespaces_listed() -> None:
    result = run_helm("template", RELEASE, str(CHART), "--set",
                      "jobs.rbac.precreate=true")  # fmt: skip
    assert result.returncode != 0
    assert "jobs.rbac.precreate creates the drivers' ServiceAccount" in result.stderr
