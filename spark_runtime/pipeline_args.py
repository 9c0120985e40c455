"""``$(NAME)`` references in ``spec.pipeline.args``: secrets reach the pipeline through the
driver's environment, never in the SnapshotJob in plain text.

A PostgreSQL DSN or a Kafka password in ``pipeline.args`` would be readable by anyone who may
``get`` the SnapshotJob, and would sit in Git with the rest of a GitOps-managed spec. Instead
the spec's pod template puts the Secret into the driver's environment (``env`` with a
``secretKeyRef``, or ``envFrom``), and an argument names it as ``$(NAME)``: the syntax
Kubernetes itself expands in a container's ``command`` and ``args``, with ``$$`` for a literal
``$``. Unlike Kubernetes, a reference to a variable the driver does not have is an error
naming both (a DSN left as the text ``$(PG_DSN)`` would only fail later, and less clearly).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_REFERENCE = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


class MissingVariableError(ValueError):
    """An argument names an environment variable the driver does not have."""


def expand(args: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """Returns the arguments with every ``$(NAME)`` in a string value replaced.

    Nested lists and objects are expanded too; other values are kept as they are.

    Args:
        args: ``spec.pipeline.args``.
        environ: The driver's environment.

    Raises:
        MissingVariableError: If a value names a variable ``environ`` lacks; the message names the
            argument and the variable.
    """
    return {key: _expand(value, environ, key) for key, value in args.items()}


def _expand(value: Any, environ: Mapping[str, str], where: str) -> Any:
    if isinstance(value, str):
        return _REFERENCE.sub(lambda match: _value_of(match, environ, where), value)
    if isinstance(value, list):
        return [_expand(item, environ, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, Mapping):
        return {key: _expand(item, environ, f"{where}.{key}") for key, item in value.items()}
    return value


def _value_of(match: re.Match[str], environ: Mapping[str, str], where: str) -> str:
    name = match.group(1)
    if name is None:
        return "$"
    if name not in environ:
        raise MissingVariableError(
            f"spec.pipeline.args.{where} refers to $({name}), which the driver's environment "
            f"lacks: add {name} to spec.podTemplate (or spec.spark.driver.podTemplate) "
            f"containers[main].env, e.g. from a Secret with valueFrom.secretKeyRef"
        )
    return environ[name]
