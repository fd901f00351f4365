"""What a second body under an accepted tx_id would change, said in a person's terms, for
the 409 that refuses it (the operations_immutable rule, events.rules)."""

from collections.abc import Sequence
from typing import Any

from events.definition import OperationSpec

# The fields an agent could try to change; the op_key follows from them.
_FIELDS = ("kind", "provider", "operation", "op_key")


def changes(stored: Sequence[dict[str, Any]], new: Sequence[OperationSpec]) -> str:
    before = {op["action"]: op for op in stored}
    after = {spec.action: spec.model_dump(mode="json") for spec in new}
    found: list[str] = []
    for action in [*before, *(a for a in after if a not in before)]:
        old, now = before.get(action), after.get(action)
        if old is None or now is None:
            found.append(f"{action}: {'added' if old is None else 'removed'}")
            continue
        for field in _FIELDS:
            if old.get(field) != now.get(field):
                found.append(f"{action}: {field} {old.get(field)!r} -> {now.get(field)!r}")
        old_payload, new_payload = old.get("payload") or {}, now.get("payload") or {}
        for key in sorted(set(old_payload) | set(new_payload)):
            if old_payload.get(key) != new_payload.get(key):
                found.append(
                    f"{action}: payload.{key} {old_payload.get(key)!r} -> {new_payload.get(key)!r}"
                )
    return "; ".join(found) or "the agent or the notifications differ"
