"""What a live transaction keeps of the inputs it decided, and how many commands from
agent sessions it takes: both bounded, so that no agent key can push a transaction's state
past the decider's record bound (services.decider.runtime.MAX_RECORD_BYTES) and freeze it.

Pure: no I/O, no clock.

Input ids. Every rule of `decide` already judges a re-delivered input the same way the
first time did, or records one more CommandIgnored/ObservationIgnored (attempts fence
observations, a resubmission is a retry, an abort of an aborting transaction is ignored,
a resolved review is not open any more): a finished transaction drops its ids for that
reason (transactions.finished). The ids a live transaction keeps are therefore a
window of the latest SEEN_WINDOW only, the ones Kafka redelivers (a producer's retry, a
batch read again after a restore): they save an event, they are not the guard.

Agent sessions. A claim, a release and every refusal of a session's command (fenced,
lease held) are events on the chain, and a fresh session id makes each one new to the
window. Past MAX_SESSION_EVENTS of them, a command from any session but the owner's is
refused once (`too_many_commands`) and then dropped without a trace. The owner's own
commands, and commands without a session (an operator's resolution or abort, the saga,
the reconcilers' observations), are never capped: a person can always end it. The intake
asks the same `capped` on the transaction as projected and answers `429 too_many_commands`
without producing anything (services.intake.session_cap).

Refusals. A session that sends the same refused command again (a fresh message id, or one
the window forgot) is refused once: the transaction remembers (session, command, reason)
of each refusal of a session's command, and an identical refusal records nothing. Only
refusals that count against sessions are remembered, so the record is bounded like their
count; it is also cut to MAX_SESSION_EVENTS, the oldest first.
"""

from typing import Final

from events.transaction_events import (
    CommandRefused,
    Event,
    OwnershipReleased,
    TransactionClaimed,
)
from transactions.ownership import Owner

# Kafka redelivers within a batch or two; 64 ids of at most a few hundred bytes each
# stay far under the record bound.
SEEN_WINDOW = 64

# A legitimate transaction sees a handful of claims and releases (one per agent that took
# it over); 256 leaves room for a long hand-off chain and keeps the chain's growth from
# one attacker at a few hundred small events.
MAX_SESSION_EVENTS = 256

TOO_MANY_COMMANDS = "too_many_commands"


def remember(seen: tuple[str, ...], message_id: str) -> tuple[str, ...]:
    """The window after deciding `message_id`: the oldest id leaves it first."""
    if message_id in seen:
        return seen
    return (*seen, message_id)[-SEEN_WINDOW:]


# The events an agent session's command causes and can repeat with a fresh session id: by
# type, and for each type the field that must name a session (None: every one of them).
# A refusal of recon's own or of an operator's command names no session and is not
# counted. Declared as data so that the intake counts the projected events by the same
# declaration (services.intake.session_cap) instead of a copy of this rule.
SESSION_CAUSED: Final[dict[type[Event], str | None]] = {
    TransactionClaimed: None,
    OwnershipReleased: None,
    CommandRefused: "session_id",
}


def counts_against_sessions(event: Event) -> bool:
    """Whether this event was caused by an agent session's command and can be repeated
    with a fresh session id."""
    if type(event) not in SESSION_CAUSED:
        return False
    field = SESSION_CAUSED[type(event)]
    return field is None or getattr(event, field) is not None


def capped(
    session_events: int,
    owner: Owner | None,
    command: str,
    agent_id: str | None,
    session_id: str | None,
    *,
    by_agent: bool = True,
) -> list[Event] | None:
    """None when a session-bearing command may be judged; otherwise what is recorded
    instead (`session_cap`). The owner's session, a person's command (`by_agent` false:
    an operator's abort, even one naming a session) and commands that name no session
    (recon's) are never capped."""
    if session_id is None or not by_agent:
        return None
    if owner is not None and (agent_id, session_id) == (owner.agent_id, owner.session_id):
        return None
    return session_cap(session_events, command, agent_id, session_id)


def session_cap(
    session_events: int, command: str, agent_id: str | None, session_id: str | None
) -> list[Event] | None:
    """None when the command may be judged; otherwise what is recorded instead: one
    refusal when the cap is reached, nothing after it."""
    if session_events < MAX_SESSION_EVENTS:
        return None
    if session_events > MAX_SESSION_EVENTS:
        return []
    return [
        CommandRefused(
            command=command,
            reason=TOO_MANY_COMMANDS,
            rule=f"this transaction took {MAX_SESSION_EVENTS} commands from agent sessions;"
            " only its owner's session and operators are heard now",
            agent_id=agent_id,
            session_id=session_id,
        )
    ]


# (session_id, command, reason) of a refusal already recorded for a session.
RefusalKey = tuple[str, str, str]


def refusal_key(event: Event) -> RefusalKey | None:
    """What identifies a refusal of a session's command; None for every other event."""
    if isinstance(event, CommandRefused) and counts_against_sessions(event):
        assert event.session_id is not None
        return (event.session_id, event.command, event.reason)
    return None


def repeated(refused: tuple[RefusalKey, ...], events: list[Event]) -> bool:
    """Whether `events` are only refusals this transaction already recorded: then nothing
    is recorded again."""
    keys = [refusal_key(event) for event in events]
    return bool(keys) and all(key is not None and key in refused for key in keys)


def remember_refusal(refused: tuple[RefusalKey, ...], event: Event) -> tuple[RefusalKey, ...]:
    key = refusal_key(event)
    if key is None or key in refused:
        return refused
    return (*refused, key)[-MAX_SESSION_EVENTS:]
