"""The payload check's compiled predicate (events.schema_accepts) accepts exactly what its
jsonschema validator accepts (events.payload_check), so taking the predicate's word for a
valid payload refuses the same payloads as before, each with jsonschema's own message:
over generated schemas of the keywords it compiles, over every provider's declared schema,
and with generated payloads, valid and invalid."""

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events.catalog import OperationInfo, Reversibility, SideEffect
from events.payload_check import _Strict, payload_problem
from events.schema_accepts import compile_schema
from services.providers.declared.model import FieldSpec
from services.providers.sandbox_operations import SANDBOX_OPERATIONS
from services.providers.stripe.operations import DECLARED as STRIPE_OPERATIONS

NAMES = ("amount", "sku", "qty", "to", "note")

# Around every bound the providers' schemas and the generated ones name, each side of it.
EDGE_STRINGS = ["", "a", "ab", "abc", "usd", "USD", "eur1", "sku-1", "é" * 3, "\n"] + [
    "a" * n for n in (255, 256, 257, 319, 320, 321)
]
EDGE_NUMBERS = [0, 1, 2, 3, -1, 1_000_000, 1_000_001, 2**53, 2**53 + 1, 0.0, 0.5, 1.0, 1.5, 2.0**53]

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.sampled_from(EDGE_NUMBERS),
    st.integers(min_value=-(2**60), max_value=2**60),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from(EDGE_STRINGS),
    st.text(max_size=6),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.dictionaries(st.sampled_from(NAMES), inner, max_size=5),
    ),
    max_leaves=12,
)

# Small, so that generated strings, lists and numbers fall on both sides of them.
bounds = st.one_of(st.integers(min_value=-1, max_value=4), st.sampled_from([0.5, 1.0, 2**53, -1.5]))
type_names = st.sampled_from(["array", "boolean", "integer", "null", "number", "object", "string"])


def _schema(inner: st.SearchStrategy[Any]) -> st.SearchStrategy[dict[str, Any]]:
    keyword = st.one_of(
        st.tuples(
            st.just("type"), st.one_of(type_names, st.lists(type_names, min_size=1, max_size=3))
        ),
        st.tuples(
            st.just("properties"), st.dictionaries(st.sampled_from(NAMES), inner, max_size=3)
        ),
        st.tuples(st.just("required"), st.lists(st.sampled_from(NAMES), max_size=3)),
        st.tuples(st.just("additionalProperties"), st.one_of(st.booleans(), inner)),
        st.tuples(
            st.sampled_from(
                [
                    "minimum",
                    "maximum",
                    "exclusiveMinimum",
                    "exclusiveMaximum",
                    "minLength",
                    "maxLength",
                    "minItems",
                    "maxItems",
                ]
            ),
            bounds,
        ),
        st.tuples(st.just("pattern"), st.sampled_from(["^[a-z]{3}$", "sku", "^$", "[0-9]", "é"])),
        st.tuples(st.just("items"), st.one_of(st.booleans(), inner)),
        # Not keywords to jsonschema: ignored by both.
        st.tuples(st.sampled_from(["description", "x-note", "title"]), st.text(max_size=3)),
    )
    return st.lists(keyword, max_size=5).map(dict)


schemas: st.SearchStrategy[Any] = st.recursive(
    st.one_of(st.booleans(), st.just({})),
    _schema,
    max_leaves=6,
)


def _agree(schema: Any, payload: Any) -> None:
    validator = _Strict(schema)
    accepts = compile_schema(schema, _Strict.VALIDATORS)
    assert accepts is not None, schema
    assert accepts(payload) is validator.is_valid(payload), (schema, payload)


@settings(max_examples=600, deadline=None)
@given(schemas, values)
def test_the_predicate_accepts_what_jsonschema_accepts(schema: Any, payload: Any) -> None:
    _agree(schema, payload)


def _declared() -> list[dict[str, Any]]:
    fields = {
        "amount": FieldSpec(type="integer", minimum=1, maximum=2**53),
        "note": FieldSpec(type="string", required=False, max_length=16),
        "qty": FieldSpec(type="number", required=False, minimum=0.5),
        "to": FieldSpec(type="boolean", required=False),
        "sku": FieldSpec(type="object", required=False),
    }
    return [
        {
            "type": "object",
            "properties": {name: spec.json_schema() for name, spec in fields.items()},
            "required": sorted(name for name, spec in fields.items() if spec.required),
        }
    ]


PROVIDERS_SCHEMAS = [
    info.payload_schema
    for info in (*SANDBOX_OPERATIONS.values(), *STRIPE_OPERATIONS.values())
    if info.payload_schema is not None
] + _declared()

EDGES: list[Any] = [
    None,
    True,
    False,
    *EDGE_NUMBERS,
    float("nan"),
    float("inf"),
    *EDGE_STRINGS,
    [],
    ["a"],
    {},
    {"a": 1},
]


def _near(schema: dict[str, Any]) -> list[dict[str, Any]]:
    """Payloads one step from a valid one: the smallest valid payload with each field set to
    each edge value in turn, with a field no schema names, and with each required field
    missing."""
    fields = schema.get("properties", {})
    base = {
        name: next(v for v in EDGES if _Strict(fields.get(name, True)).is_valid(v))
        for name in schema.get("required", [])
    }
    near = [base, {**base, "extra": 1}]
    near += [{**base, name: edge} for name in fields for edge in EDGES]
    near += [{k: v for k, v in base.items() if k != name} for name in base]
    return near


@pytest.mark.parametrize("schema", PROVIDERS_SCHEMAS, ids=lambda s: ",".join(s["properties"]))
def test_every_providers_schema_is_compiled_and_refuses_what_jsonschema_refuses(
    schema: dict[str, Any],
) -> None:
    info = OperationInfo("op", SideEffect.WRITE, Reversibility.REVERSIBLE, payload_schema=schema)
    for payload in _near(schema):
        _agree(schema, payload)
        problem = payload_problem(info, payload)
        assert (problem is None) is _Strict(schema).is_valid(payload), (payload, problem)


def test_a_schema_with_a_keyword_it_does_not_compile_is_left_to_jsonschema() -> None:
    schema = {"type": "object", "properties": {"currency": {"enum": ["usd", "eur"]}}}
    assert compile_schema(schema, _Strict.VALIDATORS) is None
    info = OperationInfo("op", SideEffect.WRITE, Reversibility.REVERSIBLE, payload_schema=schema)
    assert payload_problem(info, {"currency": "usd"}) is None
    assert payload_problem(info, {"currency": "gbp"}) == (
        "payload.currency: 'gbp' is not one of ['usd', 'eur']"
    )
