"""Test configuration shared by every tier.

The real-server fixtures live in :mod:`tests.fixtures` (thin pytest plugins over the
:mod:`testbed` package); they are registered here as plugins so every test module can ask
for ``hazelcast_cluster``, ``postgres``, ``spark``, ``kube_api`` or ``kind_cluster``.
"""

from __future__ import annotations

import pytest
from hypothesis import settings

# Property tests assert outcomes, not speed: on a loaded 2-core CI machine one example may
# take longer than hypothesis's default 200 ms deadline without anything being wrong.
settings.register_profile("snapshotjob", deadline=None)
settings.load_profile("snapshotjob")

pytest_plugins = [
    "tests.fixtures.hazelcast",
    "tests.fixtures.postgres",
    "tests.fixtures.spark",
    "tests.fixtures.kube",
    # pytester runs nested in-process sessions: tests/unit/test_process_guard.py uses it.
    "pytester",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test its tier marker from its folder, so ``-m unit`` selects by folder."""
    for item in items:
        parts = item.path.parts
        for tier in ("unit", "integration", "e2e"):
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
