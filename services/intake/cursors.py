"""Opaque, signed page cursors for the list endpoints (services.intake.pagination).

A cursor holds the sort key of the last row of a page (keyset pagination: a page is the
rows after it, so rows arriving meanwhile neither repeat nor shift what follows). It is
HMAC-signed and names the list, the tenant and the filters it was made for, so

- a client cannot craft a position (the format may change between releases: clients hand
  back what they were given and read nothing in it);
- a cursor of one list, one tenant or one set of filters is refused on another (422
  `invalid_cursor`), instead of silently paging through something else.

The key is derived from RECON_OWNER_TOKEN_SECRET, the secret every intake of a deployment
shares already (a cursor made by one intake is followed on another behind the same load
balancer), under a label of its own so that no cursor is ever a valid owner token.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
from typing import Any

from services.intake.errors import ApiError

_LABEL = b"recon page cursor v1"


def cursor_key(secret: str) -> bytes:
    return hmac.new(secret.encode(), _LABEL, hashlib.sha256).digest()


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _bound(key: bytes, body: bytes) -> bytes:
    return hmac.new(key, body, hashlib.sha256).digest()


def make_cursor(
    key: bytes, kind: str, tenant: str, filters: dict[str, Any], position: list[Any]
) -> str:
    """A cursor to the rows after `position` (the last row's sort key, JSON values)."""
    body = json.dumps(
        {"k": kind, "t": tenant, "f": filters, "p": position},
        separators=(",", ":"),
        sort_keys=True,
    ).encode()
    return f"{_b64(body)}.{_b64(_bound(key, body))}"


def read_cursor(
    key: bytes, cursor: str, kind: str, tenant: str, filters: dict[str, Any]
) -> list[Any]:
    """The position a cursor holds; 422 `invalid_cursor` for one that was not made by this
    deployment for this list, tenant and filters."""
    try:
        encoded, _, mac = cursor.partition(".")
        body = _unb64(encoded)
        if not hmac.compare_digest(_unb64(mac), _bound(key, body)):
            raise ValueError("signature")
        held = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        raise _invalid("it is not a cursor this deployment made") from None
    if held.get("k") != kind or held.get("t") != tenant:
        raise _invalid("it was made for another list")
    if held.get("f") != filters:
        raise _invalid("it was made for other filters; keep the filters while paging")
    position: list[Any] = held["p"]
    return position


def _invalid(why: str) -> ApiError:
    return ApiError(
        422,
        "invalid_cursor",
        f"the cursor cannot be used here ({why}): send back the `next_cursor` of the previous "
        "page unchanged, with the same filters, or omit `cursor` to start from the first page",
    )
