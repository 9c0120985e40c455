"""The chart's NetworkPolicies: who may reach the members and the operator, rendered by helm.

The policies and the operator must name the same store label, or jobs lose their store the
moment the policies are enforced; these tests tie the rendered policy to the value the
operator reads (``SJ_OPERATOR_STORE_LABEL`` through its own parser) and to the ``helm test``
Pod. That an enforcing network plugin denies an unlabelled Pod and admits a job's is shown on
kind (tests/e2e/test_network_policy_kind.py).
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from snapshot_operator.settings import parse_settings
from snapshotjob_contract.base import is_label_value
from snapshotjob_contract.pods import LABEL_STORE
from tests.integration.chart_render import (
    CHART,
    NAMESPACE,
    RELEASE,
    assert_schema_refuses,
    by_kind,
    helm,
    operator,
    pod_specs,
    render,
)

pytestmark = pytest.mark.helm

FULLNAME = f"{RELEASE}-snapshotjob-operator"


def policies(objects: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The rendered NetworkPolicies by the component they protect."""
    return {
        policy["metadata"]["labels"]["app.kubernetes.io/component"]: policy
        for policy in by_kind(objects, "NetworkPolicy")
    }


def store_label_of(objects: list[dict[str, Any]]) -> str | None:
    """The store label the operator reads from the chart's environment, as it parses it."""
    env = {
        item["name"]: item.get("value", "")
        for item in operator(objects)["spec"]["template"]["spec"]["containers"][0]["env"]
        if "value" in item
    }
    return parse_settings(["--namespace", "jobs"], env).store_label


def test_the_members_admit_their_port_from_each_other_the_operator_and_the_stores_jobs() -> None:
    objects = render()
    member_policy = policies(objects)["hazelcast"]
    templates = pod_specs(objects)
    label = store_label_of(objects)

    assert label == f"{NAMESPACE}.{FULLNAME}-hazelcast"
    spec = member_policy["spec"]
    assert spec["podSelector"]["matchLabels"].items() <= (
        templates["hazelcast"]["metadata"]["labels"].items()
    )
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule["ports"] == [{"protocol": "TCP", "port": 5701}]
    peers, operators, jobs = rule["from"]
    assert peers["podSelector"]["matchLabels"].items() <= (
        templates["hazelcast"]["metadata"]["labels"].items()
    )
    assert operators["podSelector"]["matchLabels"].items() <= (
        templates["operator"]["metadata"]["labels"].items()
    )
    # Any namespace (allNamespaces, the default), only Pods with the store's label.
    assert jobs == {"namespaceSelector": {}, "podSelector": {"matchLabels": {LABEL_STORE: label}}}


def test_the_helm_test_pod_may_reach_the_members_and_the_operator() -> None:
    objects = render()
    (pod,) = [p for p in by_kind(objects, "Pod") if "helm.sh/hook" in p["metadata"]["annotations"]]
    labels = pod["metadata"]["labels"]
    assert labels[LABEL_STORE] == store_label_of(objects)
    operator_policy = policies(objects)["operator"]
    (from_test,) = operator_policy["spec"]["ingress"][0]["from"]
    assert from_test["podSelector"]["matchLabels"].items() <= labels.items()
    assert {port["port"] for port in operator_policy["spec"]["ingress"][0]["ports"]} == {
        8080,
        9400,
    }


def test_metrics_are_admitted_only_from_the_namespaces_named() -> None:
    assert len(policies(render())["operator"]["spec"]["ingress"]) == 1
    named = policies(render("networkPolicy.metricsNamespaces={monitoring,obs}"))["operator"]
    metrics_rule = named["spec"]["ingress"][1]
    assert metrics_rule["ports"] == [{"protocol": "TCP", "port": 9400}]
    assert metrics_rule["from"] == [
        {
            "namespaceSelector": {
                "matchExpressions": [
                    {
                        "key": "kubernetes.io/metadata.name",
                        "operator": "In",
                        "values": ["monitoring", "obs"],
                    }
                ]
            }
        }
    ]


def test_extra_member_ingress_rules_are_added() -> None:
    rule = {"from": [{"ipBlock": {"cidr": "10.1.0.0/16"}}], "ports": [{"port": 5701}]}
    objects = render(
        "networkPolicy.extraMemberIngress[0].from[0].ipBlock.cidr=10.1.0.0/16",
        "networkPolicy.extraMemberIngress[0].ports[0].port=5701",
    )
    assert policies(objects)["hazelcast"]["spec"]["ingress"][1] == rule


def test_disabled_renders_no_policy_and_without_a_store_no_label() -> None:
    assert by_kind(render("networkPolicy.enabled=false"), "NetworkPolicy") == []
    objects = render("hazelcast.enabled=false")
    assert set(policies(objects)) == {"operator"}
    assert store_label_of(objects) is None


def test_a_long_release_gets_a_store_label_kubernetes_accepts() -> None:
    """``<namespace>.<store>`` past 63 characters becomes a hash, still a valid label value."""
    objects = [
        doc
        for doc in yaml.safe_load_all(
            helm("template", RELEASE, str(CHART), "--namespace", "n" * 60)
        )
        if doc
    ]
    label = store_label_of(objects)
    assert label is not None and label.startswith("store-") and is_label_value(label)
    assert policies(objects)["hazelcast"]["spec"]["ingress"][0]["from"][2]["podSelector"] == {
        "matchLabels": {LABEL_STORE: label}
    }


@pytest.mark.parametrize(
    ("value", "wrong"),
    [
        ("networkPolicy.metricsNamespaces={Monitoring}", "metricsNamespaces"),
        ("networkPolicy.enabled=yes", "enabled"),
    ],
)
def test_the_schema_refuses_wrong_network_policy_values(value: str, wrong: str) -> None:
    assert_schema_refuses(value, wrong)


def test_in_namespaced_mode_only_the_watched_namespaces_pods_are_admitted() -> None:
    objects = render("operator.allNamespaces=false", "operator.namespaces={team-a,team-b}")
    jobs = policies(objects)["hazelcast"]["spec"]["ingress"][0]["from"][2]
    assert jobs["namespaceSelector"] == {
        "matchExpressions": [
            {
                "key": "kubernetes.io/metadata.name",
                "operator": "In",
                "values": ["team-a", "team-b", NAMESPACE],
            }
        ]
    }
    assert jobs["podSelector"] == {"matchLabels": {LABEL_STORE: store_label_of(objects)}}
