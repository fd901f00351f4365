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
from collections.abc import Mapping

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from services.decider.input_offsets import LAG_MARKER_METADATA
from services.pending_offsets import PendingOffsets

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
        self.pending = PendingOffsets(consumer, LAG_MARKER_METADATA)
        self.task: asyncio.Task[None] | None = None

    def note(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Offsets a committed transaction wrote on the changelog (or a take read there)."""
        self.pending.note(offsets)

    def maybe_send(self) -> None:
        """Sends the pending offsets in the background once the interval since the last
        has passed, unless one is still on its way."""
        if not self.pending or (self.task is not None and not self.task.done()):
            return
        if not self.pending.due(INTERVAL_S):
            return
        self.task = asyncio.create_task(self._send(None, COMMIT_TIMEOUT_S))

    async def hand_over(self, partitions: set[int] | None = None) -> None:
        """Before partitions are let go (None: all): the last commit, awaited, after the one
        on its way (so that an older one never lands last), then they are forgotten."""
        if self.task is not None and not self.task.done():
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self.task), HANDOVER_TIMEOUT_S)
        await self._send(partitions, HANDOVER_TIMEOUT_S)
        self.pending.forget(self._of(partitions))

    def _of(self, partitions: set[int] | None) -> set[TopicPartition] | None:
        # The decider's partitions are numbers: one number names a partition of each input.
        if partitions is None:
            return None
        return {tp for tp in self.pending.offsets if tp.partition in partitions}

    async def _send(self, partitions: set[int] | None, timeout_s: float) -> None:
        try:
            await self.pending.commit(self._of(partitions), timeout_s)
        except (KafkaError, TimeoutError) as error:
            # A rebalance under it, a coordinator away. The position is on the changelog:
            # only the lag tools' view waits for the next.
            log.info("decider lag marker not committed (%r)", error)
        except Exception:
            # Whatever else aiokafka raises must not stop the decider or a hand-over for a
            # figure that only tools read.
            log.exception("decider lag marker not committed")
