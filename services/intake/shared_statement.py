"""One statement for the callers that reach it at the same time: while it runs, the callers
that arrive wait and go together in the next. An idle intake sends each at once, a busy one
one statement (and one commit) for many; no wait is added to make a batch. Each caller gets
its own answer once the statement carrying its item has returned, and a statement that fails
fails each caller it carried, as its own statement would have (services.intake.
delivery_batches for the webhooks' two statements, services.intake.intent_claims and
services.intake.produced_marks for a submission's two). Each caller's answer by
services.batch_answers, as the gate's batches.

Except a statement refused for a value it was given (VALUE_ERRORS: text Postgres cannot
store, a NUL or a lone surrogate, a key too large for its index): its callers' items are run
again one statement each, so each caller gets what its own statement gives, and one caller's
value never fails another's request. Without it a webhook whose signed id held a NUL failed
every delivery that shared its statement, whichever provider account or tenant had sent
them (tests/integration/test_shared_statement.py). The statements run here are one
statement each, or idempotent, so running an item again after its batch failed is safe.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import Generic, TypeVar

import asyncpg

from services.batch_answers import answer_each, cancel_each, fail_each

In = TypeVar("In")
Out = TypeVar("Out")

# What Postgres or asyncpg raise for the values of a statement, not for the database: the
# same statement without the offending value would have run.
VALUE_ERRORS: tuple[type[Exception], ...] = (
    asyncpg.DataError,
    asyncpg.ProgramLimitExceededError,
)


class Batched(Generic[In, Out]):
    """`ask` one item of `run`'s, which answers a list of items in one statement in order."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        run: Callable[[asyncpg.Connection, Sequence[In]], Awaitable[Sequence[Out]]],
    ) -> None:
        self._pool = pool
        self._run = run
        self._waiting: list[tuple[In, asyncio.Future[Out]]] = []
        self._runner: asyncio.Task[None] | None = None

    async def ask(self, item: In) -> Out:
        done: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
        self._waiting.append((item, done))
        if self._runner is None or self._runner.done():
            self._runner = asyncio.create_task(self._run_while_waiting())
        return await done

    async def _run_while_waiting(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                # One connection for the statements run back to back: under load the
                # next batch is waiting when one returns, and a pool acquire and release
                # per statement cost more of the intake's CPU than running it (issue 24).
                async with self._pool.acquire() as conn:
                    while True:
                        await self._answer(conn, batch)
                        if not self._waiting:
                            break
                        batch, self._waiting = self._waiting, []
            except asyncio.CancelledError:  # the intake stopping
                cancel_each(batch)
                raise
            except Exception as exc:  # each caller answers for it (a 503 for a database down)
                # The connection went back to the pool (asyncpg closes a broken one); the
                # next batch takes another.
                fail_each(batch, exc)

    async def _answer(
        self, conn: asyncpg.Connection, batch: list[tuple[In, asyncio.Future[Out]]]
    ) -> None:
        try:
            answer_each(batch, await self._run(conn, [item for item, _ in batch]))
        except VALUE_ERRORS as exc:
            if len(batch) == 1:
                fail_each(batch, exc)
            else:
                for one in batch:
                    await self._answer(conn, [one])
