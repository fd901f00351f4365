"""A submission's second statement (services.intake.intents.mark_produced: its row is a
promise once Kafka has acknowledged its command), shared by the submissions acknowledged at
the same time (services.intake.shared_statement; issue 24).

Kafka acknowledges the records of one produce request together, so under load many
submissions reach this statement at once: one statement (and one commit) marks them all.
A submission answers 202 only once the statement carrying its own row has returned.
"""

from collections.abc import Sequence

import asyncpg

from services.intake import intents
from services.intake.intents import Intent
from services.intake.shared_statement import Batched


class ProducedMarks:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._marks: Batched[Intent, None] = Batched(pool, self._mark)

    async def mark(self, intent: Intent) -> None:
        """Once this returns, `intent`'s row is marked produced (if it still holds its
        body); the statement's error otherwise."""
        await self._marks.ask(intent)

    async def _mark(self, conn: asyncpg.Connection, produced: Sequence[Intent]) -> list[None]:
        await intents.mark_all_produced(conn, produced)
        return [None] * len(produced)
