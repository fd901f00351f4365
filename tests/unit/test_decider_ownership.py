"""given/when/then for agent sessions (transactions.ownership, issue 12): a lease,
a claim after it lapses, the earlier session fenced, an accepted body immutable, and the
attempt gate's seam."""

from datetime import timedelta

from support.txbuilders import T0, abort, observed, request_review, resolve, submit

from events.attempt_gate import NewAttempt, attempt_refusals
from events.definition import Resolution, TxStatus
from events.inputs import (
    AbortTransaction,
    ClaimTransaction,
    DeciderInput,
    Outcome,
    ReleaseTransaction,
)
from events.keys import default_session
from events.transaction_events import (
    CommandRefused,
    Event,
    OperationDispatched,
    TransactionClaimed,
)
from transactions.state import TransactionState
from transactions.transaction import decide, handle, handled, initial_state
from transactions.unanswered import unanswered

LEASE_S = 60


def given(*inputs: DeciderInput) -> TransactionState:
    state = initial_state("demo", "tx-1")
    for message in inputs:
        state, _ = handle(state, message)
    return state


def submitted(steps: list[str] = ["refund"]) -> DeciderInput:  # noqa: B006 - not mutated
    return submit(steps).model_copy(update={"session_id": "s-A", "lease_s": LEASE_S})


def claim(agent: str, session: str, after_s: float) -> ClaimTransaction:
    return ClaimTransaction(
        message_id=f"claim-{session}-{after_s}",
        tenant="demo",
        tx_id="tx-1",
        agent_id=agent,
        session_id=session,
        lease_s=LEASE_S,
        issued_at=T0 + timedelta(seconds=after_s),
    )


def abort_by(agent: str, session: str, n: int) -> AbortTransaction:
    return AbortTransaction(
        message_id=f"abort-{session}-{n}",
        tenant="demo",
        tx_id="tx-1",
        actor=agent,
        reason="the customer asked",
        issued_at=T0 + timedelta(seconds=n),
        agent_id=agent,
        session_id=session,
    )


def types(events: list[Event]) -> list[str]:
    return [e.type for e in events]


def test_the_submitting_session_owns_the_transaction_for_its_lease() -> None:
    state = given(submitted())
    assert state.owner is not None
    assert (state.owner.agent_id, state.owner.session_id) == ("agent-1", "s-A")
    assert state.owner.lease_expires_at == T0 + timedelta(seconds=LEASE_S)


def test_a_claim_while_the_lease_holds_is_refused_and_recorded() -> None:
    [refused] = decide(given(submitted()), claim("agent-2", "s-B", LEASE_S - 1))
    assert isinstance(refused, CommandRefused) and refused.reason == "lease_held"
    assert "s-A" in refused.rule


def test_a_claim_after_the_lease_lapsed_makes_the_successor_owner() -> None:
    [claimed] = decide(given(submitted()), claim("agent-2", "s-B", LEASE_S))
    assert isinstance(claimed, TransactionClaimed)
    assert (claimed.previous_session_id, claimed.session_id) == ("s-A", "s-B")
    assert claimed.reason == "lease_lapsed"


def test_after_a_claim_the_earlier_session_is_fenced_and_the_successor_is_not() -> None:
    state = given(submitted(), claim("agent-2", "s-B", LEASE_S))
    [fenced] = decide(state, abort_by("agent-1", "s-A", LEASE_S + 1))
    assert isinstance(fenced, CommandRefused) and fenced.reason == "fenced"
    assert (fenced.agent_id, fenced.session_id) == ("agent-1", "s-A")
    # The successor's own abort is acted on.
    assert types(decide(state, abort_by("agent-2", "s-B", LEASE_S + 2)))[0] == (
        "TransactionAbortRequested"
    )


def test_a_fenced_session_cannot_ask_for_review_and_the_owner_can() -> None:
    state = given(submitted(), observed("refund", 1, Outcome.UNKNOWN), claim("agent-2", "s-B", 61))
    asked = request_review("refund", 1)
    [fenced] = decide(state, asked.model_copy(update={"agent_id": "agent-1", "session_id": "s-A"}))
    assert isinstance(fenced, CommandRefused) and fenced.reason == "fenced"
    mine = asked.model_copy(update={"agent_id": "agent-2", "session_id": "s-B"})
    assert types(decide(state, mine))[0] == "OperationNeedsReview"


def test_the_owner_may_renew_and_a_release_lets_a_successor_claim_at_once() -> None:
    state = given(submitted())
    [renewed] = decide(state, claim("agent-1", "s-A", 10))
    assert isinstance(renewed, TransactionClaimed) and renewed.reason == "renewed"
    released = given(
        submitted(),
        ReleaseTransaction(
            message_id="release-A",
            tenant="demo",
            tx_id="tx-1",
            agent_id="agent-1",
            session_id="s-A",
            issued_at=T0 + timedelta(seconds=1),
        ),
    )
    [claimed] = decide(released, claim("agent-2", "s-B", 2))
    assert isinstance(claimed, TransactionClaimed) and claimed.reason == "handed_off"


def test_a_different_body_under_an_accepted_tx_id_is_refused_with_the_rule() -> None:
    state = given(submitted())
    other = submitted().model_copy(update={"fingerprint": "e" * 64, "message_id": "cmd-2"})
    [refused] = decide(state, other)
    assert isinstance(refused, CommandRefused) and refused.reason == "operations_immutable"
    assert "never change" in refused.rule
    assert state.operations[0].spec.payload == {"amount": 100}  # the recorded one stands


def test_a_finished_transaction_cannot_be_claimed() -> None:
    state = given(submitted(), observed("refund", 1, Outcome.SUCCEEDED))
    assert state.status is TxStatus.COMMITTED
    [refused] = decide(state, claim("agent-2", "s-B", LEASE_S))
    assert isinstance(refused, CommandRefused) and refused.reason == "transaction_finished"


def test_an_agents_command_without_a_session_is_refused_and_a_persons_is_not() -> None:
    # Issue 18, item 5 (this test asserted the hole before: every session-less command
    # went through, so a predecessor's SDK abort after a claim was obeyed).
    state = given(submitted(), claim("agent-2", "s-B", LEASE_S))
    [refused] = decide(state, abort(1))
    assert isinstance(refused, CommandRefused) and refused.reason == "session_required"
    assert "s-B" in refused.rule
    by_operator = abort(2).model_copy(update={"operator": "ops@example.com"})
    assert types(decide(state, by_operator))[0] == "TransactionAbortRequested"
    # recon's own review request (a reconciler's) names no agent and is not fenced.
    unknown = given(
        submitted(), observed("refund", 1, Outcome.UNKNOWN), claim("agent-2", "s-B", 61)
    )
    assert types(decide(unknown, request_review("refund", 1)))[0] == "OperationNeedsReview"


def test_a_client_without_sessions_aborts_what_its_default_session_owns_until_a_claim() -> None:
    # CONTRACT v1's plain abort (no body) keeps working for a submission that named no
    # session; once a successor's named session owns the transaction it is refused.
    plain = submit(["refund"]).model_copy(
        update={"session_id": default_session("agent-1"), "lease_s": LEASE_S}
    )
    assert types(decide(given(plain), abort(1)))[0] == "TransactionAbortRequested"
    claimed = given(plain, claim("agent-2", "s-B", LEASE_S))
    [refused] = decide(claimed, abort(2))
    assert isinstance(refused, CommandRefused) and refused.reason == "session_required"


def test_after_a_claim_every_dispatch_is_charged_to_the_successor() -> None:
    # Issue 18, item 8: the gate governs the agent the dispatch names.
    first = [
        e
        for e in decide(initial_state("demo", "tx-1"), submitted())
        if e.type == ("OperationDispatched")
    ]
    assert [e.agent_id for e in first] == [None]  # the submitter: the intents row
    state = given(
        submitted(),
        observed("refund", 1, Outcome.UNKNOWN),
        request_review("refund", 1),
        claim("agent-2", "s-B", LEASE_S),
    )
    retried = [
        e
        for e in decide(state, resolve("refund", 1, Resolution.RETRY, n=LEASE_S + 1))
        if isinstance(e, OperationDispatched)
    ]
    assert [(e.attempt, e.agent_id) for e in retried] == [(2, "agent-2")]


def test_a_take_over_rebuilds_a_dispatch_after_a_claim_charged_to_the_successor() -> None:
    # The decider that takes the partition re-runs the unanswered leg (transactions.
    # unanswered): the gate must govern the agent the committed dispatch named, the
    # successor, not the submitter who left.
    state = given(
        submitted(),
        observed("refund", 1, Outcome.UNKNOWN),
        request_review("refund", 1),
        claim("agent-2", "s-B", LEASE_S),
    )
    state, envelopes, decided = handled(
        state, resolve("refund", 1, Resolution.RETRY, n=LEASE_S + 1)
    )
    committed = [
        e for e in (env.event() for env in envelopes) if isinstance(e, OperationDispatched)
    ]
    assert [(e.attempt, e.agent_id) for e in committed] == [(2, "agent-2")]
    assert unanswered(state) == committed
    # The decider orders the call from the decided event: charged as the one committed.
    assert [e for e in decided if isinstance(e, OperationDispatched)] == committed


def test_the_attempt_gate_refuses_a_review_retry_a_check_refuses() -> None:
    state = given(
        submitted(),
        observed("refund", 1, Outcome.UNKNOWN),
        request_review("refund", 1),
    )
    op = state.operations[0]
    attempt = NewAttempt("demo", "tx-1", op.spec, op.legs()[0][0], 2, T0, "review_retry", None)
    assert attempt_refusals(attempt) == []  # a step without approval: nothing built in refuses
    assert attempt_refusals(attempt, [lambda a: [f"approval for {a.spec.action} expired"]]) == [
        "approval for refund expired"
    ]
    # With no check refusing, the retry dispatches attempt 2 as before.
    assert "OperationDispatched" in types(decide(state, resolve("refund", 1, Resolution.RETRY)))
