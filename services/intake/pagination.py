"""Pages of the list endpoints: `limit`, `cursor` in; the rows and `next_cursor` out.

Every list is read by keyset (the rows after the last one shown, in the list's own order),
one row more than the page to know whether another page follows. `next_cursor` is null on
the last page. The cursors are services.intake.cursors'.

The lists that were unbounded before pages existed (`/v1/reviews`, `/v1/drift`, a
transaction's events) answer up to 1000 rows by default, so a client that never reads
`next_cursor` still gets everything it got before unless a list grew past that.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, Any, TypeVar

from fastapi import Query, Request

from services.intake.cursors import cursor_key, make_cursor, read_cursor

MAX_LIMIT = 1000
ROW = TypeVar("ROW")

Limit = Annotated[int | None, Query(ge=1, le=MAX_LIMIT, description="rows per page")]
Cursor = Annotated[
    str | None,
    Query(
        max_length=2048,
        description="the `next_cursor` of the previous page, unchanged (same filters)",
    ),
]


@dataclass(frozen=True)
class Pager:
    """One list's paging, for one tenant (None: the deployment admin's view) and filters."""

    key: bytes
    kind: str
    tenant: str | None
    filters: dict[str, Any]
    limit: int
    cursor: str | None

    def after(self) -> list[Any] | None:
        """The position to read after, from the request's cursor; None on the first page."""
        if self.cursor is None:
            return None
        return read_cursor(self.key, self.cursor, self.kind, self._owner, self.filters)

    def page(
        self, rows: Sequence[ROW], position_of: Callable[[ROW], list[Any]]
    ) -> tuple[list[ROW], str | None]:
        """The page of `rows` (read with `limit + 1`) and the cursor to the next one."""
        shown = list(rows[: self.limit])
        if len(rows) <= self.limit:
            return shown, None
        position = position_of(shown[-1])
        return shown, make_cursor(self.key, self.kind, self._owner, self.filters, position)

    @property
    def _owner(self) -> str:
        # A tenant can never be called this (tenants are names from the key settings).
        return self.tenant if self.tenant is not None else "*admin*"


def pager(
    request: Request,
    kind: str,
    tenant: str | None,
    filters: dict[str, Any],
    limit: int | None,
    cursor: str | None,
    *,
    default: int,
) -> Pager:
    secret: str = request.app.state.settings.owner_token_secret
    return Pager(
        cursor_key(secret),
        kind,
        tenant,
        {k: v for k, v in filters.items() if v is not None},
        limit or default,
        cursor,
    )


def instant(text: Any) -> datetime:
    """A timestamp held in a cursor's position (written with `isoformat`, read exactly)."""
    if not isinstance(text, str):
        raise ValueError("not a timestamp")
    return datetime.fromisoformat(text)
