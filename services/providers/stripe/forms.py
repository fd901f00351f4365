"""Stripe's request bodies: `application/x-www-form-urlencoded` with nested keys
(`metadata[op_key]=K`, `expand[0]=latest_charge`), as its API and libraries write them.

Deterministic: the same parameters always encode to the same bytes, in sorted key order.
A `replay` lookup resends the first request and Stripe compares it with the first under
the key; a reordering would read as "other parameters" (`idempotency_error`).

Pure: no I/O.
"""

from typing import Any
from urllib.parse import quote


def encode(params: dict[str, Any]) -> str:
    return "&".join(
        f"{quote(name, safe='[]')}={quote(value, safe='')}" for name, value in _flat("", params)
    )


def _flat(prefix: str, value: Any) -> list[tuple[str, str]]:
    if isinstance(value, dict):
        pairs: list[tuple[str, str]] = []
        for key in sorted(value):
            pairs += _flat(f"{prefix}[{key}]" if prefix else str(key), value[key])
        return pairs
    if isinstance(value, list):
        return [pair for i, item in enumerate(value) for pair in _flat(f"{prefix}[{i}]", item)]
    if isinstance(value, bool):
        # Before int: True is an int, and Stripe reads "true", not "1".
        return [(prefix, "true" if value else "false")]
    if value is None:
        # Stripe's way of unsetting a field is an empty value.
        return [(prefix, "")]
    return [(prefix, str(value))]
