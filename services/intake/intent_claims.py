"""A submission's first statement (services.intake.intents.record_new: a new tx_id's row
and keys), shared by the submissions that reach it at the same time (services.intake.
shared_statement; issue 24), as the produced marks share the second.

At concurrency 30 it was the intake's only statement run once per submission: a statement,
a commit and a pool acquire each. The Postgres backends serving the intake spent 1.12 ms
of CPU per transaction for 0.52 ms of their statements' execution, ~0.2 ms per statement
beyond it (docs/benchmark.md). Shared, it runs ~0.36 times per transaction. The answers
stay each submission's own:

- A tx_id asked twice in one batch (a client retrying while its first attempt is still
  being recorded) goes in once; the other asks are answered "taken", and `claim` judges
  them against the row, as it judges any racing submission.
- A statement that fails on a value (one body holds text Postgres cannot store, a NUL,
  answered 422) leaves each submission it carried to a statement of its own, so one
  client's body never fails another's submission (the shared statement's rule).
"""

from collections.abc import Sequence

import asyncpg

from events.definition import OperationSpec
from services.intake import intents
from services.intake.intents import Intent, PolicyMoved, Recorded
from services.intake.shared_statement import Batched


class IntentClaims:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool
        self._new: Batched[Intent, Recorded] = Batched(pool, self._record)

    async def claim(self, intent: Intent, horizon_s: float) -> tuple[OperationSpec, ...]:
        """intents.claim's answer for `intent`: its tx_id taken for it (the operations to
        produce), or the 409, or PolicyMoved, recording nothing."""
        if not intent.names_natural_keys():
            recorded = await self._new.ask(intent)
            if recorded is Recorded.POLICY_MOVED:
                raise PolicyMoved
            if recorded is Recorded.NEW:
                return intent.operations
        async with self._pool.acquire() as conn:
            return await intents.claim(conn, intent, horizon_s)

    async def _record(self, conn: asyncpg.Connection, asked: Sequence[Intent]) -> list[Recorded]:
        first: dict[tuple[str, str], int] = {}
        for at, intent in enumerate(asked):
            first.setdefault((intent.tenant, intent.tx_id), at)
        recorded = iter(await intents.record_new(conn, [asked[at] for at in first.values()]))
        return [
            next(recorded) if first[(intent.tenant, intent.tx_id)] == at else Recorded.TAKEN
            for at, intent in enumerate(asked)
        ]
