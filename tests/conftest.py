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
    "tests.fixtures.netns",
    # pytester runs nested in-process sessions: tests/unit/test_process_guard.py uses it.
    "pytester",
]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Give every test its tier marker from its folder, so ``-m unit`` selects by folder.

    The unit tests run first (the order within each tier is kept). Besides failing fast, this
    keeps the unit tier's process guard (``tests/unit/conftest.py``) off the session's end:
    session fixtures (the kind cluster, the control plane, the servers) are finalized in the
    teardown of the session's last test, and that teardown must be free to stop them.
    """
    for item in items:
        parts = item.path.parts
        for tier in ("unit", "integration", "e2e"):
            if tier in parts:
                item.add_marker(getattr(pytest.mark, tier))
    items.sort(key=lambda item: 0 if "unit" in item.path.parts else 1)
