"""`429 too_many_commands` (issue 18, item 4): the intake's answer to an agent session's
command on a transaction that has taken its cap of commands from agent sessions.

The decider judges (transactions.input_bounds: which events count, the cap, who is
exempt); the intake asks the same `capped` on the transaction as projected, the way it asks
transactions.ownership for the fence. The count is one query on the `events` table's
primary key (tenant, tx_id, seq), built from the decider's own declaration of the events
that count (`SESSION_CAUSED`), so there is no second copy of that rule here.

Nothing is produced for a request answered 429: the decider would record nothing either
past the cap. No Retry-After: the count never falls while the transaction lives, so a
retry of the same command is refused alike; the owner's session and operators are heard.
The projection may lag the log by a moment: a command let through then is judged on the
log, refused once there (`CommandRefused` `too_many_commands`) or dropped.
"""

import asyncpg
from pydantic import BaseModel

from services.intake.errors import ApiError
from transactions import input_bounds
from transactions.ownership import Owner


def _counted(event_type: type[BaseModel], field: str | None) -> str:
    name = event_type.model_fields["type"].default
    assert isinstance(name, str) and name.isidentifier(), name
    if field is None:
        return f"type = '{name}'"
    assert field.isidentifier(), field
    return f"(type = '{name}' AND data->>'{field}' IS NOT NULL)"


# Literals from the decider's declaration only (checked identifiers), never from a request.
COUNT_SQL = (
    "SELECT count(*) FROM events WHERE tenant = $1 AND tx_id = $2 AND ("
    + " OR ".join(_counted(t, f) for t, f in input_bounds.SESSION_CAUSED.items())
    + ")"
)


async def session_events(conn: asyncpg.Connection, tenant: str, tx_id: str) -> int:
    """How many projected events of the transaction count against agent sessions."""
    count = await conn.fetchval(COUNT_SQL, tenant, tx_id)
    return int(count or 0)


def refuse_past_cap(
    session_events: int,
    owner: Owner | None,
    command: str,
    agent_id: str | None,
    session_id: str | None,
    *,
    by_agent: bool = True,
) -> None:
    """Raise the 429 when the decider would not judge this command any more."""
    verdict = input_bounds.capped(
        session_events, owner, command, agent_id, session_id, by_agent=by_agent
    )
    if verdict is None:
        return
    raise ApiError(
        429,
        input_bounds.TOO_MANY_COMMANDS,
        f"this transaction took {input_bounds.MAX_SESSION_EVENTS} commands from agent"
        " sessions; only its owner's session and operators are heard now. Nothing was"
        " recorded, and a retry is refused alike",
    )
