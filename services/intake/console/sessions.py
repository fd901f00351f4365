"""Console sessions, in Postgres: what a login with an operator key leaves behind.

The browser holds only a random session token in an HttpOnly, SameSite=Strict cookie; the
operator key is never stored (not in the cookie, not in a URL, not in local storage, not
here). The table keeps the token's sha256, so a read of the database yields no usable
cookie, with the tenant and the person the key named at login and the session's CSRF token.
A session lasts SESSION_TTL_S, and logging out deletes it; expired rows are deleted at
each login, so the table stays as small as the set of people logged in.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass

import asyncpg

SESSION_TTL_S = 8 * 3600  # one working shift


@dataclass(frozen=True)
class ConsoleUser:
    """The person logged in, their tenant, and the token every form of theirs carries."""

    tenant: str
    person: str
    csrf: str


def _digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


async def open_session(conn: asyncpg.Connection, tenant: str, person: str) -> str:
    """A new session for this person; the token is the cookie's value."""
    token, csrf = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
    async with conn.transaction():
        await conn.execute("DELETE FROM console_sessions WHERE expires_at < now()")
        await conn.execute(
            "INSERT INTO console_sessions (token_sha256, tenant, person, csrf, expires_at)"
            " VALUES ($1, $2, $3, $4, now() + make_interval(secs => $5))",
            _digest(token),
            tenant,
            person,
            csrf,
            float(SESSION_TTL_S),
        )
    return token


async def session_of(conn: asyncpg.Connection, token: str) -> ConsoleUser | None:
    row = await conn.fetchrow(
        "SELECT tenant, person, csrf FROM console_sessions"
        " WHERE token_sha256 = $1 AND expires_at > now()",
        _digest(token),
    )
    return None if row is None else ConsoleUser(row["tenant"], row["person"], row["csrf"])


async def close_session(conn: asyncpg.Connection, token: str) -> None:
    await conn.execute("DELETE FROM console_sessions WHERE token_sha256 = $1", _digest(token))
