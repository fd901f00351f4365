"""The console's Kafka counts: records in the dead-letter topic, and each consumer group's
lag (records written to its inputs and not yet committed by it).

Read with one consumer of no group (it joins nothing, commits nothing; it only asks the
brokers for offsets), started on the first count and kept for the intake's life, and the
intake's admin client for the groups' committed offsets. Every count is bounded by
COUNT_TIMEOUT_S: a broker that does not answer shows as "unknown", never a page that hangs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.errors import KafkaError

from services.config import Settings
from services.consumer_groups import GROUPS
from services.kafka_clients import connection

COUNT_TIMEOUT_S = 3.0


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
                found["dead_letters"] = await _records(consumer, self._settings.topics.dead_letters)
        except (TimeoutError, KafkaError):
            return {"dead_letters": None, **{f"lag:{name}": None for name in GROUPS}}
        for name in GROUPS:
            try:
                async with asyncio.timeout(COUNT_TIMEOUT_S):
                    found[f"lag:{name}"] = await self._lag(consumer, name)
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

    async def _lag(self, consumer: AIOKafkaConsumer, name: str) -> int:
        group = f"{self._settings.group_prefix}{name}"
        committed = await self._admin.list_consumer_group_offsets(group)
        if not committed:
            return 0
        ends = await consumer.end_offsets(list(committed))
        return sum(max(0, ends[tp] - meta.offset) for tp, meta in committed.items())


async def _records(consumer: AIOKafkaConsumer, topic: str) -> int:
    partitions = consumer.partitions_for_topic(topic)
    if partitions is None:
        await consumer.topics()  # first sight of the topic: fetch the cluster's metadata
        partitions = consumer.partitions_for_topic(topic) or set()
    tps = [TopicPartition(topic, p) for p in partitions]
    if not tps:
        return 0
    ends = await consumer.end_offsets(tps)
    starts = await consumer.beginning_offsets(tps)
    return sum(ends[tp] - starts[tp] for tp in tps)
