"""events.model.Message.model_copy, the decider's one-step copy, gives what pydantic's own
BaseModel.model_copy gives: the same values, the same fields set, a new object whose
dict is not shared, and pydantic's path for a deep copy."""

from typing import Any

import pytest
from pydantic import BaseModel

from events.envelope import GENESIS_HASH
from transactions.state import TransactionState


def _same(a: BaseModel, b: BaseModel) -> None:
    assert type(a) is type(b)
    assert a.__dict__ == b.__dict__
    assert a.model_fields_set == b.model_fields_set
    assert a.__pydantic_extra__ == b.__pydantic_extra__
    assert a.__pydantic_private__ == b.__pydantic_private__
    assert a.model_dump_json() == b.model_dump_json()


@pytest.mark.parametrize(
    "update",
    [None, {}, {"seq": 3, "last_hash": "a" * 64}, {"aborting": True, "plan": ("refund",)}],
)
def test_a_copy_is_pydantics_copy(update: dict[str, Any] | None) -> None:
    state = TransactionState(tenant="acme", tx_id="tx-1", seq=2, last_hash=GENESIS_HASH)
    ours = state.model_copy(update=update)
    _same(ours, BaseModel.model_copy(state, update=update))
    assert ours is not state and ours.__dict__ is not state.__dict__
    assert ours.model_fields_set is not state.model_fields_set
    assert state.seq == 2 and not state.aborting  # the original is untouched


def test_a_deep_copy_takes_pydantics_path() -> None:
    state = TransactionState(tenant="acme", tx_id="tx-1", plan=("refund",))
    _same(state.model_copy(deep=True), BaseModel.model_copy(state, deep=True))
