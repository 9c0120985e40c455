"""Renders the SnapshotJob and SnapshotJobExport CustomResourceDefinitions from the API models.

The CRD is generated, never hand-edited, so the API server validates exactly what the operator
and the runtime read (the resource is described in ``docs/reference/api.md``). pydantic's JSON
Schema is close to what Kubernetes wants, but a CRD needs a *structural* schema: every node typed,
no
``$ref``, no ``anyOf`` with types in it, no ``additionalProperties: false`` (the API server
prunes unknown fields instead). :func:`structural` makes that translation, and refuses fields
without a description, so ``kubectl explain snapshotjob.spec`` always reads well.

Run ``python -m snapshot_operator.api.crd > crds/snapshotjob.yaml`` (or ``--output FILE``).
"""

from __future__ import annotations

import argparse
import copy
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel

from snapshotjob_contract.base import CrossFieldRule
from snapshotjob_contract.exports import (
    EXPORT_KIND,
    EXPORT_NAME_RULE,
    EXPORT_PLURAL,
    EXPORT_SHORT_NAMES,
    EXPORT_SINGULAR,
    SnapshotJobExportSpec,
    SnapshotJobExportStatus,
)
from snapshotjob_contract.resource import GROUP, KIND, NAME_RULE, PLURAL, SINGULAR, VERSION
from snapshotjob_contract.spec import SnapshotJobSpec
from snapshotjob_contract.status import SnapshotJobStatus

SHORT_NAMES = ("sj",)
CRD_NAME = f"{PLURAL}.{GROUP}"
EXPORT_CRD_NAME = f"{EXPORT_PLURAL}.{GROUP}"

HEADER = (
    "# Generated from the snapshotjob_contract models by `python -m snapshot_operator.api.crd`.\n"
    "# Do not edit: change the models and render again (make crds).\n"
)

PRINTER_COLUMNS: tuple[Mapping[str, str], ...] = (
    {
        "name": "Phase",
        "type": "string",
        "jsonPath": ".status.phase",
        "description": "Lifecycle phase of the job",
    },
    {
        "name": "Snapshot",
        "type": "integer",
        "jsonPath": ".status.executionRecord.snapshotId",
        "description": "Id of the restore point (-1: none yet)",
    },
    {
        "name": "Last snapshot age",
        "type": "date",
        "jsonPath": ".status.lastSnapshotTime",
        "description": "Age of the restore point: the recovery point objective",
    },
    {
        "name": "Restarts",
        "type": "integer",
        "jsonPath": ".status.restarts",
        "description": "Failed executions restarted in a row",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)

EXPORT_PRINTER_COLUMNS: tuple[Mapping[str, str], ...] = (
    {
        "name": "Job",
        "type": "string",
        "jsonPath": ".spec.jobName",
        "description": "The SnapshotJob exported",
    },
    {
        "name": "Phase",
        "type": "string",
        "jsonPath": ".status.phase",
        "description": "Lifecycle phase of the export",
    },
    {
        "name": "Snapshot",
        "type": "integer",
        "jsonPath": ".status.snapshotId",
        "description": "Id of the exported snapshot",
    },
    {
        "name": "Bytes",
        "type": "integer",
        "jsonPath": ".status.numBytes",
        "description": "Bytes of snapshot data",
    },
    {
        "name": "Origin",
        "type": "string",
        "jsonPath": ".spec.origin",
        "description": "Who asked for the export",
    },
    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
)

_DROPPED_KEYWORDS = frozenset({"title", "$defs"})


class SchemaError(ValueError):
    """The models cannot be rendered as a structural schema."""


def structural(schema: Mapping[str, Any], *, path: str = "") -> dict[str, Any]:
    """Returns a pydantic JSON Schema as a Kubernetes structural schema.

    Args:
        schema: The output of ``model_json_schema(by_alias=True)``.
        path: Where the schema sits in the resource, for error messages.

    Raises:
        SchemaError: A property has no description, or a construct has no structural form.
    """
    definitions: Mapping[str, Any] = schema.get("$defs", {})
    return _node(schema, definitions, path or "<root>")


def _resolve(node: Mapping[str, Any], definitions: Mapping[str, Any]) -> dict[str, Any]:
    """Inlines a ``$ref`` and drops a nullable ``anyOf``; the referring node's keys win."""
    resolved = dict(node)
    if "anyOf" in resolved:
        variants = [v for v in resolved.pop("anyOf") if v.get("type") != "null"]
        if len(variants) != 1:
            raise SchemaError(f"union types have no structural form: {node}")
        resolved = {**variants[0], **resolved, "nullable": True}
        if resolved.get("default", 0) is None:
            del resolved["default"]
    if "$ref" in resolved:
        target = definitions[resolved.pop("$ref").rsplit("/", 1)[-1]]
        resolved = {**_resolve(target, definitions), **resolved}
    return resolved


def _node(raw: Mapping[str, Any], definitions: Mapping[str, Any], path: str) -> dict[str, Any]:
    node = _resolve(raw, definitions)
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROPPED_KEYWORDS:
            continue
        if key == "properties":
            out[key] = {
                name: _property(sub, definitions, f"{path}.{name}") for name, sub in value.items()
            }
        elif key == "description":
            # Docstrings wrap lines; kubectl explain wraps them again.
            out[key] = " ".join(value.split())
        elif key == "items":
            out[key] = _node(value, definitions, f"{path}[]")
        elif key == "additionalProperties":
            if value is True or value == {}:
                # A free-form map: keep whatever the user wrote.
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, Mapping):
                out[key] = _node(value, definitions, f"{path}.*")
            # False: unknown fields are pruned by the API server, which is what forbid means.
        else:
            out[key] = copy.deepcopy(value)
    if "type" not in out and not out.get("x-kubernetes-preserve-unknown-fields"):
        raise SchemaError(f"{path} has no type")
    return out


def _property(raw: Mapping[str, Any], definitions: Mapping[str, Any], path: str) -> dict[str, Any]:
    node = _node(raw, definitions, path)
    if not node.get("description"):
        raise SchemaError(f"{path} has no description")
    object_fields_all_optional = node.get("type") == "object" and not node.get("required")
    if object_fields_all_optional and "default" not in node and not node.get("nullable"):
        # The object is defaulted whole: the API server checks a default against the CEL rules
        # without filling in the nested defaults first.
        node["default"] = {
            name: copy.deepcopy(sub["default"])
            for name, sub in node.get("properties", {}).items()
            if "default" in sub
        }
    return node


def _definition(
    *,
    name: str,
    plural: str,
    singular: str,
    kind: str,
    short_names: Sequence[str],
    columns: Sequence[Mapping[str, str]],
    description: str,
    name_rule: CrossFieldRule,
    spec: type[BaseModel],
    status: type[BaseModel],
) -> dict[str, Any]:
    """One namespaced CRD of the group: a single served version with a status subresource."""
    spec_schema = structural(spec.model_json_schema(by_alias=True), path="spec")
    status_schema = structural(
        status.model_json_schema(by_alias=True, mode="serialization"), path="status"
    )
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": name},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "plural": plural,
                "singular": singular,
                "kind": kind,
                "listKind": f"{kind}List",
                "shortNames": list(short_names),
                "categories": ["all"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "subresources": {"status": {}},
                    "additionalPrinterColumns": [dict(c) for c in columns],
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "description": description,
                            "required": ["spec"],
                            # Only a root rule sees metadata.name.
                            "x-kubernetes-validations": [
                                {"rule": name_rule.cel, "message": name_rule.message}
                            ],
                            "properties": {
                                "apiVersion": {
                                    "type": "string",
                                    "description": "Versioned schema of this object.",
                                },
                                "kind": {
                                    "type": "string",
                                    "description": "REST resource this object represents.",
                                },
                                "metadata": {"type": "object"},
                                "spec": spec_schema,
                                "status": status_schema,
                            },
                        }
                    },
                }
            ],
        },
    }


def crd() -> dict[str, Any]:
    """Returns the SnapshotJob CustomResourceDefinition."""
    return _definition(
        name=CRD_NAME,
        plural=PLURAL,
        singular=SINGULAR,
        kind=KIND,
        short_names=SHORT_NAMES,
        columns=PRINTER_COLUMNS,
        description="A long-running PySpark pipeline protected by non-corruptible snapshots in "
        "Hazelcast: restarted from its last good snapshot after failures, suspended and "
        "upgraded through terminal snapshots, and exported by name on request.",
        name_rule=NAME_RULE,
        spec=SnapshotJobSpec,
        status=SnapshotJobStatus,
    )


def export_crd() -> dict[str, Any]:
    """Returns the SnapshotJobExport CustomResourceDefinition."""
    return _definition(
        name=EXPORT_CRD_NAME,
        plural=EXPORT_PLURAL,
        singular=EXPORT_SINGULAR,
        kind=EXPORT_KIND,
        short_names=EXPORT_SHORT_NAMES,
        columns=EXPORT_PRINTER_COLUMNS,
        description="One exported snapshot of a SnapshotJob, named like this object: created "
        "by a user to ask the job for it, or by the operator for the job's other exports; "
        "deleting it with spec.disposeOnDelete destroys its data (docs/guides/exports.md).",
        name_rule=EXPORT_NAME_RULE,
        spec=SnapshotJobExportSpec,
        status=SnapshotJobExportStatus,
    )


def render() -> str:
    """Returns both CRDs as the YAML committed in ``crds/snapshotjob.yaml``."""
    return HEADER + yaml.safe_dump_all(
        [crd(), export_crd()], sort_keys=False, width=100, allow_unicode=True
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Writes the CRD to standard output or to the files given with ``--output``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--output", "-o", action="append", type=Path, help="write here (repeatable)"
    )
    args = parser.parse_args(argv)
    text = render()
    if not args.output:
        sys.stdout.write(text)
    for output in args.output or ():
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
