"""The processing guarantee, in a module of its own.

The pipeline, the driver and the sinks' snapshot participant all decide by it; here it
depends on none of them, so the sinks can use it without importing the pipeline that
imports them.
"""

from __future__ import annotations

import enum


class Guarantee(enum.Enum):
    """The processing guarantee (docs/protocol.md, "Processing guarantees").

    EXACTLY_ONCE: transactional sinks publish the output since the last snapshot in the
        snapshot's 2nd phase; a replay after restore re-creates exactly the unpublished output.
    AT_LEAST_ONCE: sinks write every epoch; a replay after restore writes some output again.
    NONE: no snapshots; a restarted job starts from the beginning without state.
    """

    EXACTLY_ONCE = "EXACTLY_ONCE"
    AT_LEAST_ONCE = "AT_LEAST_ONCE"
    NONE = "NONE"
