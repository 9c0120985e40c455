"""Reads the snapshot store's health: one member's ``/hazelcast/health`` document.

The decision gates every start on the store being cluster-safe, so the operator reads the
health right before deciding, never from a cache: a member lost a second ago must hold back
the next execution. Members are asked in turn and the first answer counts; every member
reports the cluster's view (size, safety), and ``observe`` treats a member that is not ACTIVE
as not safe. No answer at all is reported as None, which the decision reads as
"StoreUnreachable".
"""

from __future__ import annotations

import json
import logging
import urllib.error
import urllib.request
from collections.abc import Sequence
from typing import Any

log = logging.getLogger(__name__)

HEALTH_PATH = "/hazelcast/health"


def _read(member: str, timeout: float) -> dict[str, Any] | None:
    url = f"http://{member}{HEALTH_PATH}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            document = json.loads(response.read().decode())
    except (OSError, urllib.error.URLError, ValueError) as error:
        log.debug("Store member did not answer member=%s error=%s", member, error)
        return None
    return document if isinstance(document, dict) else None


def read_health(members: Sequence[str], timeout: float) -> dict[str, Any] | None:
    """Returns the health document of the first member that answers, or None.

    Blocking: the handlers call it from a worker thread, together with the API reads.

    Args:
        members: ``host:port`` of the members (the health endpoint shares the member port).
        timeout: Seconds one member may take.
    """
    for member in members:
        document = _read(member, timeout)
        if document is not None:
            return document
    if members:
        log.warning("No store member answered members=%s", ",".join(members))
    return None
