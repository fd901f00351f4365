"""Pure: a step's payload checked against the JSON Schema its provider declared for the
operation (OperationInfo.payload_schema), at the door, naming the field.

What a quota counts and what a provider is sent must be the same value: an `"amount":
"4999999"` that a quota read as 0 while the provider charged it would walk past every
`max_amount`. So a schema's `integer` is a JSON integer only: JSON Schema lets `1.0` pass
as an integer, and a provider may read `1.0` as money while a quota cannot count it.
"""

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cache
from typing import Any

from jsonschema import Draft202012Validator, validators
from jsonschema.exceptions import best_match

from events.catalog import OperationInfo
from events.schema_accepts import Predicate, compile_schema


def _is_integer(_checker: Any, instance: Any) -> bool:
    return isinstance(instance, int) and not isinstance(instance, bool)


_Strict = validators.extend(
    Draft202012Validator,
    type_checker=Draft202012Validator.TYPE_CHECKER.redefine("integer", _is_integer),
)


@dataclass(frozen=True)
class _Compiled:
    validator: Any
    # Accepts exactly what `validator` accepts (events.schema_accepts), or None: the
    # schema uses a keyword it does not compile.
    accepts: Predicate | None


@cache
def _validator(schema_json: str) -> _Compiled:
    validator = _Strict(json.loads(schema_json))
    return _Compiled(validator, compile_schema(validator.schema, _Strict.VALIDATORS))


# The schema objects already compiled, by identity: a catalog's schemas are built once
# (services.providers.registry caches the catalog) and never changed, so the text key
# (a json.dumps of the schema on every call) is computed once per schema object. Bounded,
# in case a caller makes a new schema object per call.
_BY_ID: dict[int, tuple[Mapping[str, Any], _Compiled]] = {}
_BY_ID_MAX = 1024


def _compiled(schema: Mapping[str, Any]) -> _Compiled:
    known = _BY_ID.get(id(schema))
    if known is not None and known[0] is schema:
        return known[1]
    # Keyed by the schema's text: a declared schema is data (a Mapping), not hashable.
    compiled = _validator(json.dumps(schema, sort_keys=True))
    if len(_BY_ID) >= _BY_ID_MAX:
        _BY_ID.clear()
    _BY_ID[id(schema)] = (schema, compiled)  # held, so its id is not reused meanwhile
    return compiled


def schema_problem(schema: Mapping[str, Any]) -> str | None:
    """None when `schema` is a valid JSON Schema (draft 2020-12), else what is wrong: an
    adapter declaring a broken schema is refused at start-up, not at the first request."""
    try:
        Draft202012Validator.check_schema(schema)
    except Exception as error:  # jsonschema.SchemaError; its message names the keyword
        return str(getattr(error, "message", error))
    return None


def payload_problem(info: OperationInfo, payload: dict[str, Any]) -> str | None:
    """None when `payload` fits `info`'s declared schema (or it declares none), else what is
    wrong, field first (`payload.amount: ...`)."""
    if info.payload_schema is None:
        return None
    compiled = _compiled(info.payload_schema)
    if compiled.accepts is not None and compiled.accepts(payload):
        return None
    error = best_match(compiled.validator.iter_errors(payload))
    if error is None:
        return None
    if error.validator == "additionalProperties":
        known = ", ".join(sorted(info.payload_schema.get("properties", {})))
        extra = sorted(set(payload) - set(info.payload_schema.get("properties", {})))
        field = f"payload.{extra[0]}" if extra else "payload"
        return f"{field}: not a field of {info.name} (its fields: {known or 'none'})"
    if error.validator == "required":
        missing = [name for name in error.validator_value if name not in error.instance]
        path = ".".join(str(part) for part in (*error.absolute_path, missing[0]))
        return f"payload.{path}: required"
    path = ".".join(str(part) for part in error.absolute_path)
    return f"payload{'.' + path if path else ''}: {error.message}"
