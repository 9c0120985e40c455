"""``$(NAME)`` references in pipeline arguments, expanded from the driver's environment."""

from __future__ import annotations

import pytest

from spark_runtime.pipeline_args import MissingVariableError, expand

pytestmark = pytest.mark.unit

ENV = {"PG_DSN": "postgresql://u:secret@pg/db", "USER": "ada"}


def test_references_are_replaced_in_strings_lists_and_objects() -> None:
    args = {
        "dsn": "$(PG_DSN)",
        "greeting": "hi $(USER), costs $$5 $$(USER)",
        "hosts": ["a", "$(USER)"],
        "nested": {"dsn": "$(PG_DSN)"},
        "keys": 10,
        "bounded": True,
    }
    assert expand(args, ENV) == {
        "dsn": "postgresql://u:secret@pg/db",
        "greeting": "hi ada, costs $5 $(USER)",
        "hosts": ["a", "ada"],
        "nested": {"dsn": "postgresql://u:secret@pg/db"},
        "keys": 10,
        "bounded": True,
    }


def test_a_missing_variable_names_the_argument_and_the_variable() -> None:
    with pytest.raises(MissingVariableError, match=r"args\.nested\.dsn refers to \$\(PG_DSN\)"):
        expand({"nested": {"dsn": "$(PG_DSN)"}}, {})


def test_text_that_only_looks_like_a_reference_is_kept() -> None:
    assert expand({"a": "$PG_DSN", "b": "$(not valid)", "c": "$("}, ENV) == {
        "a": "$PG_DSN",
        "b": "$(not valid)",
        "c": "$(",
    }
