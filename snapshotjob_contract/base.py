"""The base of every SnapshotJob API model: one place for naming, strictness and CEL rules.

Kubernetes resources are camelCase; Python is snake_case. Every model aliases its fields to
camelCase and dumps by alias, so the operator and the runtime read and write the exact JSON
the API server stores, and the CRD generator sees the same names.

Cross-field rules are written once, as data (:class:`CrossFieldRule`): the CEL expression goes
into the CRD as ``x-kubernetes-validations`` (the API server rejects violating objects at
admission), and the Python predicate runs when a model is validated. Both are needed: objects
stored before a rule existed are never re-admitted, so the operator must catch them itself.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, ClassVar, NamedTuple, Self

from pydantic import BaseModel, ConfigDict, ValidationError, model_validator
from pydantic.alias_generators import to_camel

DNS_LABEL_PATTERN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
"""An RFC 1123 label, as Kubernetes names of most kinds; export names must be one."""

DNS_LABEL_MAX_LENGTH = 63

LABEL_VALUE_MAX_LENGTH = 63
"""The longest Kubernetes label value."""

LABEL_VALUE_PATTERN = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
"""A Kubernetes label value (empty, or alphanumerics with ``-_.`` inside)."""


SECRET_KEY_PATTERN = r"^[-._a-zA-Z0-9]+$"
"""A key of a Secret's data."""


def is_label_value(text: str) -> bool:
    """Returns whether ``text`` may be a Kubernetes label's value."""
    return len(text) <= LABEL_VALUE_MAX_LENGTH and re.match(LABEL_VALUE_PATTERN, text) is not None


class CrossFieldRule(NamedTuple):
    """A validation rule over several fields of one object.

    Attributes:
        cel: The rule as a CEL expression over ``self`` (camelCase field names).
        message: What the API server and the operator say when the rule is broken.
        holds: The same rule in Python, over the validated model.
    """

    cel: str
    message: str
    holds: Callable[[Any], bool]


def _add_cel_rules(schema: dict[str, Any], model: type[BaseModel]) -> None:
    rules: tuple[CrossFieldRule, ...] = getattr(model, "CROSS_FIELD_RULES", ())
    if rules:
        schema["x-kubernetes-validations"] = [
            {"rule": rule.cel, "message": rule.message} for rule in rules
        ]


class ApiModel(BaseModel):
    """A part of the SnapshotJob resource; attribute docstrings become the CRD descriptions."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        validate_by_name=True,
        validate_by_alias=True,
        serialize_by_alias=True,
        use_attribute_docstrings=True,
        frozen=True,
        json_schema_extra=_add_cel_rules,
    )

    CROSS_FIELD_RULES: ClassVar[tuple[CrossFieldRule, ...]] = ()
    """Rules over several fields; subclasses list theirs."""

    @model_validator(mode="after")
    def _check_cross_field_rules(self) -> Self:
        broken = [rule.message for rule in self.CROSS_FIELD_RULES if not rule.holds(self)]
        if broken:
            raise ValueError("; ".join(broken))
        return self

    def to_json(self) -> dict[str, Any]:
        """Returns the object as the API server stores it (camelCase, no null fields)."""
        return self.model_dump(mode="json", exclude_none=True)


def explain(error: ValidationError) -> str:
    """One line naming each invalid field by its API path, e.g. ``statePartitions: ...``.

    For messages in logs, Events and exit reasons: pydantic's own text spans several lines.
    """
    return "; ".join(
        f"{'.'.join(str(part) for part in problem['loc']) or '(object)'}: {problem['msg']}"
        for problem in error.errors()
    )
