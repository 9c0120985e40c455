"""Pod templates: the user's Pod settings for drivers and executors, and how they are merged.

Users of the Flink and Spark operators set a Pod's environment from Secrets, volumes, node
selection, security contexts and service accounts through a pod template: a partial Pod
(``metadata`` and ``spec``) that the operator completes. SnapshotJob takes the same shape
(``spec.podTemplate`` for the driver and the executors, ``spec.spark.driver.podTemplate`` and
``spec.spark.executor.podTemplate`` for one of them), and the container named
:data:`MAIN_CONTAINER` in it stands for the driver's or executor's own container; any other
container is a sidecar.

The operator builds the driver Pod over the merged template and the driver writes Spark's
executor pod template from it (``snapshotjob_contract.pods``), with the one :func:`merge`
here, so both roles follow the same rules:

* What the job's correctness or the operator's bookkeeping depends on is the operator's:
  the main container's image, command, arguments and resources (``spec.image`` and
  ``spec.spark`` set those), ``restartPolicy``, and the labels and environment variables the
  operator sets (its values win over the template's).
* What a cluster's policies are about is the user's: ``serviceAccountName``, the security
  contexts (merged key by key over the restricted defaults), ``affinity`` and
  ``topologySpreadConstraints`` (replacing the operator's spread of executors), the priority
  class and the scheduler.
* Everything else adds up: lists (environment, ``envFrom``, volumes, mounts, tolerations,
  image pull Secrets, sidecars) are the template's followed by the operator's, maps (node
  selector, labels, annotations) are merged.

A template is checked when the spec is parsed (:func:`template_problems`): an owned field
in it is an invalid spec, reported in the job's conditions, rather than silently dropped.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

MAIN_CONTAINER = "main"
"""The template's name for the driver's or executor's own container."""

OWNED_CONTAINER_FIELDS = ("image", "command", "args", "resources")
"""Fields of the main container the operator sets from ``spec.image`` and ``spec.spark``."""

USER_POD_FIELDS = frozenset(
    {
        "serviceAccountName",
        "securityContext",
        "affinity",
        "topologySpreadConstraints",
        "priorityClassName",
        "schedulerName",
        "runtimeClassName",
    }
)
"""Pod fields where the template wins over the operator's value."""

USER_CONTAINER_FIELDS = frozenset({"securityContext"})
"""Main-container fields where the template wins (merged key by key over the default)."""

_TOP_LEVEL = frozenset({"metadata", "spec"})
_METADATA = frozenset({"labels", "annotations"})


def template_problems(template: Mapping[str, Any]) -> list[str]:
    """Returns what is wrong with a pod template, empty if nothing.

    Args:
        template: ``spec.podTemplate`` or a role's template, as the user wrote it.
    """
    problems = [
        f"podTemplate.{key} is not allowed (only metadata and spec)"
        for key in sorted(set(template) - _TOP_LEVEL)
    ]
    metadata = template.get("metadata") or {}
    if not isinstance(metadata, Mapping):
        return [*problems, "podTemplate.metadata must be an object"]
    problems += [
        f"podTemplate.metadata.{key} is not allowed (only labels and annotations: the "
        "operator names its Pods)"
        for key in sorted(set(metadata) - _METADATA)
    ]
    spec = template.get("spec") or {}
    if not isinstance(spec, Mapping):
        return [*problems, "podTemplate.spec must be an object"]
    if "restartPolicy" in spec:
        problems.append(
            "podTemplate.spec.restartPolicy is the operator's: it restarts executions itself"
        )
    containers = spec.get("containers") or []
    if not isinstance(containers, list):
        return [*problems, "podTemplate.spec.containers must be a list"]
    for index, container in enumerate(containers):
        if not isinstance(container, Mapping) or not container.get("name"):
            problems.append(f"podTemplate.spec.containers[{index}] needs a name")
            continue
        if container["name"] != MAIN_CONTAINER:
            continue
        problems += [
            f"podTemplate.spec.containers[{MAIN_CONTAINER}].{field} is the operator's: set "
            f"{_WHERE[field]} instead"
            for field in OWNED_CONTAINER_FIELDS
            if field in container
        ]
    return problems


_WHERE = {
    "image": "spec.image",
    "command": "spec.pipeline",
    "args": "spec.pipeline.args",
    "resources": "spec.spark.driver or spec.spark.executor",
}


def merge(pod: Mapping[str, Any], *templates: Mapping[str, Any] | None) -> dict[str, Any]:
    """Returns the operator's Pod completed by the templates, by the rules of this module.

    Args:
        pod: The Pod (or Spark's executor pod template) as the operator builds it; its first
            container is the main one.
        templates: The templates, the most general first (``spec.podTemplate``, then the
            role's); a later template's values win over an earlier one's.

    Returns:
        A new Pod; ``pod`` and the templates are not changed.
    """
    user: dict[str, Any] = {}
    for template in templates:
        if template:
            user = _merge_templates(user, template)
    if not user:
        return copy.deepcopy(dict(pod))
    merged = copy.deepcopy(dict(pod))
    metadata = merged.setdefault("metadata", {})
    for key in ("labels", "annotations"):
        theirs = (user.get("metadata") or {}).get(key) or {}
        if theirs:
            metadata[key] = {**theirs, **(metadata.get(key) or {})}
    merged["spec"] = _merge_pod_spec(merged.get("spec") or {}, user.get("spec") or {})
    return merged


def _merge_templates(base: dict[str, Any], template: Mapping[str, Any]) -> dict[str, Any]:
    """Two templates: the later one's values win, maps merge, lists add up, containers by
    name."""
    out = copy.deepcopy(base)
    for key, value in template.items():
        if key == "containers" and isinstance(value, list):
            out[key] = _containers_by_name(out.get(key) or [], value)
        elif isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _merge_templates(out[key], value)
        elif isinstance(value, list) and isinstance(out.get(key), list):
            out[key] = [*out[key], *copy.deepcopy(value)]
        else:
            out[key] = copy.deepcopy(value)
    return out


def _containers_by_name(
    base: list[dict[str, Any]], later: list[Mapping[str, Any]]
) -> list[dict[str, Any]]:
    out = [copy.deepcopy(container) for container in base]
    index = {container.get("name"): position for position, container in enumerate(out)}
    for container in later:
        position = index.get(container.get("name"))
        if position is None:
            out.append(copy.deepcopy(dict(container)))
        else:
            out[position] = _merge_templates(out[position], container)
    return out


def _merge_pod_spec(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, Any]:
    merged = copy.deepcopy(dict(theirs))
    for key, value in ours.items():
        if key == "containers":
            continue
        if key in USER_POD_FIELDS and key in theirs:
            if isinstance(value, Mapping) and isinstance(theirs[key], Mapping):
                merged[key] = {**copy.deepcopy(value), **copy.deepcopy(dict(theirs[key]))}
            continue
        merged[key] = _ours_over(theirs.get(key), value)
    containers = [copy.deepcopy(dict(c)) for c in ours.get("containers") or []]
    sidecars = [c for c in theirs.get("containers") or [] if c.get("name") != MAIN_CONTAINER]
    main_template = next(
        (c for c in theirs.get("containers") or [] if c.get("name") == MAIN_CONTAINER), None
    )
    if containers and main_template is not None:
        containers[0] = _merge_main_container(containers[0], main_template)
    merged["containers"] = [*containers, *copy.deepcopy(sidecars)]
    return merged


def _merge_main_container(ours: Mapping[str, Any], theirs: Mapping[str, Any]) -> dict[str, Any]:
    merged = {
        key: copy.deepcopy(value)
        for key, value in theirs.items()
        if key != "name" and key not in OWNED_CONTAINER_FIELDS
    }
    for key, value in ours.items():
        if key in USER_CONTAINER_FIELDS and key in theirs:
            merged[key] = {**copy.deepcopy(dict(value)), **copy.deepcopy(dict(theirs[key]))}
            continue
        merged[key] = _ours_over(theirs.get(key), value)
    return merged


def _ours_over(theirs: Any, ours: Any) -> Any:
    """The operator's value over the template's: maps merge (ours win), lists add up (theirs
    first, so an environment variable the operator sets, listed last, wins)."""
    if isinstance(ours, Mapping) and isinstance(theirs, Mapping):
        return {**copy.deepcopy(dict(theirs)), **copy.deepcopy(dict(ours))}
    if isinstance(ours, list) and isinstance(theirs, list):
        return [*copy.deepcopy(theirs), *copy.deepcopy(ours)]
    return copy.deepcopy(ours)
