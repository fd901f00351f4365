"""Offsets a consumer-group member has handled but not yet committed to its group: the one
bookkeeping behind every group commit recon makes (the decider's and the projector's lag
markers, the at-least-once consumers' positions, services.at_least_once).

The rule held here, for all of them: only the partitions the member still owns are
committed, and the pending offsets of a partition it no longer owns are dropped (a commit
naming it raises, and its offsets are the new owner's to commit); an offset committed stops
being pending unless a newer one was noted while the commit was on its way; a commit that
fails leaves what it carried pending and raises. When to commit, and what a failure means,
is each caller's (a lag marker is only a figure for tools, a position is what is read again).
"""

import asyncio
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition


class PendingOffsets:
    def __init__(self, consumer: AIOKafkaConsumer, metadata: str = "") -> None:
        self.consumer = consumer
        # Written with every committed offset ("" is aiokafka's own for a bare offset).
        self.metadata = metadata
        # Next offsets to commit, per partition.
        self.offsets: dict[TopicPartition, int] = {}
        # When the last commit that carried anything was sent (monotonic).
        self.sent_at = 0.0

    def __bool__(self) -> bool:
        return bool(self.offsets)

    def note(self, offsets: Mapping[TopicPartition, int]) -> None:
        self.offsets.update(offsets)

    def due(self, interval_s: float) -> bool:
        """At least `interval_s` since the last commit was sent."""
        return time.monotonic() - self.sent_at >= interval_s

    def forget(self, partitions: set[TopicPartition] | None = None) -> None:
        """Drops the pending offsets of `partitions` (None: all) without committing them."""
        if partitions is None:
            self.offsets.clear()
            return
        for tp in partitions:
            self.offsets.pop(tp, None)

    async def commit(
        self, only: set[TopicPartition] | None = None, timeout_s: float | None = None
    ) -> dict[TopicPartition, int]:
        """Commits the pending offsets of the partitions still owned (of `only`, if given)
        and returns them ({} when there was nothing to send). Raises what the commit raised
        (`TimeoutError` past `timeout_s`), the offsets it carried still pending."""
        owned = self.consumer.assignment()
        offsets = {
            tp: offset
            for tp, offset in self.offsets.items()
            if tp in owned and (only is None or tp in only)
        }
        for tp in [tp for tp in self.offsets if tp not in owned]:
            del self.offsets[tp]
        if not offsets:
            return {}
        self.sent_at = time.monotonic()
        commit = self.consumer.commit(
            {tp: (offset, self.metadata) for tp, offset in offsets.items()}
        )
        await (commit if timeout_s is None else asyncio.wait_for(commit, timeout_s))
        for tp, offset in offsets.items():
            if self.offsets.get(tp) == offset:
                del self.offsets[tp]
        return offsets
