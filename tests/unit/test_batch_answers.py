"""What each caller of a batched statement gets (services.batch_answers), for both batchers:
its own answer in order, none when the run answered another number of items (the intake's
shared statement answered the first ones and failed the rest; the gate's batch failed all,
kept), the run's error, and a caller gone meanwhile passed over."""

import asyncio
import contextlib
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest

from services.batch_answers import answer_each, fail_each
from services.intake.shared_statement import Batched


def _waiting(*items: int) -> list[tuple[int, asyncio.Future[int]]]:
    loop = asyncio.get_running_loop()
    return [(item, loop.create_future()) for item in items]


async def test_each_caller_gets_its_own_answer_and_one_gone_is_passed_over() -> None:
    waiting = _waiting(1, 2, 3)
    waiting[1][1].cancel()  # its client went away
    answer_each(waiting, [10, 20, 30])
    assert [f.result() for _, f in (waiting[0], waiting[2])] == [10, 30]


async def test_a_run_that_answered_another_number_of_items_answers_none() -> None:
    waiting = _waiting(1, 2)
    with pytest.raises(AssertionError):
        answer_each(waiting, [10])
    assert not any(f.done() for _, f in waiting)
    fail_each(waiting, RuntimeError("short"))
    assert all(isinstance(f.exception(), RuntimeError) for _, f in waiting)


class _Pool:
    @contextlib.asynccontextmanager
    async def acquire(self) -> AsyncIterator[None]:
        yield None


async def test_the_shared_statement_fails_every_caller_of_a_short_answer() -> None:
    async def short(_: Any, items: Sequence[int]) -> list[int]:
        return [2 * item for item in items][:-1]

    shared: Batched[int, int] = Batched(_Pool(), short)
    asked = [asyncio.create_task(shared.ask(x)) for x in (1, 2)]
    failed = await asyncio.gather(*asked, return_exceptions=True)
    assert [type(error) for error in failed] == [AssertionError, AssertionError]
