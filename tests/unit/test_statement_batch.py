"""Requests made in one turn of the event loop are one run; nothing waits for company
(services.dispatcher.statement_batch)."""

import asyncio

import pytest

from services.dispatcher.statement_batch import StatementBatch


class Doubler:
    def __init__(self) -> None:
        self.runs: list[list[int]] = []
        self.fail: Exception | None = None

    async def run(self, asked: list[int]) -> list[int]:
        self.runs.append(asked)
        await asyncio.sleep(0)  # a statement's round trip
        if self.fail is not None:
            raise self.fail
        return [2 * x for x in asked]


async def test_tasks_started_together_ask_in_one_run_and_each_gets_its_own_answer() -> None:
    doubler = Doubler()
    batch = StatementBatch(doubler.run)

    # As the dispatch host starts the calls a partition's transaction committed.
    tasks = [asyncio.create_task(batch.ask(x)) for x in (3, 1, 2)]
    assert await asyncio.gather(*tasks) == [6, 2, 4]
    assert doubler.runs == [[3, 1, 2]]


async def test_a_lone_request_runs_at_once() -> None:
    doubler = Doubler()
    batch = StatementBatch(doubler.run)
    # Answered within a few turns of the loop, not after any timer.
    assert await asyncio.wait_for(batch.ask(5), timeout=0.05) == 10
    assert await batch.ask(6) == 12
    assert doubler.runs == [[5], [6]]


async def test_a_failed_run_fails_every_asker_and_the_next_turn_runs_again() -> None:
    doubler = Doubler()
    doubler.fail = OSError("connection refused")
    batch = StatementBatch(doubler.run)
    failed = await asyncio.gather(batch.ask(1), batch.ask(2), return_exceptions=True)
    assert [type(error) for error in failed] == [OSError, OSError]
    doubler.fail = None
    assert await batch.ask(1) == 2


async def test_an_asker_cancelled_before_the_run_is_left_out_of_it() -> None:
    doubler = Doubler()
    batch = StatementBatch(doubler.run)
    gone = asyncio.create_task(batch.ask(1))
    kept = asyncio.create_task(batch.ask(2))
    await asyncio.sleep(0)  # both asked, the run not started yet
    gone.cancel()
    assert await kept == 4
    with pytest.raises(asyncio.CancelledError):
        await gone
    assert doubler.runs == [[2]]
