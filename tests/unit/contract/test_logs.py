"""The log formats both programs share: JSON lines carry the message's key=value context."""

from __future__ import annotations

import io
import json
import logging

import pytest

from snapshotjob_contract.logs import configure_logging, context_fields
from snapshotjob_contract.observability import LogFormat

pytestmark = pytest.mark.unit


def test_the_message_splits_into_its_event_and_context() -> None:
    event, fields = context_fields("Snapshot done snapshotId=7 map=sj-a seconds=0.41")
    assert event == "Snapshot done"
    assert fields == {"snapshotId": "7", "map": "sj-a", "seconds": "0.41"}
    assert context_fields("Starting") == ("Starting", {})
    # Reserved names stay in the message only; a repeated key keeps its first value.
    assert context_fields("Odd level=x a=1 a=2")[1] == {"a": "1"}


@pytest.fixture
def restore_logging() -> object:
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    yield None
    root.handlers[:] = handlers
    root.setLevel(level)


@pytest.mark.usefixtures("restore_logging")
def test_json_lines_have_the_fields_and_the_whole_message() -> None:
    out = io.StringIO()
    configure_logging("INFO", LogFormat.JSON, out)
    log = logging.getLogger("snapshot_operator.test")
    log.info("Patched status namespace=%s name=%s error=%s", "ns", "job", "two words")
    log.debug("Not shown at INFO")
    try:
        raise ValueError("boom")
    except ValueError:
        log.exception("Reconcile failed namespace=%s", "ns")
    first, second = (json.loads(line) for line in out.getvalue().splitlines())
    assert first["level"] == "INFO"
    assert first["logger"] == "snapshot_operator.test"
    assert first["event"] == "Patched status"
    assert first["namespace"] == "ns" and first["name"] == "job"
    assert first["message"] == "Patched status namespace=ns name=job error=two words"
    assert first["time"].endswith("+00:00")
    assert second["level"] == "ERROR"
    assert "ValueError: boom" in second["exception"]


@pytest.mark.usefixtures("restore_logging")
def test_text_lines_are_the_message_as_written() -> None:
    out = io.StringIO()
    configure_logging("INFO", "text", out)
    logging.getLogger("spark_runtime.driver").info("Epoch done epoch=%d", 3)
    assert out.getvalue().rstrip().endswith("INFO spark_runtime.driver Epoch done epoch=3")
