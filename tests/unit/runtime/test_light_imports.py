"""Importing the file sink or a light source imports no database, cluster or Kafka client.

A pipeline that only writes files should neither need a database driver installed nor pay
for importing one. import-linter (``pyproject.toml``) checks each light module's own imports;
what it cannot see is the package ``__init__`` that Python runs on the way to
``spark_runtime.sinks.file``, which must stay lazy. So these tests import the packages afresh
in this process and record every import statement the test's thread runs: an import
statement goes through ``builtins.__import__`` even when the module is already loaded, which
catches what a look at ``sys.modules`` would miss once another test loaded psycopg.
"""

from __future__ import annotations

import builtins
import importlib
import sys
import threading
from collections.abc import Iterator, Mapping, Sequence
from types import ModuleType

import pytest

import spark_runtime

_PACKAGES = ("sinks", "sources")
_HEAVY = ("psycopg", "hazelcast", "confluent_kafka")


def _ours(module: str) -> bool:
    return any(
        module == f"spark_runtime.{package}" or module.startswith(f"spark_runtime.{package}.")
        for package in _PACKAGES
    )


def _heavy(imported: Sequence[str]) -> list[str]:
    return [name for name in imported if name.partition(".")[0] in _HEAVY]


@pytest.fixture
def imported() -> Iterator[list[str]]:
    """Forgets the sink and source packages, then records the names this thread imports.

    Everything is put back afterwards, so later tests keep using the classes they already
    hold (a second copy of ``Sink`` would fail their ``isinstance`` checks).
    """
    saved_modules = {name: module for name, module in sys.modules.items() if _ours(name)}
    saved_attributes = {
        p: getattr(spark_runtime, p) for p in _PACKAGES if hasattr(spark_runtime, p)
    }
    names: list[str] = []
    thread = threading.get_ident()
    real_import = builtins.__import__

    def recording_import(
        name: str,
        globals: Mapping[str, object] | None = None,
        locals: Mapping[str, object] | None = None,
        fromlist: Sequence[str] | None = (),
        level: int = 0,
    ) -> ModuleType:
        if threading.get_ident() == thread:
            names.append(name)
        return real_import(name, globals, locals, fromlist, level)

    for name in saved_modules:
        del sys.modules[name]
    builtins.__import__ = recording_import
    try:
        yield names
    finally:
        builtins.__import__ = real_import
        for name in [name for name in sys.modules if _ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved_modules)
        for package in _PACKAGES:
            if package in saved_attributes:
                setattr(spark_runtime, package, saved_attributes[package])
            elif hasattr(spark_runtime, package):
                delattr(spark_runtime, package)


def test_the_file_sink_imports_no_database_or_cluster_client(imported: list[str]) -> None:
    importlib.import_module("spark_runtime.sinks.file")
    sinks = importlib.import_module("spark_runtime.sinks")
    for name in (
        "FileSink",
        "ConsoleSink",
        "Sink",
        "TransactionalSink",
        "StagedSink",
        "SinkParticipant",
    ):
        assert getattr(sinks, name).__name__ == name
    assert _heavy(imported) == []


def test_the_sequence_and_file_sources_import_no_database_client(imported: list[str]) -> None:
    sources = importlib.import_module("spark_runtime.sources")
    for name in ("SequenceSource", "FileSource", "Source", "SourceParticipant"):
        assert getattr(sources, name).__name__ == name
    assert _heavy(imported) == []


def test_a_backend_is_imported_when_its_name_is_first_used(imported: list[str]) -> None:
    sinks = importlib.import_module("spark_runtime.sinks")
    assert _heavy(imported) == []
    postgres_sink = sinks.PostgresSink
    assert postgres_sink is importlib.import_module("spark_runtime.sinks.postgres").PostgresSink
    assert "psycopg" in _heavy(imported)  # the recording sees what these tests look for
    assert sinks.HazelcastMapSink.__module__ == "spark_runtime.sinks.hazelcast_map"
    assert any(name.startswith("hazelcast") for name in _heavy(imported))
    assert sinks.KafkaSink.__module__ == "spark_runtime.sinks.kafka"
    assert any(name.startswith("confluent_kafka") for name in _heavy(imported))


def test_the_packages_list_their_public_names_and_refuse_others() -> None:
    import spark_runtime.sinks as sinks
    import spark_runtime.sources as sources

    assert set(sinks.__all__) <= set(dir(sinks))
    assert set(sources.__all__) <= set(dir(sources))
    with pytest.raises(AttributeError, match="no attribute 'KinesisSink'"):
        _ = sinks.KinesisSink  # type: ignore[attr-defined]
