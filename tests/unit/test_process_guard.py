"""The unit tier's guard (``tests/unit/conftest.py``): a unit test that starts a process fails.

Each case runs as a test of its own in a nested, in-process pytest session (``pytester``)
under a copy of the guard, so the nested failures do not fail this test. Every case is
harmless if the guard let it through: the child is ``true`` or exits at once.
"""

from __future__ import annotations

from pathlib import Path

import pytest

GUARD = Path(__file__).with_name("conftest.py")

CASES = """
import asyncio
import multiprocessing
import os
import subprocess
import sys

import pytest


def _exit_at_once() -> None:
    pass


def test_subprocess_run() -> None:
    subprocess.run(["true"], check=False)


def test_popen_closes_its_pipes_and_fails() -> None:
    subprocess.Popen(["true"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def test_os_system() -> None:
    os.system("true")


def test_os_popen() -> None:
    os.popen("true").close()


def test_os_fork() -> None:
    if os.fork() == 0:
        os._exit(0)


def test_os_posix_spawn() -> None:
    os.posix_spawn("/bin/true", ["true"], dict(os.environ))


def test_asyncio_subprocess() -> None:
    async def start() -> None:
        await asyncio.create_subprocess_exec("true")

    asyncio.run(start())


@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_multiprocessing(method: str) -> None:
    process = multiprocessing.get_context(method).Process(target=_exit_at_once)
    process.start()
    process.join()


def test_a_swallowed_attempt_still_fails() -> None:
    try:
        subprocess.run([sys.executable, "-c", "pass"], check=False)
    except Exception:
        pass


@pytest.fixture(scope="session")
def server() -> str:
    subprocess.run(["true"], check=False)
    return "started"


def test_a_session_fixture_that_starts_one(server: str) -> None:
    pass


def test_pure_logic_passes() -> None:
    assert sorted([3, 1, 2]) == [1, 2, 3]
"""


def test_every_way_to_start_a_process_fails_the_unit_test(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(GUARD.read_text())
    pytester.makepyfile(test_cases=CASES)

    recorder = pytester.inline_run("-p", "no:cacheprovider")

    outcome: dict[str, str] = {}
    message: dict[str, str] = {}
    for report in recorder.getreports("pytest_runtest_logreport"):
        name = report.nodeid.split("::")[-1]
        if report.failed:
            outcome[name] = f"failed in {report.when}"
            message[name] = report.longreprtext
        else:
            outcome.setdefault(name, "passed")
    assert outcome == {
        "test_subprocess_run": "failed in call",
        "test_popen_closes_its_pipes_and_fails": "failed in call",
        "test_os_system": "failed in call",
        "test_os_popen": "failed in call",
        "test_os_fork": "failed in call",
        "test_os_posix_spawn": "failed in call",
        "test_asyncio_subprocess": "failed in call",
        "test_multiprocessing[fork]": "failed in call",
        "test_multiprocessing[spawn]": "failed in call",
        "test_multiprocessing[forkserver]": "failed in call",
        "test_a_swallowed_attempt_still_fails": "failed in call",
        "test_a_session_fixture_that_starts_one": "failed in setup",
        "test_pure_logic_passes": "passed",
    }
    assert message["test_a_swallowed_attempt_still_fails"] == (
        "test_cases.py::test_a_swallowed_attempt_still_fails tried to start a process during "
        "call (Popen._execute_child); unit tests start no process: move it to tests/integration"
    )
    assert "this one called os.fork" in message["test_os_fork"]


def test_the_unit_tests_run_before_every_other_tier(request: pytest.FixtureRequest) -> None:
    """Session fixtures are finalized in the last test's teardown: never a guarded unit test.

    Found by a full run: the kind cluster's teardown runs ``cluster.sh down``, and the guard
    refused it when the session's last test was a unit test. In a run of the unit tier alone
    this holds trivially; in ``make test`` it checks the order ``tests/conftest.py`` sets.
    """
    tiers = [
        "unit" if item.get_closest_marker("unit") else "other" for item in request.session.items
    ]
    assert tiers == sorted(tiers, key=lambda tier: tier != "unit")
