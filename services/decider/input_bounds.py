"""What a live transaction keeps of the inputs it decided, and how many commands from
agent sessions it takes: both bounded, so that no agent key can push a transaction's state
past the decider's record bound (services.decider.runtime.MAX_RECORD_BYTES) and freeze it.

Pure: no I/O, no clock.

Input ids. Every rule of `decide` already judges a re-delivered input the same way the
first time did, or records one more CommandIgnored/ObservationIgnored (attempts fence
observations, a resubmission is a retry, an abort of an aborting transaction is ignored,
a resolved review is not open any more): a finished transaction drops its ids for that
reason (services.decider.finished). The ids a live transaction keeps are therefore a
window of the latest SEEN_WINDOW only, the ones Kafka redelivers (a producer's retry, a
batch read again after a restore): they save an event, they are not the guard.

Agent sessions. A claim, a release and every refusal of a session's command (fenced,
lease held) are events on the chain, and a fresh session id makes each one new to the
window. Past MAX_SESSION_EVENTS of them, a command from any session but the owner's is
refused once (`too_many_commands`) and then dropped without a trace. The owner's own
commands, and commands without a session (an operator's resolution or abort, the saga,
the reconcilers' observations), are never capped: a person can always end it.
"""

from events.transaction_events import (
    CommandRefused,
    Event,
    OwnershipReleased,
    TransactionClaimed,
)

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


def counts_against_sessions(event: Event) -> bool:
    """Whether this event was caused by an agent session's command and can be repeated
    with a fresh session id."""
    match event:
        case TransactionClaimed() | OwnershipReleased():
            return True
        case CommandRefused():
            return event.session_id is not None
        case _:
            return False


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
