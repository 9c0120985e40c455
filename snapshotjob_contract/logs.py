"""The log line formats of the operator and the driver, configured the same way in both.

Both programs log in one style: a capitalised message followed by ``key=value`` context
(``Snapshot done snapshotId=7 map=sj-... seconds=0.41``). In the text format that is the line
as written; in the JSON format (:attr:`~snapshotjob_contract.observability.LogFormat.JSON`)
each ``key=value`` also becomes a field of its own, so a log pipeline can filter on
``snapshotId`` or ``namespace`` without parsing messages. The message is kept whole as well:
a value with spaces is only partly captured by its field, never lost.

Pure (the standard library only) so both programs, which share nothing else at run time but
the contract, format lines identically.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import IO, Any

from snapshotjob_contract.observability import LogFormat

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"
"""The text format's line layout."""

RESERVED_FIELDS = ("time", "level", "logger", "message", "event", "exception")
"""Fields every JSON line has (``exception`` only with a traceback); a ``key=value`` of the
message with one of these names is left in the message only."""

_PAIR = re.compile(r"(?:^|\s)([A-Za-z_][A-Za-z0-9_.]*)=(\S*)")


def context_fields(message: str) -> tuple[str, dict[str, str]]:
    """Splits a log message into its event (the words before the first ``key=value``) and
    its ``key=value`` pairs.

    Args:
        message: The formatted message, e.g. ``Patched status namespace=a name=b``.

    Returns:
        The event (``Patched status``) and the pairs (``{"namespace": "a", "name": "b"}``);
        a key given twice keeps its first value.
    """
    first = _PAIR.search(message)
    event = (message[: first.start()] if first else message).strip()
    fields: dict[str, str] = {}
    for key, value in _PAIR.findall(message):
        if key not in RESERVED_FIELDS:
            fields.setdefault(key, value)
    return event, fields


class JsonFormatter(logging.Formatter):
    """Formats a record as one JSON object: time, level, logger, message, event, the
    message's ``key=value`` pairs, and the exception's traceback if there is one."""

    def format(self, record: logging.LogRecord) -> str:
        """Returns the record as one line of JSON."""
        message = record.getMessage()
        event, fields = context_fields(message)
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": message,
            "event": event,
            **fields,
        }
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        elif record.exc_text:
            line["exception"] = record.exc_text
        return json.dumps(line, ensure_ascii=False)


def configure_logging(
    level: str | int, log_format: LogFormat | str, stream: IO[str] | None = None
) -> None:
    """Sets up the root logger of a program: one handler in the given format.

    Args:
        level: The root level, e.g. ``INFO``.
        log_format: ``text`` or ``json``.
        stream: Where lines go; standard error if omitted.
    """
    handler = logging.StreamHandler(stream if stream is not None else sys.stderr)
    if LogFormat(log_format) is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(TEXT_FORMAT))
    logging.basicConfig(level=level, handlers=[handler], force=True)
