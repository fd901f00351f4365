"""The console's Kafka counts: records in the dead-letter topic, and each consumer group's
lag (records written to its inputs and not yet committed by it; from a partition's start
where it committed nothing).

Read with one consumer of no group (it joins nothing, commits nothing; it only asks the
brokers for offsets), started on the first count and kept for the intake's life, and the
intake's admin client for the topics' partitions and the groups' committed offsets. Every
count is bounded by COUNT_TIMEOUT_S: a broker that does not answer shows as "unknown", never
a page that hangs.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from services.config import Settings
from services.consumer_groups import GROUPS, inputs
from services.kafka_clients import connection

COUNT_TIMEOUT_S = 3.0
# Where Kafka keeps the groups' committed offsets; the broker makes it at the first
# FindCoordinator, and answers no group's coordinator until its partitions have leaders.
OFFSETS_TOPIC = "__consumer_offsets"


@dataclass(frozen=True)
class Partitions:
    known: dict[str, list[int]]  # each topic's partitions, as one Metadata answer listed them

    def of(self, topics: list[str]) -> list[TopicPartition]:
        """Those of `topics` that exist (an intents topic not created yet has none)."""
        return [TopicPartition(t, p) for t in topics for p in self.known.get(t, ())]


class KafkaCounts:
    def __init__(self, settings: Settings, admin: Any) -> None:
        self._settings, self._admin = settings, admin
        self._consumer: AIOKafkaConsumer | None = None
        self._starting = asyncio.Lock()

    async def close(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def counts(self) -> dict[str, int | None]:
        """`dead_letters` and `lag:<group>` for each consumer; None where Kafka did not
        answer in time."""
        found: dict[str, int | None] = {}
        try:
            async with asyncio.timeout(COUNT_TIMEOUT_S):
                consumer = await self._offsets_reader()
                partitions = await self._partitions()
                found["dead_letters"] = await _records(
                    consumer, partitions.of([self._settings.topics.dead_letters])
                )
        except (TimeoutError, KafkaError):
            return {"dead_letters": None, **{f"lag:{name}": None for name in GROUPS}}
        for name in GROUPS:
            try:
                async with asyncio.timeout(COUNT_TIMEOUT_S):
                    found[f"lag:{name}"] = await self._lag(consumer, name, partitions)
            except (TimeoutError, KafkaError):
                found[f"lag:{name}"] = None
        return found

    async def _offsets_reader(self) -> AIOKafkaConsumer:
        async with self._starting:
            if self._consumer is None:
                consumer = AIOKafkaConsumer(
                    **connection(self._settings.kafka_bootstrap, "intake-console"),
                    enable_auto_commit=False,
                    request_timeout_ms=int(COUNT_TIMEOUT_S * 1000),
                )
                await consumer.start()
                self._consumer = consumer
            return self._consumer

    async def _partitions(self) -> Partitions:
        """Every topic's partitions, from one Metadata request. Asked of the admin client:
        the offsets reader subscribes to nothing, so its own metadata knows no topic (its
        `topics()` fetches a copy it does not keep, and `partitions_for_topic` stayed None:
        every count, the dead letters' too, read 0). Every topic, not the ones named: a
        Metadata request naming a missing topic lets a broker with auto-creation on create
        it, with its own defaults."""
        described = await self._admin.describe_topics()
        return Partitions(
            {
                topic["topic"]: sorted(p["partition"] for p in topic["partitions"])
                for topic in described
                if not topic["error_code"]
            }
        )

    async def _lag(self, consumer: AIOKafkaConsumer, name: str, partitions: Partitions) -> int:
        """Records in the group's inputs (consumer_groups.inputs) past what it committed. A
        partition it never committed on counts from its start, where the group's consumers
        begin (auto_offset_reset earliest): a group that has committed nothing is behind by
        all its inputs hold, not by 0."""
        tps = partitions.of(inputs(name, self._settings))
        if not tps:
            return 0
        ends = await consumer.end_offsets(tps)
        starts = await consumer.beginning_offsets(tps)
        if all(ends[tp] == starts[tp] for tp in tps):
            # Nothing to read: no lag, whatever was committed; the coordinator is not asked
            # (a fresh broker has none for its first seconds: the lag read unknown).
            return 0
        committed: dict[TopicPartition, Any] = {}
        if OFFSETS_TOPIC in partitions.known:
            # Else no group has committed on this cluster yet: nothing to ask, and nobody
            # to ask until the broker has made the topic (GroupCoordinatorNotAvailable).
            group = f"{self._settings.group_prefix}{name}"
            committed = await self._admin.list_consumer_group_offsets(group)
        return sum(max(0, ends[tp] - _from(starts[tp], committed.get(tp))) for tp in tps)


def _from(start: int, committed: Any) -> int:
    """Where the group reads a partition from: its committed offset, or the partition's start
    when it committed none or one the log no longer holds (the consumers reset to earliest)."""
    if committed is None or committed.offset < start:
        return start
    return int(committed.offset)


async def _records(consumer: AIOKafkaConsumer, tps: list[TopicPartition]) -> int:
    if not tps:
        return 0
    ends = await consumer.end_offsets(tps)
    starts = await consumer.beginning_offsets(tps)
    return sum(ends[tp] - starts[tp] for tp in tps)
