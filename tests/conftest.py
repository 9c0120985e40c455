"""Test configuration shared by every tier.

The real-server fixtures live in :mod:`tests.fixtures` (thin pytest plugins over the
:mod:`testbed` package); they are registered here as plugins so every test module can ask
for ``hazelcast_cluster``, ``postgres``, ``s3``, ``spark``, ``kube_api``, ``kind_cluster`` or
``prometheus``.
"""

from __future__ import annotations

import os
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import settings

from testbed import scratch
from testbed.jvm import use_quick_jit

# Property tests assert outcomes, not speed: on a loaded 2-core CI machine one example may
# take longer than hypothesis's default 200 ms deadline without anything being wrong.
settings.register_profile("snapshotjob", deadline=None)
settings.load_profile("snapshotjob")

pytest_plugins = [
    "tests.fixtures.fresh_venv",
    "tests.fixtures.hazelcast",
    "tests.fixtures.in_process_driver",
    "tests.fixtures.postgres",
    "tests.fixtures.kafka",
    "tests.fixtures.s3",
    "tests.fixtures.spark",
    "tests.fixtures.kube",
    "tests.fixtures.netns",
    "tests.fixtures.prometheus",
    # pytester runs nested in-process sessions: tests/unit/test_process_guard.py uses it.
    "pytester",
]


_SCRATCH = pytest.StashKey[Path]()


def pytest_configure(config: pytest.Config) -> None:
    """Every Spark JVM the session starts compiles with C1 only (why in :mod:`testbed.jvm`),
    and the session's processes keep their temporary files in a folder the session removes
    when it ends (why in :mod:`testbed.scratch`)."""
    use_quick_jit(os.environ)
    config.stash[_SCRATCH] = scratch.enter(os.environ)


def pytest_unconfigure(config: pytest.Config) -> None:
    """Removes the session's temporary folder (:func:`pytest_configure`)."""
    folder = config.stash.get(_SCRATCH, None)
    if folder is not None:
        scratch.leave(folder, os.environ)


TIERS = ("unit", "integration", "e2e")
"""The test tiers, by folder under tests/."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test its tier marker from its folder, so ``-m unit`` selects by folder.

    The unit tests run first and the tests on the kind cluster last (the order within each
    group is kept). Session fixtures (the kind cluster, the chart release, the control plane,
    the servers) are finalized in the teardown of the session's last test, so that test must
    be one whose markers allow the teardown: not a unit test (its process guard,
    ``tests/unit/conftest.py``, forbids processes) and, while the cluster is up, one whose
    ``cluster`` marker declares the ``kubectl`` and ``helm`` the release's teardown runs
    (``tests/fixtures/kube.py`` refuses undeclared binaries). Last, the cluster's nodes and
    the jobs left in it also stop competing with the other tiers for the CPU.
    """
    for item in items:
        parts = item.path.parts
        for tier in TIERS:
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=_run_order)


def _run_order(item: pytest.Item) -> int:
    """0 for the unit tests, 2 for the tests on the kind cluster, 1 for the rest."""
    if "unit" in item.path.parts:
        return 0
    return 2 if item.get_closest_marker("cluster") else 1


MODULE_TIME_SHOWN_S = 30.0
"""Modules that took at least this long are listed in the time summary."""


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Where ``make test``'s time went: seconds by tier and by module (setup, call, teardown).

    ``--durations`` names single phases; budgeting the run needs the sums, and a session
    fixture's start (the kind cluster, the servers) counts in the module that paid for it.
    """
    by_module: Counter[str] = Counter()
    for reports in terminalreporter.stats.values():
        for report in reports:
            duration = getattr(report, "duration", None)
            nodeid = getattr(report, "nodeid", "")
            if isinstance(duration, float) and nodeid:
                by_module[nodeid.split("::")[0]] += duration
    if not by_module:
        return
    by_tier: Counter[str] = Counter()
    for module, seconds in by_module.items():
        parts = module.split("/")
        by_tier[next((tier for tier in TIERS if tier in parts), "other")] += seconds
    terminalreporter.section("time by tier and module")
    for tier, seconds in by_tier.most_common():
        terminalreporter.write_line(f"Tier time tier={tier} seconds={seconds:.0f}")
    for module, seconds in by_module.most_common():
        if seconds >= MODULE_TIME_SHOWN_S:
            terminalreporter.write_line(f"Module time module={module} seconds={seconds:.0f}")
