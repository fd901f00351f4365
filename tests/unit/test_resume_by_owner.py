"""A released hold is resumed only while this process owns its partition: only the owner
knows whether the transaction still waits on the held leg (a person may have failed it
after a crashed resumer began the leg), so a hold whose partition was revoked after its
claim is left to the new owner, which claims it
(services.governance.store.claim_released; the simulator's seed 851, across processes).
Its claim is released at once, so the owner does not wait for it to lapse."""

import asyncio
from collections.abc import Callable

from support.txbuilders import submit

from services.config import load_settings
from services.decider.dispatch_host import DispatchHost
from services.decider.take_over import take_over_orders
from services.dispatcher.dispatch_order import DispatchOrder
from services.governance import store
from transactions.transaction import handle, initial_state


class _Executor:
    def __init__(self, gives_up: bool = False) -> None:
        self.runs: list[tuple[str, str, str, int]] = []
        self.gives_up = gives_up

    async def run(
        self, order: DispatchOrder, mine: Callable[[], bool], awaited: Callable[[], bool]
    ) -> bool:
        self.runs.append(order.leg_key)
        return not self.gives_up  # False: its claim was given up, nothing sent


class _Gate:
    def __init__(self) -> None:
        self.forgotten: list[store.Held] = []
        self.released: list[store.Held] = []

    async def forget(self, held: store.Held) -> None:
        self.forgotten.append(held)

    async def release_claims(self, held: list[store.Held]) -> None:
        self.released.extend(held)


def _held_charge(partition: int) -> store.Held:
    state, _ = handle(initial_state("demo", "tx-1"), submit(["charge"]))
    (order,) = take_over_orders([state], partition)
    dispatch = order.dispatch
    return store.Held(
        "demo", dispatch.op_key, dispatch.attempt, partition, order.envelope.model_dump_json(), "c"
    )


async def _resumed(
    owned: set[int], held: store.Held, gives_up: bool = False
) -> tuple[_Executor, _Gate]:
    host = DispatchHost(load_settings(), lambda: owned, lambda a: None, lambda *k: None)
    executor, gate = _Executor(gives_up), _Gate()
    host.executor = executor  # type: ignore[assignment]
    host.gate = gate  # type: ignore[assignment]
    try:
        async with asyncio.timeout(5):
            await host._resume([held])
    finally:
        await host.producer.stop()  # made, never started: else logged unclosed when collected
    return executor, gate


async def test_a_hold_of_a_partition_revoked_since_its_claim_is_left_to_the_owner() -> None:
    held = _held_charge(partition=0)
    executor, gate = await _resumed(owned={1}, held=held)
    assert executor.runs == [], "resumed by a process that cannot see its transaction"
    assert gate.forgotten == [], "forgotten: the owner would never resume it"
    assert gate.released == [held], "its claim left to lapse: the owner waits 60 s"


async def test_a_hold_of_an_owned_partition_is_resumed() -> None:
    executor, gate = await _resumed(owned={0}, held=_held_charge(partition=0))
    assert len(executor.runs) == 1
    assert len(gate.forgotten) == 1  # its call made, the hold is done
    assert gate.released == []


async def test_a_resumed_hold_whose_claim_gave_up_is_released_not_forgotten() -> None:
    # Revoked while its claim waited for another holder (the executor's `mine`): the new
    # owner resumes it, judged by the state only it knows, so the hold must stay.
    held = _held_charge(partition=0)
    executor, gate = await _resumed(owned={0}, held=held, gives_up=True)
    assert len(executor.runs) == 1
    assert gate.forgotten == [], "forgotten: the owner would never resume it"
    assert gate.released == [held]
