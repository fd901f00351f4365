"""Pure: a payload schema compiled once into a plain Python predicate that accepts exactly
what the jsonschema validator of events.payload_check accepts, for the keywords the
providers' schemas use; None for a schema with any other keyword (jsonschema alone judges
it then).

Why: jsonschema builds a validator and an error iterator for every subschema it descends
into, which made the door's payload check the largest part of a submission's CPU (issue 24).
The predicate only ever says "valid": a payload it does not accept goes to jsonschema,
which decides and words the refusal, so every error message stays jsonschema's. Each
keyword below repeats the test of jsonschema's own keyword function (jsonschema/_keywords.py,
draft 2020-12) and its type checker, with the intake's strict `integer` (a JSON integer
only); tests/unit/test_schema_accepts.py holds the two equal over generated schemas and
payloads.
"""

import numbers
import re
from collections.abc import Callable, Mapping
from typing import Any

Predicate = Callable[[Any], bool]


def _is_number(value: Any) -> bool:
    return isinstance(value, numbers.Number) and not isinstance(value, bool)


def _is_integer(value: Any) -> bool:
    # events.payload_check's redefinition: 1.0 is not an integer.
    return isinstance(value, int) and not isinstance(value, bool)


TYPES: dict[str, Predicate] = {
    "array": lambda value: isinstance(value, list),
    "boolean": lambda value: isinstance(value, bool),
    "integer": _is_integer,
    "null": lambda value: value is None,
    "number": _is_number,
    "object": lambda value: isinstance(value, dict),
    "string": lambda value: isinstance(value, str),
}


def compile_schema(schema: Any, keywords: Mapping[str, Any]) -> Predicate | None:
    """The predicate of `schema` (a dict or a boolean schema), or None when it uses a
    keyword this module does not compile. `keywords`: the validator's own keyword table
    (its VALIDATORS): a key it does not list is not a keyword to it and is ignored here too,
    as jsonschema ignores it."""
    if schema is True:
        return _always
    if schema is False:
        return _never
    if not isinstance(schema, dict):
        return None
    checks: list[Predicate] = []
    for key, value in schema.items():
        if key not in keywords:
            continue
        make = _KEYWORDS.get(key)
        check = make(value, schema, keywords) if make is not None else None
        if check is None:
            return None
        checks.append(check)
    return _all(checks)


def _always(_value: Any) -> bool:
    return True


def _never(_value: Any) -> bool:
    return False


def _all(checks: list[Predicate]) -> Predicate:
    if not checks:
        return _always
    if len(checks) == 1:
        return checks[0]
    ordered = tuple(checks)

    def check(value: Any) -> bool:
        for one in ordered:
            if not one(value):
                return False
        return True

    return check


def _bound(value: Any) -> bool:
    # A bound jsonschema compares with; anything else is left to jsonschema.
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _type(names: Any, _schema: dict[str, Any], _keywords: Mapping[str, Any]) -> Predicate | None:
    listed = [names] if isinstance(names, str) else names
    if not isinstance(listed, list) or not all(
        isinstance(name, str) and name in TYPES for name in listed
    ):
        return None
    tests = tuple(TYPES[name] for name in listed)
    if len(tests) == 1:
        return tests[0]
    return lambda value: any(test(value) for test in tests)


def _properties(
    properties: Any, _schema: dict[str, Any], keywords: Mapping[str, Any]
) -> Predicate | None:
    if not isinstance(properties, dict):
        return None
    compiled = []
    for name, subschema in properties.items():
        each = compile_schema(subschema, keywords)
        if each is None:
            return None
        if each is not _always:
            compiled.append((name, each))
    named = tuple(compiled)

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for name, one in named:
            if name in value and not one(value[name]):
                return False
        return True

    return check


def _required(
    names: Any, _schema: dict[str, Any], _keywords: Mapping[str, Any]
) -> Predicate | None:
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        return None
    required = tuple(names)
    return lambda value: not isinstance(value, dict) or all(name in value for name in required)


def _additional(aP: Any, schema: dict[str, Any], keywords: Mapping[str, Any]) -> Predicate | None:
    properties = schema.get("properties", {})
    if "patternProperties" in schema or not isinstance(properties, dict):
        return None
    known = frozenset(properties)
    if aP is True:
        return _always
    if aP is False:
        return lambda value: not isinstance(value, dict) or known.issuperset(value)
    if not isinstance(aP, dict):
        return None
    each = compile_schema(aP, keywords)
    if each is None:
        return None
    rest = each

    def check(value: Any) -> bool:
        if not isinstance(value, dict):
            return True
        for name, item in value.items():
            if name not in known and not rest(item):
                return False
        return True

    return check


def _number(test: Callable[[Any, Any], bool]) -> Callable[..., Predicate | None]:
    def make(bound: Any, _schema: dict[str, Any], _keywords: Mapping[str, Any]) -> Predicate | None:
        if not _bound(bound):
            return None
        return lambda value: not _is_number(value) or test(value, bound)

    return make


def _length(of: Predicate, test: Callable[[int, Any], bool]) -> Callable[..., Predicate | None]:
    def make(bound: Any, _schema: dict[str, Any], _keywords: Mapping[str, Any]) -> Predicate | None:
        if not _bound(bound):
            return None
        return lambda value: not of(value) or test(len(value), bound)

    return make


def _pattern(
    pattern: Any, _schema: dict[str, Any], _keywords: Mapping[str, Any]
) -> Predicate | None:
    if not isinstance(pattern, str):
        return None
    try:
        search = re.compile(pattern).search
    except re.error:
        return None
    return lambda value: not isinstance(value, str) or search(value) is not None


def _items(items: Any, schema: dict[str, Any], keywords: Mapping[str, Any]) -> Predicate | None:
    if "prefixItems" in schema:
        return None
    each = compile_schema(items, keywords)
    if each is None:
        return None
    if each is _always:
        return _always
    return lambda value: not isinstance(value, list) or all(each(item) for item in value)


_KEYWORDS: dict[str, Callable[[Any, dict[str, Any], Mapping[str, Any]], Predicate | None]] = {
    "type": _type,
    "properties": _properties,
    "required": _required,
    "additionalProperties": _additional,
    # Written as jsonschema's tests are, negated (NaN passes each, as there).
    "minimum": _number(lambda value, bound: not value < bound),
    "maximum": _number(lambda value, bound: not value > bound),
    "exclusiveMinimum": _number(lambda value, bound: not value <= bound),
    "exclusiveMaximum": _number(lambda value, bound: not value >= bound),
    "minLength": _length(TYPES["string"], lambda size, bound: not size < bound),
    "maxLength": _length(TYPES["string"], lambda size, bound: not size > bound),
    "minItems": _length(TYPES["array"], lambda size, bound: not size < bound),
    "maxItems": _length(TYPES["array"], lambda size, bound: not size > bound),
    "pattern": _pattern,
    "items": _items,
}
