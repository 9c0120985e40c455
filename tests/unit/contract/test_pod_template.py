"""Pod templates: what the user's template may set, and how it merges with the operator's Pod.

The driver Pod is the operator's own (``build_driver_pod``) and the executor template the
contract's (``executor_pod_template``), so the tests merge into the real ones.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from snapshot_operator.manifests import build_driver_pod
from snapshot_operator.reconcile import CreateDriverPod, JobRef
from snapshotjob_contract import SnapshotJobSpec
from snapshotjob_contract.pod_template import MAIN_CONTAINER, merge, template_problems
from snapshotjob_contract.pods import executor_pod_template

pytestmark = pytest.mark.unit

JOB = JobRef(namespace="analytics", name="wordcount", uid="0b7e6c1a-uid")
CREATE = CreateDriverPod("wordcount-driver-1", "0b7e6c1a-uid-1", 1, None)
BASE: dict[str, Any] = {"image": "snapshotjob/runtime:1", "pipeline": {"module": "p.wc"}}

DSN_FROM_SECRET = {
    "name": "PG_DSN",
    "valueFrom": {"secretKeyRef": {"name": "pg", "key": "dsn"}},
}


def driver_pod(**spec: Any) -> dict[str, Any]:
    return build_driver_pod(JOB, SnapshotJobSpec.model_validate({**BASE, **spec}), CREATE)


def env_values(container: dict[str, Any]) -> dict[str, Any]:
    """The environment as the kubelet resolves it: the last entry of a name wins."""
    resolved: dict[str, Any] = {}
    for item in container.get("env") or []:
        resolved[item["name"]] = item.get("value", item.get("valueFrom"))
    return resolved


def test_a_driver_takes_secrets_volumes_and_scheduling_from_the_template() -> None:
    template = {
        "metadata": {"labels": {"team": "data"}, "annotations": {"a": "b"}},
        "spec": {
            "serviceAccountName": "pipelines",
            "imagePullSecrets": [{"name": "registry"}],
            "nodeSelector": {"pool": "spark"},
            "tolerations": [{"key": "spark", "operator": "Exists", "effect": "NoSchedule"}],
            "affinity": {"nodeAffinity": {"x": 1}},
            "securityContext": {"fsGroup": 2000},
            "volumes": [{"name": "certs", "secret": {"secretName": "certs"}}],
            "containers": [
                {
                    "name": MAIN_CONTAINER,
                    "env": [DSN_FROM_SECRET],
                    "envFrom": [{"secretRef": {"name": "kafka"}}],
                    "volumeMounts": [{"name": "certs", "mountPath": "/certs"}],
                },
                {"name": "proxy", "image": "proxy:1"},
            ],
        },
    }
    pod = driver_pod(podTemplate=template)
    spec = pod["spec"]
    main, proxy = spec["containers"]
    assert main["name"] == "driver" and main["image"] == "snapshotjob/runtime:1"
    assert proxy == {"name": "proxy", "image": "proxy:1"}
    assert env_values(main)["PG_DSN"] == DSN_FROM_SECRET["valueFrom"]
    assert main["envFrom"] == [{"secretRef": {"name": "kafka"}}]
    # The template's, then the operator's writable /tmp.
    assert main["volumeMounts"] == [
        {"name": "certs", "mountPath": "/certs"},
        {"name": "sj-tmp", "mountPath": "/tmp"},
    ]
    assert spec["serviceAccountName"] == "pipelines"
    assert spec["imagePullSecrets"] == [{"name": "registry"}]
    assert spec["nodeSelector"] == {"pool": "spark"}
    assert spec["tolerations"][0]["key"] == "spark"
    assert spec["affinity"] == {"nodeAffinity": {"x": 1}}
    assert spec["securityContext"] == {"fsGroup": 2000}
    assert spec["restartPolicy"] == "Never"
    labels = pod["metadata"]["labels"]
    assert labels["team"] == "data"
    assert labels["app.kubernetes.io/component"] == "driver", "the operator's labels stay"
    assert pod["metadata"]["annotations"] == {"a": "b"}


def test_the_role_template_adds_to_the_shared_one_and_wins_on_conflict() -> None:
    pod = driver_pod(
        podTemplate={"spec": {"nodeSelector": {"pool": "a", "zone": "1"}}},
        spark={"driver": {"podTemplate": {"spec": {"nodeSelector": {"pool": "b"}}}}},
    )
    assert pod["spec"]["nodeSelector"] == {"pool": "b", "zone": "1"}


def test_the_operators_environment_wins_over_the_templates() -> None:
    template = {
        "spec": {
            "containers": [
                {"name": MAIN_CONTAINER, "env": [{"name": "SJ_EXECUTION_ID", "value": "forged"}]}
            ]
        }
    }
    [main] = driver_pod(podTemplate=template)["spec"]["containers"]
    assert env_values(main)["SJ_EXECUTION_ID"] == CREATE.execution_id


def test_the_container_security_context_merges_over_the_restricted_default() -> None:
    template = {"spec": {"containers": [{"name": "main", "securityContext": {"runAsUser": 7}}]}}
    [main] = driver_pod(podTemplate=template)["spec"]["containers"]
    assert main["securityContext"]["runAsUser"] == 7
    assert main["securityContext"]["capabilities"] == {"drop": ["ALL"]}


def test_an_executor_template_replaces_the_spread_and_keeps_the_restricted_rules() -> None:
    spread = [{"maxSkew": 2, "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}]
    template = {
        "spec": {
            "topologySpreadConstraints": spread,
            "containers": [{"name": MAIN_CONTAINER, "env": [DSN_FROM_SECRET]}],
        }
    }
    pod = merge(executor_pod_template(), template)
    assert pod["spec"]["topologySpreadConstraints"] == spread
    assert pod["spec"]["automountServiceAccountToken"] is False
    [main] = pod["spec"]["containers"]
    assert main["name"] == "executor"
    assert main["env"] == [DSN_FROM_SECRET]
    assert main["securityContext"]["allowPrivilegeEscalation"] is False


def test_no_template_leaves_the_pod_as_built() -> None:
    assert merge(executor_pod_template(), None, {}) == executor_pod_template()


@pytest.mark.parametrize(
    ("template", "says"),
    [
        ({"kind": "Pod"}, "podTemplate.kind is not allowed"),
        ({"metadata": {"name": "x"}}, "podTemplate.metadata.name is not allowed"),
        ({"spec": {"restartPolicy": "Always"}}, "restartPolicy is the operator's"),
        ({"spec": {"containers": [{"image": "x"}]}}, "containers[0] needs a name"),
        (
            {"spec": {"containers": [{"name": "main", "resources": {}}]}},
            "containers[main].resources is the operator's: set spec.spark.driver",
        ),
        (
            {"spec": {"containers": [{"name": "main", "image": "x"}]}},
            "containers[main].image is the operator's: set spec.image",
        ),
    ],
)
def test_owned_or_unknown_fields_make_an_invalid_spec_that_names_them(
    template: dict[str, Any], says: str
) -> None:
    assert any(says in problem for problem in template_problems(template))
    with pytest.raises(ValidationError, match=r"podTemplate"):
        SnapshotJobSpec.model_validate({**BASE, "podTemplate": template})
    with pytest.raises(ValidationError):
        SnapshotJobSpec.model_validate({**BASE, "spark": {"executor": {"podTemplate": template}}})


def test_a_template_rolls_the_job_out_but_none_keeps_the_fingerprint() -> None:
    plain = SnapshotJobSpec.model_validate(BASE)
    templated = SnapshotJobSpec.model_validate(
        {**BASE, "podTemplate": {"spec": {"nodeSelector": {"a": "b"}}}}
    )
    executor = SnapshotJobSpec.model_validate(
        {**BASE, "spark": {"executor": {"podTemplate": {"spec": {"nodeSelector": {"a": "b"}}}}}}
    )
    unset = SnapshotJobSpec.model_validate({**BASE, "podTemplate": None})
    assert unset.execution_fingerprint() == plain.execution_fingerprint()
    fingerprints = {
        plain.execution_fingerprint(),
        templated.execution_fingerprint(),
        executor.execution_fingerprint(),
    }
    assert len(fingerprints) == 3


_names = st.sampled_from(["A", "B", "SJ_NAMESPACE", "SJ_EXECUTION_ID", "SJ_METRICS_PORT"])
_env = st.lists(st.builds(lambda n, v: {"name": n, "value": v}, _names, st.text(max_size=3)))
_scalars = st.dictionaries(
    st.sampled_from(["serviceAccountName", "priorityClassName", "hostname", "schedulerName"]),
    st.text(min_size=1, max_size=5),
)


@given(env=_env, scalars=_scalars, sidecars=st.integers(0, 2))
def test_whatever_a_valid_template_says_the_operators_fields_hold(
    env: list[dict[str, Any]], scalars: dict[str, str], sidecars: int
) -> None:
    template = {
        "spec": {
            **scalars,
            "containers": [
                {"name": MAIN_CONTAINER, "env": env},
                *({"name": f"side-{n}", "image": "s"} for n in range(sidecars)),
            ],
        }
    }
    assert template_problems(template) == []
    plain = driver_pod()
    pod = driver_pod(podTemplate=template)
    main, *others = pod["spec"]["containers"]
    ours = plain["spec"]["containers"][0]
    for field in ("name", "image", "command", "args", "resources", "ports"):
        assert main[field] == ours[field]
    assert pod["spec"]["restartPolicy"] == "Never"
    assert len(others) == sidecars
    resolved = env_values(main)
    for name, value in env_values(ours).items():
        assert resolved[name] == value, f"the operator's {name} must win"
    for item in env:
        if item["name"] not in env_values(ours):
            assert item["name"] in resolved
    for key, value in scalars.items():
        if key in ("serviceAccountName", "priorityClassName", "schedulerName"):
            assert pod["spec"][key] == value
