"""projections.table_writes.jsonb_text: the text a jsonb column travels as holds the same
JSON value json.dumps spelled, whatever orjson would write or refuse."""

import json
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from projections.table_writes import jsonb_text

_JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=8), children, max_size=4)
    ),
    max_leaves=20,
)


def _read(text: str) -> Any:
    # A number as Postgres's numeric reads it: its digits and exponent (1e-07 and 1e-7
    # are one numeric; 1.0 and 1 are not).
    return json.loads(text, parse_float=lambda s: Decimal(s).as_tuple())


@given(_JSON)
def test_the_value_read_back_is_json_dumps_value(value: Any) -> None:
    assert _read(jsonb_text(value)) == _read(json.dumps(value))


def test_a_value_json_dumps_refuses_is_refused() -> None:
    # orjson would write a datetime; the column never held one, and does not start to.
    with pytest.raises(TypeError):
        jsonb_text({"at": datetime(2026, 1, 1, tzinfo=UTC)})


def test_an_evidence_trail_a_tuple_is_an_array() -> None:
    trail = ({"event": "a"}, {"event": "b"})
    assert _read(jsonb_text(trail)) == _read(json.dumps(list(trail)))


@pytest.mark.parametrize(
    "value",
    [
        {"big": 2**64},  # beyond orjson's integers
        {"lone": "\ud800"},  # a lone surrogate, which orjson refuses
    ],
)
def test_what_orjson_refuses_or_spells_otherwise_is_json_dumps(value: Any) -> None:
    assert jsonb_text(value) == json.dumps(value)
