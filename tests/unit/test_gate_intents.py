"""The gate learns a batch's intents while the projection is asked, so that a transaction's
first call waits for no intent read of its own (services.dispatcher.gatekeeper)."""

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


async def test_a_batch_learns_its_intents_in_one_read_and_the_gate_reads_none_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    reads: list[list[tuple[str, str]]] = []

    async def agents_of(conn: Any, wanted: list[tuple[str, str]]) -> dict[Any, Authority]:
        reads.append(wanted)
        return {("demo", "tx-1"): Authority("agent-1", 3, None)}

    monkeypatch.setattr(store, "agents_of", agents_of)
    gate = Gatekeeper(load_settings(), producer=None)
    gate.pool = _Pool()

    await gate.learn_intents([("demo", "tx-1"), ("demo", "tx-2"), ("demo", "tx-1")])
    assert reads == [[("demo", "tx-1"), ("demo", "tx-2")]]

    assert await gate._intent("demo", "tx-1") == Authority("agent-1", 3, None)
    # No row: no agent can be named (as when the gate reads it itself).
    assert await gate._intent("demo", "tx-2") == Authority("")
    await gate.learn_intents([("demo", "tx-1")])
    assert len(reads) == 1


async def test_an_intent_read_that_fails_is_left_to_the_gate(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def agents_of(conn: Any, wanted: list[tuple[str, str]]) -> dict[Any, Authority]:
        raise OSError("connection refused")

    monkeypatch.setattr(store, "agents_of", agents_of)
    gate = Gatekeeper(load_settings(), producer=None)
    gate.pool = _Pool()

    await gate.learn_intents([("demo", "tx-1")])  # no error: the gate reads again
    assert gate.intents == {}
    with pytest.raises(OSError):
        await gate._intent("demo", "tx-1")
