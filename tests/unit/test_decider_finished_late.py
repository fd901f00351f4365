"""Every field of the state a late input's judgement reads survives a transaction's
marker: for each, one late input that a finished transaction judges by it, decided on the
live state and on the revived marker, gives the same events (transactions.finished).

What each rule reads on a finished transaction (docs/decider.md, "Finished transactions"):
an approval, the step's gate, the approvals given (their ids, which are spent), the
submitting agent and principal (separation of duties); an agent's abort, release or review
request, the owner (the fence); a session's command, the count of session-caused events (the
cap) and the refusals already recorded (a repeat records nothing)."""

from datetime import timedelta

import pytest
from support.approval_builders import (
    AGENT,
    GATE_NEVER_REACHED,
    RAN_ON_APPROVAL,
    approve,
)
from support.txbuilders import T0, observed, submit

from events.inputs import (
    AbortTransaction,
    ClaimTransaction,
    DeciderInput,
    Outcome,
    ReleaseTransaction,
)
from events.transaction_events import Event
from transactions.finished import finish, is_finished, revive
from transactions.input_bounds import MAX_SESSION_EVENTS
from transactions.state import TransactionState
from transactions.transaction import handled, initial_state

LEASE_S = 60


def run(inputs: list[DeciderInput]) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state = handled(state, message).state
    return state


def owned_submit() -> DeciderInput:
    return submit(["refund"]).model_copy(update={"session_id": "s-A", "lease_s": LEASE_S})


def claim(session: str, n: int, *, message_id: str | None = None) -> ClaimTransaction:
    return ClaimTransaction(
        message_id=message_id or f"claim-{session}-{n}",
        tenant="demo",
        tx_id="tx-1",
        agent_id="agent-2",
        session_id=session,
        lease_s=LEASE_S,
        issued_at=T0 + timedelta(seconds=n),
    )


def abort_by(agent: str, session: str) -> AbortTransaction:
    return AbortTransaction(
        message_id=f"abort-{session}",
        tenant="demo",
        tx_id="tx-1",
        actor=agent,
        reason="the customer asked",
        issued_at=T0 + timedelta(seconds=30),
        agent_id=agent,
        session_id=session,
    )


def release_by(session: str) -> ReleaseTransaction:
    return ReleaseTransaction(
        message_id=f"release-{session}",
        tenant="demo",
        tx_id="tx-1",
        agent_id="agent-1",
        session_id=session,
        issued_at=T0 + timedelta(seconds=30),
    )


OWNED: list[DeciderInput] = [owned_submit(), observed("refund", 1, Outcome.SUCCEEDED)]
# Sessions that tried to take it over while session s-A held the lease: each refusal
# counts against sessions, up to the cap.
CROWDED: list[DeciderInput] = [
    owned_submit(),
    *(claim(f"s-{i}", 1) for i in range(MAX_SESSION_EVENTS)),
    observed("refund", 1, Outcome.SUCCEEDED),
]
REFUSED_ONCE: list[DeciderInput] = [*OWNED, claim("s-B", 90)]

# (what the rule reads, the history, the late input, what the live state records)
CASES: list[tuple[str, list[DeciderInput], DeciderInput, list[tuple[str, str]]]] = [
    (
        "approval_required",
        GATE_NEVER_REACHED,
        approve(9),
        [("ApprovalRefused", "transaction_failed")],
    ),
    ("approvals: an id given", RAN_ON_APPROVAL, approve(9), [("ApprovalRefused", "approval_used")]),
    (
        "approvals: spent on the step",
        RAN_ON_APPROVAL,
        approve(9, approval_id="ap-2"),
        [("ApprovalRefused", "approval_used")],
    ),
    (
        "agent_id",
        GATE_NEVER_REACHED,
        approve(9, approver=AGENT),
        [("ApprovalRefused", "separation_of_duties")],
    ),
    ("owner: the fence", OWNED, abort_by("agent-2", "s-B"), [("CommandRefused", "fenced")]),
    ("owner: a release", OWNED, release_by("s-A"), [("OwnershipReleased", "")]),
    (
        "session_events",
        CROWDED,
        claim("s-late", 90),
        [("CommandRefused", "too_many_commands")],
    ),
    ("refused", REFUSED_ONCE, claim("s-B", 90, message_id="claim-again"), []),
]


def judged(events: list[Event]) -> list[tuple[str, str]]:
    return [(e.type, str(getattr(e, "reason", ""))) for e in events]


@pytest.mark.parametrize(
    ("reads", "history", "late", "expected"), CASES, ids=[case[0] for case in CASES]
)
def test_a_late_input_is_judged_on_the_marker_as_on_the_live_state(
    reads: str, history: list[DeciderInput], late: DeciderInput, expected: list[tuple[str, str]]
) -> None:
    live = run(history)
    assert is_finished(live), reads
    on_live = handled(live, late)
    on_marker = handled(revive(finish(live)), late)
    assert judged(on_live.events) == expected, reads  # the rule this case is about
    dumped = [e.model_dump() for e in on_live.events]
    assert [e.model_dump() for e in on_marker.events] == dumped, reads
    # And the marker after it is the live state's, the chain's head included.
    assert finish(on_marker.state) == finish(on_live.state), reads
