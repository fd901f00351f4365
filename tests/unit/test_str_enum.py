"""events.str_enum.StrEnum reads `value` in C and events.model's exclude predicates are C
calls: both must leave every serialized byte as enum.StrEnum and the lambdas they replaced
did, since the bytes are hashed into the chain and written to the log."""

import enum
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

import events.catalog
import events.definition
import events.drift
import events.inputs
import events.intent_identity
import events.legs
import events.verdict
import reconcilers.signatures
import services.governance.gate
import services.providers.lookup_strategy
import transactions.approvals
from events.inputs import parse_input
from events.model import absent, falsy
from events.str_enum import StrEnum
from services.devtools.synthetic_log import transaction_records
from transactions.finished import keep
from transactions.transaction import handle, initial_state

MODULES = (
    events.catalog,
    events.definition,
    events.drift,
    events.inputs,
    events.intent_identity,
    events.legs,
    events.verdict,
    reconcilers.signatures,
    services.governance.gate,
    services.providers.lookup_strategy,
    transactions.approvals,
)
T0 = datetime(2026, 12, 3, tzinfo=UTC)


def _enums() -> list[type[enum.StrEnum]]:
    found = [
        value
        for module in MODULES
        for value in vars(module).values()
        if isinstance(value, type) and issubclass(value, enum.StrEnum) and value.__members__
    ]
    return list(dict.fromkeys(found))


def test_recon_enums_read_their_value_as_enum_does() -> None:
    enums = _enums()
    assert len(enums) >= 15
    for kind in enums:
        assert issubclass(kind, StrEnum), f"{kind.__qualname__} is not an events.str_enum.StrEnum"
        for member in kind:
            reference = enum.Enum.__dict__["value"].__get__(member, kind)
            assert member.value == reference and type(member.value) is type(reference)
            assert kind(reference) is member


def _written() -> Iterator[Any]:
    """What the decider writes of README transactions: every envelope and kept state."""
    for index in range(40):
        records = transaction_records(index, T0, webhook_every=1)
        inputs = [r for r in records if r.role in ("commands", "observations")]
        state = None
        for record in inputs:
            message = parse_input(record.value)
            state = state or initial_state("demo", message.tx_id)
            state, envelopes = handle(state, message)
            yield from envelopes
            yield keep(state)


def test_serialized_bytes_are_those_of_enum_value(monkeypatch: pytest.MonkeyPatch) -> None:
    fast = [(m.model_dump_json(), m.model_dump(mode="json")) for m in _written()]
    # Without the C property every member's value is read through enum.Enum.value again.
    monkeypatch.delattr(StrEnum, "value")
    reference = [(m.model_dump_json(), m.model_dump(mode="json")) for m in _written()]
    assert len(fast) > 400
    assert fast == reference


@pytest.mark.parametrize("value", [None, 0, "", False, [], {}, "x", 1, True, ["x"]])
def test_exclude_predicates_are_the_lambdas_they_replaced(value: object) -> None:
    assert absent(value) is (value is None)
    assert falsy(value) is (not value)
