"""The session's test order, which the teardown of session fixtures depends on.

Session fixtures are finalized in the teardown of the session's last test, under that
test's markers: a chart release torn down under an integration test's markers was refused
``kubectl`` (``tests/fixtures/kube.py``), and CI failed after every test had passed. These
checks look at the order of the running session itself, so they see what ``make test``
runs; with one tier selected they check that tier's order.
"""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.unit


def _group(item: pytest.Item) -> int:
    if "unit" in item.path.parts:
        return 0
    return 2 if item.get_closest_marker("cluster") else 1


def test_unit_tests_first_and_cluster_tests_last(request: pytest.FixtureRequest) -> None:
    groups = [_group(item) for item in request.session.items]
    assert groups == sorted(groups), "tests are not in the order unit, others, cluster"


def test_the_last_test_declares_the_binaries_the_cluster_teardown_runs(
    request: pytest.FixtureRequest,
) -> None:
    items = request.session.items
    if any(item.get_closest_marker("cluster") for item in items):
        assert items[-1].get_closest_marker("cluster"), items[-1].nodeid
