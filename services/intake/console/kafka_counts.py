"""The console's Kafka counts: records in the dead-letter topic, and each consumer group's
lag (records written to its inputs and not yet committed by it; from a partition's start
where it committed nothing), as services.intake.group_positions reads them.

Every count is bounded by COUNT_TIMEOUT_S: a broker that does not answer shows as "unknown",
never a page that hangs.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiokafka.errors import KafkaError

from services.config import Settings
from services.consumer_groups import GROUPS
from services.intake.group_positions import REQUEST_TIMEOUT_S, GroupPositions

COUNT_TIMEOUT_S = REQUEST_TIMEOUT_S


class KafkaCounts:
    def __init__(self, settings: Settings, admin: Any) -> None:
        self._settings = settings
        self._positions = GroupPositions(settings, admin, "intake-console")

    async def close(self) -> None:
        await self._positions.close()

    async def counts(self) -> dict[str, int | None]:
        """`dead_letters` and `lag:<group>` for each consumer; None where Kafka did not
        answer in time."""
        found: dict[str, int | None] = {}
        try:
            async with asyncio.timeout(COUNT_TIMEOUT_S):
                partitions = await self._positions.partitions()
                found["dead_letters"] = await self._positions.records(
                    partitions.of([self._settings.topics.dead_letters])
                )
        except (TimeoutError, KafkaError):
            return {"dead_letters": None, **{f"lag:{name}": None for name in GROUPS}}
        for name in GROUPS:
            try:
                async with asyncio.timeout(COUNT_TIMEOUT_S):
                    standings = await self._positions.standings((name,), partitions)
                found[f"lag:{name}"] = sum(s.behind for s in standings[name].values())
            except (TimeoutError, KafkaError):
                found[f"lag:{name}"] = None
        return found
