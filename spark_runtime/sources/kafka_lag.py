"""How far a Kafka source is behind its topics, from the offsets its last epoch plan listed.

:meth:`KafkaSource.next_offset <spark_runtime.sources.kafka.KafkaSource.next_offset>` lists
every partition's last stable offset (``READ_COMMITTED``) to plan each epoch. The driver's
records-behind gauge (:mod:`spark_runtime.metrics`) is computed from that list, kept by
:class:`LatestOffsets`, so it costs no request to the brokers of its own: the consumer lag
Kafka's tools show for a group, but for the position the job has read to, whether or not a
snapshot committed it to the group yet.

Like the rows-read counter, it counts offsets: in a topic with a transactional producer the
commit markers and aborted records take offsets too, so there it over-counts a little.
"""

from __future__ import annotations

from collections.abc import Mapping

from spark_runtime.sources.base import Offset

Positions = Mapping[str, Mapping[str, int]]
"""topic -> partition (as a string, as in JSON) -> an offset."""


def records_behind(latest: Positions, offset: Positions) -> int:
    """The offsets between each partition's position and its latest offset, summed.

    Only the partitions the position has count: a partition the job has not entered yet (it
    enters at its earliest offset, which the plan does not list for partitions it knows)
    counts from the next plan on, once it is in the position.

    Args:
        latest: Each partition's last stable offset, as the last plan listed them.
        offset: The source's position: the next offset to read, per partition.
    """
    return sum(
        max(0, latest[topic][part] - position)
        for topic, parts in offset.items()
        for part, position in parts.items()
        if part in latest.get(topic, {})
    )


class LatestOffsets:
    """Keeps the latest offsets a Kafka source's epoch plan listed, and answers
    :meth:`~spark_runtime.sources.base.Source.records_behind` from them.

    A mixin for :class:`~spark_runtime.sources.kafka.KafkaSource`, placed before ``Source``
    in its bases; its ``next_offset`` hands each listing to :meth:`remember_latest`.
    """

    _latest_offsets: Positions | None = None

    def remember_latest(self, latest: Positions) -> None:
        """Keeps the last stable offsets an epoch plan just listed."""
        self._latest_offsets = latest

    def records_behind(self, offset: Offset) -> int | None:
        """Records between ``offset`` and the latest offsets last listed; None before any."""
        if self._latest_offsets is None:
            return None
        return records_behind(self._latest_offsets, offset)
