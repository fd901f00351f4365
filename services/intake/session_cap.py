"""`429 too_many_commands` (issue 18, item 4): the intake's answer to an agent session's
command on a transaction that has taken its cap of commands from agent sessions.

The decider judges (transactions.input_bounds: which events count, the cap, who is
exempt); the intake asks the same `capped` on the count the projector keeps in the
transaction's row, moved by the same declaration (`SESSION_CAUSED`, projections.view), so
the count is the decider's count and there is no second copy of that rule here.

Nothing is produced for a request answered 429: the decider would record nothing either
past the cap. No Retry-After: the count never falls while the transaction lives, so a
retry of the same command is refused alike; the owner's session and operators are heard.
The projection may lag the log by a moment: a command let through then is judged on the
log, refused once there (`CommandRefused` `too_many_commands`) or dropped.
"""

from services.intake.errors import ApiError
from transactions import input_bounds
from transactions.ownership import Owner


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
