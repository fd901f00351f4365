"""The HTTP request of one apply, built from the provider file: the method, the path with
every payload value one percent-escaped segment (services.providers.paths), the body
mapping, and where the op key travels (the idempotency key: a header or a body field;
recon's reference: a body field). Pure: no I/O."""

import re
from dataclasses import dataclass
from typing import Any

from services.providers.declared import fields
from services.providers.declared.model import KEY, Operation, ProviderFile
from services.providers.paths import UnsafeSegment, segment

_PLACEHOLDER = re.compile(r"\{([^{}]*)\}")


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: dict[str, Any] | None
    headers: dict[str, str]


def source(value: str, payload: Any, op_key: str) -> Any:
    """What a declared source carries: the op key, or the payload's value (MISSING)."""
    return op_key if value == KEY else fields.get(payload, value)


def fill(template: str, payload: Any, op_key: str) -> str:
    """`template` with each `{pointer}` replaced by one escaped path segment; UnsafeSegment
    when a value is missing or cannot name one resource (nothing is sent)."""

    def one(match: re.Match[str]) -> str:
        value = source(match.group(1), payload, op_key)
        if value is fields.MISSING or isinstance(value, dict | list | bool) or value is None:
            raise UnsafeSegment(f"the path needs {match.group(1)} as a string or a number")
        return segment(str(value))

    return _PLACEHOLDER.sub(one, template)


def build(declared: ProviderFile, op: Operation, op_key: str, payload: dict[str, Any]) -> Request:
    path = fill(op.path, payload, op_key)
    body: dict[str, Any] = {}
    if op.body is None:
        body = dict(payload)
    else:
        for target, what in op.body.items():
            value = source(what, payload, op_key)
            if value is not fields.MISSING:  # an optional field the payload left out
                fields.put(body, target, value)
    if declared.reference is not None:
        fields.put(body, declared.reference, op_key)
    headers: dict[str, str] = {}
    key = declared.idempotency
    if key.header is not None:
        headers[key.header] = op_key
    else:
        assert key.body is not None  # the model requires one of the two
        fields.put(body, key.body, op_key)
    return Request(op.method, path, None if op.method == "GET" else body, headers)
