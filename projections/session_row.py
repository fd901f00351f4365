"""A transaction's owner and its count of commands from agent sessions (projections.view.
TxView's `owner` and `session_events`) as columns of its `transactions` row, and back: the
one place that knows how they are stored, and when a row's hold (migration 0014).

They hold when `session_seq`, the seq they were projected at, is the row's `last_seq`: a
row written before they were projected has none, and one a projector of the previous
release moved on (it writes the row without them) has an older one. Either is unknown,
and stays so in the projector's fold until `audit rebuild` writes the row from the log.

Pure: no I/O.
"""

import json
from collections.abc import Mapping
from typing import Any

from projections.table_writes import jsonb_text
from projections.view import TxView
from transactions.ownership import Owner


def session_columns(view: TxView) -> tuple[str | None, int | None, int | None]:
    """`owner`, `session_events` and `session_seq`, in the column order of
    projections.table_writes' `transactions`."""
    if view.session_events is None:
        return None, None, None
    owner = jsonb_text(view.owner.model_dump(mode="json")) if view.owner else None
    return owner, view.session_events, view.last_seq


def session_fields(row: Mapping[str, Any]) -> dict[str, Any]:
    """TxView's `owner` and `session_events` from a row (None: unknown)."""
    if row["session_seq"] is None or row["session_seq"] != row["last_seq"]:
        return {"owner": None, "session_events": None}
    owner = row["owner"]
    if isinstance(owner, str):  # asyncpg's default: jsonb as its text
        owner = json.loads(owner)
    return {
        "owner": Owner.model_validate(owner) if owner is not None else None,
        "session_events": row["session_events"],
    }
