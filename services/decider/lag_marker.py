"""The decider group's committed offsets: a lag marker for people and tools, not a position.

The decider's position is on its changelog (services.decider.input_offsets). Lag tools
(`kafka-consumer-groups --describe`, the console's lag, any monitoring that reads a
group's offsets) read the group, so the decider also commits there, outside its
transactions: the offsets of transactions that have committed, at most once per
INTERVAL_S (the loop's next poll, at most 500 ms later, sends what is due), in the
background (the loop never waits for it), and before it lets partitions go (a revocation,
a clean stop), so that after a clean hand-over the group says exactly what the changelog
says. Not at once when idle, as the projector's is: at concurrency 1 the decider is idle
after nearly every transaction, and a commit each time would give back half of the
requests the changelog offsets saved. A crash leaves the marker behind by up to
INTERVAL_S and a poll: lag tools then show a little more lag than there is until the
partition's next owner takes it (it notes the changelog's offsets at once).

Every offset noted here was written on the changelog by a committed transaction, so the
marker is never ahead of the changelog; a failed or refused commit (a rebalance under it)
is only logged.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from services.decider.input_offsets import LAG_MARKER_METADATA

log = logging.getLogger(__name__)

# As the projector's lag marker and the at-least-once consumers' commits: a commit is a
# request and an append to __consumer_offsets, per transaction a large share otherwise.
INTERVAL_S = 1.0
# A commit that does not return (aiokafka retries a coordinator away without end) is given
# up; the next one carries the offsets.
COMMIT_TIMEOUT_S = 10.0
# What a revocation or a stop waits for the final commit: never holds a rebalance long.
HANDOVER_TIMEOUT_S = 5.0


class LagMarker:
    def __init__(self, consumer: AIOKafkaConsumer) -> None:
        self.consumer = consumer
        self.pending: dict[TopicPartition, int] = {}
        self.sent_at = 0.0
        self.task: asyncio.Task[None] | None = None

    def note(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Offsets a committed transaction wrote on the changelog (or a take read there)."""
        self.pending.update(offsets)

    def maybe_send(self) -> None:
        """Sends the pending offsets in the background once the interval since the last
        has passed, unless one is still on its way."""
        if not self.pending or (self.task is not None and not self.task.done()):
            return
        if time.monotonic() - self.sent_at < INTERVAL_S:
            return
        self.task = asyncio.create_task(self._send(None, COMMIT_TIMEOUT_S))

    async def hand_over(self, partitions: set[int] | None = None) -> None:
        """Before partitions are let go (None: all): the last commit, awaited, after the one
        on its way (so that an older one never lands last), then they are forgotten."""
        if self.task is not None and not self.task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self.task), HANDOVER_TIMEOUT_S)
        await self._send(partitions, HANDOVER_TIMEOUT_S)
        for tp in [tp for tp in self.pending if partitions is None or tp.partition in partitions]:
            del self.pending[tp]

    async def _send(self, partitions: set[int] | None, timeout_s: float) -> None:
        owned = self.consumer.assignment()
        offsets = {
            tp: (offset, LAG_MARKER_METADATA)
            for tp, offset in self.pending.items()
            if tp in owned and (partitions is None or tp.partition in partitions)
        }
        for tp in [tp for tp in self.pending if tp not in owned]:
            del self.pending[tp]  # another member's now: it commits its own
        if not offsets:
            return
        self.sent_at = time.monotonic()
        try:
            await asyncio.wait_for(self.consumer.commit(offsets), timeout_s)
        except (KafkaError, TimeoutError) as error:
            # A rebalance under it, a coordinator away. The position is on the changelog:
            # only the lag tools' view waits for the next.
            log.info("decider lag marker not committed (%r)", error)
            return
        except Exception:
            # Whatever else aiokafka raises must not stop the decider or a hand-over for a
            # figure that only tools read.
            log.exception("decider lag marker not committed")
            return
        for tp, (offset, _) in offsets.items():
            if self.pending.get(tp) == offset:
                del self.pending[tp]
