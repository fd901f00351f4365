"""The same question asked by many calls at once, answered by one statement.

The dispatches a partition's Kafka transaction committed start together (services.decider.
dispatch_host, `submit`: one task each), and each asks the gate the same two things at the
same moment: the transaction's intent, then the begin (services.dispatcher.calls_begun).
Asked one by one, that is a Postgres statement per call: four per recon transaction at c30
(issue 24). Asked through a `StatementBatch`, the requests made in one turn of the event
loop go in one statement.

No wait is added: the batch runs as soon as every task that was ready in the turn of the
first request has had its go (`loop.call_soon` puts the run behind them), so a lone request
runs at once, and the tasks started together (created in one turn, each running up to its
first real wait) all reach it first. Each asker's answer by services.batch_answers, as the
intake's shared statements'.
"""

import asyncio
from collections.abc import Awaitable, Callable
from typing import Generic, TypeVar

from services.batch_answers import answer_each, cancel_each, fail_each

Asked = TypeVar("Asked")
Answer = TypeVar("Answer")


class StatementBatch(Generic[Asked, Answer]):
    """`await ask(x)` answers `run([..., x, ...])`'s item for x, `run` being called once for
    the requests of one turn, with their answers in the order asked."""

    def __init__(self, run: Callable[[list[Asked]], Awaitable[list[Answer]]]) -> None:
        self._run = run
        self._asked: list[tuple[Asked, asyncio.Future[Answer]]] = []
        self._running: set[asyncio.Task[None]] = set()

    async def ask(self, asked: Asked) -> Answer:
        loop = asyncio.get_running_loop()
        answer: asyncio.Future[Answer] = loop.create_future()
        self._asked.append((asked, answer))
        if len(self._asked) == 1:
            loop.call_soon(self._start)
        return await answer

    def _start(self) -> None:
        asked, self._asked = self._asked, []
        task = asyncio.get_running_loop().create_task(self._answer(asked))
        self._running.add(task)
        task.add_done_callback(self._running.discard)

    async def _answer(self, asked: list[tuple[Asked, asyncio.Future[Answer]]]) -> None:
        # A request whose asker was cancelled before the run is not made (for a begin: no
        # row for a call nobody will make).
        live = [(x, future) for x, future in asked if not future.done()]
        if not live:
            return
        try:
            answer_each(live, await self._run([x for x, _ in live]))
        except asyncio.CancelledError:
            cancel_each(live)
            raise
        except Exception as error:
            # Each asker gets the run's error, as it would have got its own statement's.
            fail_each(live, error)
