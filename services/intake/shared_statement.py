"""One statement for the callers that reach it at the same time: while it runs, the callers
that arrive wait and go together in the next. An idle intake sends each at once, a busy one
one statement (and one commit) for many; no wait is added to make a batch. A caller that
finds nothing running runs the statement in its own task (with those who ask in the same
turn of the loop), and a runner task takes over only when callers wait for the next. Each
caller gets its own answer once the statement carrying its item has returned, and a
statement that fails fails each caller it carried, as its own statement would have
(services.intake.delivery_batches for the webhooks' two statements, services.intake.
intent_claims and services.intake.produced_marks for a submission's two). Each caller's
answer by services.batch_answers, as the gate's batches.
"""

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Generic, TypeVar

import asyncpg

from services.batch_answers import Waiting, answer_after_own, answer_each, cancel_each, fail_each

In = TypeVar("In")
Out = TypeVar("Out")


class Batched(Generic[In, Out]):
    """`ask` one item of `run`'s, which answers a list of items in one statement in order."""

    def __init__(
        self,
        pool: asyncpg.Pool,
        run: Callable[[asyncpg.Connection, Sequence[In]], Awaitable[Sequence[Out]]],
    ) -> None:
        self._pool = pool
        self._run = run
        self._waiting: Waiting[In, Out] = []
        # From a statement's start until no caller waits for the next: who arrives meanwhile
        # waits, and the runner (or the caller that found it idle) runs what waits.
        self._busy = False
        self._runner: asyncio.Task[None] | None = None

    async def ask(self, item: In) -> Out:
        if self._busy:
            done: asyncio.Future[Out] = asyncio.get_running_loop().create_future()
            self._waiting.append((item, done))
            return await done
        # Nothing runs: the caller runs the statement in its own task, without the runner
        # task and the future of its own that a batch's caller takes (at low load every
        # statement is one caller's; issue 24). It yields once first, so the callers that
        # ask in this same turn of the loop go in it too, as they went in a runner's first
        # batch. Who arrives while it runs waits for the runner, which takes over the
        # connection.
        self._busy = True
        batch: Waiting[In, Out] = []
        taken = self._pool.acquire()
        try:
            await asyncio.sleep(0)
            batch, self._waiting = self._waiting, []
            conn = await taken.__aenter__()
        except BaseException as exc:
            _failed(batch, exc)
            self._hand_on(None)
            raise
        try:
            answers = await self._run(conn, [item, *(other for other, _ in batch)])
        except BaseException as exc:
            # The connection goes back to the pool (asyncpg closes a broken one); what
            # waits runs on another, as after a runner's failed batch.
            _failed(batch, exc)
            try:
                await taken.__aexit__(None, None, None)
            finally:
                self._hand_on(None)
            raise
        if self._waiting:
            self._hand_on(_Held(taken, conn))
        else:
            try:
                await taken.__aexit__(None, None, None)
            finally:
                # Who came while the connection went back goes together in the next, as
                # after a runner's last batch.
                self._hand_on(None)
        # Answered only now, with the connection given back, so that this caller goes on
        # together with the callers its statement carried: answered before its release,
        # they went on ahead, produced without it, and its next statement (a mark, a
        # delivery's record) ran alone: +0.1-0.4 statements per transaction at c30.
        try:
            return answer_after_own(batch, answers)
        except AssertionError as exc:  # another number of answers: wrong for every caller
            fail_each(batch, exc)
            raise

    def _hand_on(self, taken: "_Held | None") -> None:
        """The runner for the callers that arrived while a caller's own statement ran, on
        its connection if it is `taken` (the runner then gives it back)."""
        if self._waiting:
            self._runner = asyncio.create_task(self._run_while_waiting(taken))
        else:
            self._busy = False

    async def _run_while_waiting(self, taken: "_Held | None") -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                # One connection for the statements run back to back: under load the
                # next batch is waiting when one returns, and a pool acquire and release
                # per statement cost more of the intake's CPU than running it (issue 24).
                async with taken or self._pool.acquire() as conn:
                    taken = None
                    while True:
                        answer_each(batch, await self._run(conn, [item for item, _ in batch]))
                        if not self._waiting:
                            break
                        batch, self._waiting = self._waiting, []
            except asyncio.CancelledError:  # the intake stopping
                cancel_each(batch)
                self._busy = False
                raise
            except Exception as exc:  # each caller answers for it (a 503 for a database down)
                # The connection went back to the pool (asyncpg closes a broken one); the
                # next batch takes another.
                fail_each(batch, exc)
        self._busy = False


def _failed(batch: "Waiting[In, Out]", exc: BaseException) -> None:
    """The callers a caller's own statement carried share its end: the intake stopping (a
    cancellation) or the statement's error."""
    if isinstance(exc, asyncio.CancelledError):
        cancel_each(batch)
    else:
        fail_each(batch, exc)


class _Held:
    """A connection a caller took from the pool, handed to the runner: entering gives the
    connection, leaving gives it back to the pool."""

    def __init__(
        self, taken: AbstractAsyncContextManager[asyncpg.Connection], conn: asyncpg.Connection
    ) -> None:
        self._taken = taken
        self._conn = conn

    async def __aenter__(self) -> asyncpg.Connection:
        return self._conn

    async def __aexit__(self, *_: object) -> None:
        await self._taken.__aexit__(None, None, None)
