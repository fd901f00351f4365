"""The gate reads a transaction's intent once, and the intents its calls started together ask
for in one statement, started before their commit (services.dispatcher.gatekeeper,
services.dispatcher.statement_batch)."""

import asyncio
from typing import Any

import pytest

from services.config import load_settings
from services.dispatcher.gatekeeper import Gatekeeper
from services.governance import store
from services.governance.store import Authority


class _Pool:
    def acquire(self) -> "_Pool":
        return self

    async def __aenter__(self) -> object:
        return object()

    async def __aexit__(self, *exc: object) -> None:
        return None


async def test_the_intents_asked_in_one_turn_are_one_read_and_the_gate_reads_none_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[list[tuple[str, str]]] = []

    async def agents_of(conn: Any, wanted: list[tuple[str, str]]) -> dict[Any, Authority]:
        reads.append(wanted)
        return {("demo", "tx-1"): Authority("agent-1", 3, None)}

    monkeypatch.setattr(store, "agents_of", agents_of)
    gate = Gatekeeper(load_settings(), producer=None)
    gate.pool = _Pool()

    # The calls of one commit, started together: two of tx-1, one of tx-2.
    found = await asyncio.gather(
        gate._intent("demo", "tx-1"), gate._intent("demo", "tx-2"), gate._intent("demo", "tx-1")
    )
    assert reads == [[("demo", "tx-1"), ("demo", "tx-2")]]
    # No row: no agent can be named.
    assert list(found) == [
        Authority("agent-1", 3, None),
        Authority(""),
        Authority("agent-1", 3, None),
    ]
    assert await gate._intent("demo", "tx-1") == Authority("agent-1", 3, None)
    assert await gate._intent("demo", "tx-2") == Authority("")
    assert len(reads) == 1


async def test_an_intent_read_that_fails_fails_each_asker_and_is_read_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    failing = True

    async def agents_of(conn: Any, wanted: list[tuple[str, str]]) -> dict[Any, Authority]:
        if failing:
            raise OSError("connection refused")
        return {("demo", "tx-1"): Authority("agent-1")}

    monkeypatch.setattr(store, "agents_of", agents_of)
    gate = Gatekeeper(load_settings(), producer=None)
    gate.pool = _Pool()

    failed = await asyncio.gather(
        gate._intent("demo", "tx-1"), gate._intent("demo", "tx-1"), return_exceptions=True
    )
    assert [type(error) for error in failed] == [OSError, OSError]
    assert gate.intents == {}
    # A read started before the commit (learn_intents) that fails is forgotten likewise.
    gate.learn_intents([("demo", "tx-1")])
    for _ in range(5):
        await asyncio.sleep(0)
    assert gate.intents == {} and gate._reading == {}
    failing = False
    assert await gate._intent("demo", "tx-1") == Authority("agent-1")


async def test_intents_learnt_before_a_commit_are_read_before_any_call_asks_and_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[list[tuple[str, str]]] = []
    answer = asyncio.Event()

    async def agents_of(conn: Any, wanted: list[tuple[str, str]]) -> dict[Any, Authority]:
        reads.append(wanted)
        await answer.wait()  # Postgres answering while the Kafka transaction is on the wire
        return {("demo", "tx-1"): Authority("agent-1")}

    monkeypatch.setattr(store, "agents_of", agents_of)
    gate = Gatekeeper(load_settings(), producer=None)
    gate.pool = _Pool()

    gate.learn_intents([("demo", "tx-1"), ("demo", "tx-1")])
    for _ in range(3):
        await asyncio.sleep(0)
    assert reads == [[("demo", "tx-1")]]  # asked before any call did
    # The commit's call asks while the read is in flight: it waits for that read.
    asking = asyncio.ensure_future(gate._intent("demo", "tx-1"))
    await asyncio.sleep(0)
    answer.set()
    assert await asking == Authority("agent-1")
    gate.learn_intents([("demo", "tx-1")])  # known: nothing read
    assert await gate._intent("demo", "tx-1") == Authority("agent-1")
    assert len(reads) == 1
