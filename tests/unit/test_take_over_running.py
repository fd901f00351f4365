"""A take-over that finds a leg's call still running in this process (DispatchHost.take_over
after a failed transaction) never makes it twice at once, and makes it again once it ends:
the answers it gave before the failure may have been lost with the aborted transaction,
and its later ones may move nothing (the simulator's seed 114: a lookup-first call's
"unavailable" lost, then "absent", and the leg left `dispatched`, never begun, which the
reconciler leaves to the caller)."""

import asyncio
from collections.abc import Callable

from support.txbuilders import submit

from services.config import load_settings
from services.decider.dispatch_host import DispatchHost
from services.dispatcher.dispatch_order import DispatchOrder
from transactions.state import TransactionState
from transactions.transaction import handle, initial_state


class _Executor:
    """Each run waits until released, so the test decides when a call ends."""

    def __init__(self) -> None:
        self.runs: list[tuple[str, str, str, int]] = []
        self.release = asyncio.Event()
        self.running = 0
        self.most_at_once = 0

    async def run(
        self, order: DispatchOrder, mine: Callable[[], bool], awaited: Callable[[], bool]
    ) -> bool:
        self.runs.append(order.leg_key)
        self.running += 1
        self.most_at_once = max(self.most_at_once, self.running)
        try:
            await self.release.wait()
        finally:
            self.running -= 1
        return True


def _dispatched() -> TransactionState:
    state, _ = handle(initial_state("demo", "tx-1"), submit(["charge"]))
    return state


async def _host() -> tuple[DispatchHost, _Executor]:
    host = DispatchHost(load_settings(), lambda: {0}, lambda a: None, lambda *k: None)
    executor = _Executor()
    host.executor = executor  # type: ignore[assignment]

    async def nothing_held(partition: int) -> set[tuple[str, str, int]]:
        return set()

    host._held = nothing_held  # type: ignore[method-assign]
    return host, executor


async def _settled(host: DispatchHost) -> None:
    async with asyncio.timeout(5):
        while host.tasks:
            await asyncio.sleep(0.01)


async def test_a_call_running_at_a_take_over_is_made_again_once_it_ends() -> None:
    host, executor = await _host()
    state = _dispatched()
    host.take_over(0, {("demo", "tx-1"): state})  # the partition's first take: one call
    async with asyncio.timeout(5):
        while not executor.runs:
            await asyncio.sleep(0.01)

    host.take_over(0, {("demo", "tx-1"): state})  # a failed transaction: taken again
    await asyncio.sleep(0.05)
    assert len(executor.runs) == 1, "made twice at once"

    executor.release.set()  # the first call ends: the leg is still unanswered
    await _settled(host)
    assert len(executor.runs) == 2
    assert executor.runs[0] == executor.runs[1]
    assert executor.most_at_once == 1
    await host.producer.stop()  # made, never started: else logged unclosed when collected


async def test_a_call_that_ends_before_a_take_over_is_made_again_once() -> None:
    host, executor = await _host()
    executor.release.set()
    state = _dispatched()
    host.take_over(0, {("demo", "tx-1"): state})
    await _settled(host)
    host.take_over(0, {("demo", "tx-1"): state})
    await _settled(host)
    assert len(executor.runs) == 2  # once per take, nothing left over to run a third time
    await host.producer.stop()
