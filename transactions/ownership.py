"""Who owns a transaction: an agent session with a lease (issue 12, item 1).

Pure: no I/O, no clock. Time is the commands' `issued_at`.

An agent submits under an identity and a session; that session owns the transaction for a
lease (`lease_s` from the submission). When the lease has lapsed, or the owner handed the
transaction off, another session of the tenant may claim it (`TransactionClaimed`); the
owner's own claim renews its lease. From a claim on, every earlier session is fenced: a
command it sends is refused and recorded (`CommandRefused`, reason `fenced`), and nothing
else happens. An agent's command that names no session is refused too (`session_required`,
issue 18 item 5) once a named session owns the transaction: a session-less command would
walk around the fence. A submission that named no session is owned by its agent's default
session, and its session-less commands are that owner's (CONTRACT v1's plain abort). Only
a person (an operator's abort) or recon itself (a reconciler's review request) may act
without naming the owning session otherwise.

What a successor may do is what the API offers it: continue (recon does that by itself),
abort, or ask for review. It can never change what was accepted: a submission with another
body under the same tx_id is refused (`operations_immutable`), here and, synchronously, by
the intake's 409.
"""

from datetime import datetime, timedelta

from events.definition import FINISHED, TxStatus
from events.inputs import ClaimTransaction, ReleaseTransaction, SubmitTransaction
from events.keys import default_session
from events.model import Message
from events.rules import IMMUTABLE_RULE
from events.transaction_events import (
    CommandRefused,
    Event,
    OperationDispatched,
    OwnershipReleased,
    TransactionAccepted,
    TransactionClaimed,
)


class Owner(Message):
    agent_id: str
    session_id: str
    lease_expires_at: datetime
    released: bool = False


def lease_until(issued_at: datetime, lease_s: int) -> str:
    return (issued_at + timedelta(seconds=lease_s)).isoformat()


def accepted_fields(cmd: SubmitTransaction) -> dict[str, str]:
    """The owner fields of TransactionAccepted; none for a submission without a session."""
    if cmd.session_id is None or cmd.lease_s is None:
        return {}
    return {
        "session_id": cmd.session_id,
        "lease_expires_at": lease_until(cmd.issued_at, cmd.lease_s),
    }


def resubmitted(fingerprint: str, cmd: SubmitTransaction) -> list[Event]:
    """A SubmitTransaction for a tx_id already accepted: the same body is a retry (nothing
    happens); another body is refused and recorded. (The intake refuses it with 409 first;
    this covers one that reached the log anyway.)"""
    if cmd.fingerprint == fingerprint:
        return []
    return [
        CommandRefused(
            command=cmd.type,
            reason="operations_immutable",
            rule=IMMUTABLE_RULE,
            agent_id=cmd.agent_id,
            session_id=cmd.session_id,
        )
    ]


def claim(owner: Owner | None, status: TxStatus | None, cmd: ClaimTransaction) -> list[Event]:
    def refused(reason: str, rule: str) -> list[Event]:
        return [
            CommandRefused(
                command=cmd.type,
                reason=reason,
                rule=rule,
                agent_id=cmd.agent_id,
                session_id=cmd.session_id,
            )
        ]

    if status in FINISHED:
        return refused("transaction_finished", "a finished transaction has nothing to take over")
    if owner is None:
        reason = "unowned"  # accepted before sessions existed
    elif (owner.agent_id, owner.session_id) == (cmd.agent_id, cmd.session_id):
        reason = "renewed"
    elif owner.released:
        reason = "handed_off"
    elif cmd.issued_at >= owner.lease_expires_at:
        reason = "lease_lapsed"
    else:
        return refused(
            "lease_held",
            f"session {owner.session_id} of {owner.agent_id} holds the lease until"
            f" {owner.lease_expires_at.isoformat()}; claim once it lapses or is handed off",
        )
    return [
        TransactionClaimed(
            agent_id=cmd.agent_id,
            session_id=cmd.session_id,
            previous_agent_id=owner.agent_id if owner else None,
            previous_session_id=owner.session_id if owner else None,
            lease_expires_at=lease_until(cmd.issued_at, cmd.lease_s),
            reason=reason,
        )
    ]


def release(owner: Owner | None, cmd: ReleaseTransaction) -> list[Event]:
    refusal = fence(owner, cmd.type, cmd.agent_id, cmd.session_id, by_agent=True)
    if refusal is not None:
        return [refusal]
    if owner is None or owner.released:
        return []
    return [OwnershipReleased(agent_id=cmd.agent_id, session_id=cmd.session_id)]


def fence(
    owner: Owner | None,
    command: str,
    agent_id: str | None,
    session_id: str | None,
    *,
    by_agent: bool,
) -> CommandRefused | None:
    """The refusal of a command from a session that does not own the transaction, or
    None when it may go on. `by_agent`: an agent asks (not a person, not recon itself),
    so it must name the owning session."""
    if owner is None:
        return None
    if session_id is None:
        # A client from before sessions (CONTRACT v1's plain abort) owns what it submits
        # under its default session and never proves one: while that session owns the
        # transaction nobody is fenced, so there is no fence to walk around. Once a
        # session of its own owns it (a named submission, a claim), an agent must name it.
        if not by_agent or owner.session_id == default_session(owner.agent_id):
            return None
        return CommandRefused(
            command=command,
            reason="session_required",
            rule=f"an agent's command must name the session that owns the transaction"
            f" (session {owner.session_id} of {owner.agent_id}), with its owner token",
            agent_id=agent_id,
            session_id=None,
        )
    if (agent_id, session_id) == (owner.agent_id, owner.session_id):
        return None
    return CommandRefused(
        command=command,
        reason="fenced",
        rule=f"session {session_id} does not own this transaction: session"
        f" {owner.session_id} of {owner.agent_id} does; its commands alone are acted on",
        agent_id=agent_id,
        session_id=session_id,
    )


def evolve_owner(owner: Owner | None, event: Event) -> Owner | None:
    match event:
        case TransactionAccepted(session_id=str(session), lease_expires_at=str(until)):
            return Owner(
                agent_id=event.agent_id,
                session_id=session,
                lease_expires_at=datetime.fromisoformat(until),
            )
        case TransactionClaimed():
            return Owner(
                agent_id=event.agent_id,
                session_id=event.session_id,
                lease_expires_at=datetime.fromisoformat(event.lease_expires_at),
            )
        case OwnershipReleased() if owner is not None:
            return owner.model_copy(update={"released": True})
        case _:
            return owner


def charged_to(submitter: str, owner: Owner | None, events: list[Event]) -> list[Event]:
    """`events` with each dispatch naming the agent it is charged to when that is not the
    submitter: after a claim the successor asks for the calls, so the gate must govern the
    successor (its grants, quotas and kill switches), not the agent that left (issue 18,
    item 8). The owner is followed through `events`, so a dispatch after a claim in the
    same decision is charged to the claimant."""
    charged: list[Event] = []
    for event in events:
        if isinstance(event, TransactionAccepted):
            submitter = event.agent_id
        owner = evolve_owner(owner, event)
        if isinstance(event, OperationDispatched) and owner and owner.agent_id != submitter:
            event = event.model_copy(update={"agent_id": owner.agent_id})
        charged.append(event)
    return charged
