"""The dispatcher's decision for one call (services.dispatcher.call_plan), driven with
scripted answers: what it asks, and above all whether it calls the provider."""

from collections.abc import Callable
from typing import Any

from support.txbuilders import T0

from events.aborted_before_call import ABORTED_BEFORE_CALL
from events.definition import Leg
from events.envelope import GENESIS_HASH, seal
from events.inputs import Outcome, Source
from events.keys import dispatch_observation_id
from events.observation import Seen
from events.transaction_events import OperationDispatched
from services.dispatcher.call_plan import (
    LOOKUP_BACKOFF_S,
    NOT_RESENT,
    Apply,
    Awaited,
    Balance,
    Begin,
    Begun,
    Claim,
    Gate,
    Hold,
    Lookup,
    Report,
    Request,
    Review,
    Sleep,
    Turn,
    WasBegun,
    call_plan,
    dispatch_observation,
)
from services.providers.preconditions import PRECONDITION_FAILED

WRITTEN = Begun((), written=True)
# The row of this attempt was there when the begin ran: a call may have been made.
FOUND_ROW = Begun((), written=False, existed=True)
ABSENT = Seen(Outcome.ABSENT, 200)
FOUND = Seen(Outcome.SUCCEEDED, 200, "eff_1")
UNKNOWN = Seen(Outcome.UNKNOWN, None, error="TimeoutError")


def dispatch(
    operation: str = "payments.charge",
    *,
    attempt: int = 1,
    lookup_first: bool = False,
    payload: dict[str, Any] | None = None,
) -> OperationDispatched:
    return OperationDispatched(
        action="a",
        leg=Leg.FORWARD,
        op_key="k",
        attempt=attempt,
        lookup_first=lookup_first,
        provider="sandbox",
        operation=operation,
        payload=payload if payload is not None else {"amount": 1},
    )


def run(
    plan_of: OperationDispatched,
    answer: Callable[[Request[Any]], object],
    *,
    adapter_known: bool = True,
) -> list[Request[Any]]:
    """Every request the plan makes, each answered by `answer`."""
    plan = call_plan(plan_of, adapter_known=adapter_known)
    asked: list[Request[Any]] = []
    reply: object = None
    while True:
        try:
            request = plan.send(reply)
        except StopIteration:
            return asked
        asked.append(request)
        reply = answer(request)


def answers(
    *,
    begun_before: bool = False,
    lookup: Seen = ABSENT,
    begin: Begun | None = None,
    apply: Seen = FOUND,
    balance: tuple[int, Any] = (200, {"refundable": 100}),
    claimed: Turn = Turn.AT_ONCE,
    awaited: bool = True,
) -> Callable[[Request[Any]], object]:
    """`begun_before`: the attempt's `calls_begun` row exists, as both `WasBegun` and the
    begin statement (`existed`) see it; `begin` overrides what every begin answers;
    `claimed`: how the claim ended (GIVEN_UP: the call is not the executor's to make);
    `awaited`: whether the transaction still waits on the call when asked."""

    def answer(request: Request[Any]) -> object:
        match request:
            case Gate():
                return True
            case WasBegun():
                return begun_before
            case Lookup():
                return lookup
            case Begin():
                if begin is not None:
                    return begin
                return FOUND_ROW if begun_before else WRITTEN
            case Apply():
                return apply
            case Balance():
                return balance
            case Claim():
                return claimed
            case Awaited():
                return awaited
        return None

    return answer


def kinds(asked: list[Request[Any]]) -> list[str]:
    return [type(r).__name__ for r in asked]


def test_a_first_send_is_begun_then_applied_and_its_answer_reported() -> None:
    # One statement before the call: the begin itself says the call was never begun.
    asked = run(dispatch(), answers())
    assert kinds(asked) == ["Gate", "Begin", "Apply", "Report"]
    assert asked[-1] == Report(Source.RESPONSE, FOUND, 0)


def test_a_dispatch_the_gate_holds_asks_nothing_more() -> None:
    asked = run(dispatch(), lambda r: False if isinstance(r, Gate) else None)
    assert kinds(asked) == ["Gate"]


def test_a_redelivery_is_judged_by_the_record_not_by_anything_else() -> None:
    """Begun before: look up first, and an effect found is reported, never sent again."""
    asked = run(dispatch(), answers(begun_before=True, lookup=FOUND))
    assert kinds(asked) == ["Gate", "Begin", "Claim", "Lookup", "Report"]
    assert asked[-1] == Report(Source.LOOKUP, FOUND, 1)
    # Never begun: a first send, without a lookup.
    assert "Lookup" not in kinds(run(dispatch(), answers(begun_before=False)))


def test_a_redelivered_destructive_call_found_absent_is_not_sent_again() -> None:
    asked = run(dispatch("waitlist.promote"), answers(begun_before=True))
    assert Apply() not in asked
    assert asked[-1] == Report(Source.LOOKUP, Seen(Outcome.UNKNOWN, error=NOT_RESENT), 1)
    # A write under the same key is (the provider dedupes a call still travelling), once
    # the begin after its lookup, the last gate, let it through.
    asked = run(dispatch(), answers(begun_before=True))
    assert kinds(asked) == [
        "Gate",
        "Begin",
        "Claim",
        "Lookup",
        "Awaited",
        "Begin",
        "Apply",
        "Report",
    ]


def test_a_redelivery_is_looked_up_before_a_switch_holds_it() -> None:
    """The begin that finds the row answers for the redelivery, not yet for the switches:
    an effect already made is reported as before; a call still to be made is held by the
    begin after the lookup."""
    switched = Begun(("ks_1",), written=False, existed=True)
    asked = run(dispatch(), answers(begin=switched, lookup=FOUND))
    assert kinds(asked) == ["Gate", "Begin", "Claim", "Lookup", "Report"]
    asked = run(dispatch(), answers(begin=switched))
    assert kinds(asked) == ["Gate", "Begin", "Claim", "Lookup", "Awaited", "Begin", "Hold"]
    assert asked[-1] == Hold(("ks_1",))


def test_whether_the_call_was_begun_is_asked_first_when_something_comes_before_its_begin() -> None:
    """A lookup first, or a precondition to re-check, comes between the question and the
    begin (the last gate), so the question is its own request there."""
    looked_up = run(dispatch(lookup_first=True), answers())
    assert kinds(looked_up) == ["Gate", "WasBegun", "Lookup", "Begin", "Apply", "Report"]
    refund = dispatch("payments.refund", attempt=2, payload={"amount": 50, "charge": "ch_1"})
    rechecked = run(refund, answers())
    assert kinds(rechecked) == ["Gate", "WasBegun", "Balance", "Begin", "Apply", "Report"]
    # A later attempt with nothing to re-check asks the begin alone.
    assert kinds(run(dispatch(attempt=2), answers())) == ["Gate", "Begin", "Apply", "Report"]


def test_a_destructive_call_another_dispatcher_began_meanwhile_is_not_sent_twice() -> None:
    taken = Begun((), written=False)
    asked = run(dispatch("waitlist.promote"), answers(begin=taken))
    assert Apply() not in asked
    assert asked[-1] == Report(Source.LOOKUP, Seen(Outcome.UNKNOWN, error=NOT_RESENT), 0)


def test_a_write_another_dispatcher_began_meanwhile_waits_for_that_call_then_looks() -> None:
    """Never two calls of one attempt on the wire: its caller's lease is waited for
    (services.dispatcher.call_lease), then the key is looked up, and sent only if absent."""
    taken = Begun((), written=False)
    asked = run(dispatch(), answers(begin=taken, lookup=FOUND))
    assert kinds(asked) == ["Gate", "Begin", "Claim", "Lookup", "Report"]
    assert asked[-1] == Report(Source.LOOKUP, FOUND, 1)
    asked = run(dispatch(), answers(begin=taken))
    assert kinds(asked) == ["Gate", "Begin", "Claim", "Lookup", "Awaited", "Apply", "Report"]


def test_every_redelivery_claims_its_call_before_it_looks_it_up() -> None:
    """Asked by the begin or by its own question: the lookup comes after the claim."""
    asked = run(dispatch(lookup_first=True), answers(begun_before=True))
    assert kinds(asked) == [
        "Gate",
        "WasBegun",
        "Claim",
        "Lookup",
        "Awaited",
        "Begin",
        "Apply",
        "Report",
    ]
    # Never begun: nobody to wait for.
    asked = run(dispatch(lookup_first=True), answers())
    assert "Claim" not in kinds(asked)


def test_a_claim_given_up_ends_the_call_with_nothing_sent_or_reported() -> None:
    """The partition went to another process while this one waited for the call's holder:
    the new owner's take-over claims it, so this plan asks nothing more, whichever way it
    came to claim (a redelivery, or a write another dispatcher began meanwhile)."""
    for plan_of, given in (
        (dispatch(), answers(begun_before=True, claimed=Turn.GIVEN_UP)),
        (dispatch(lookup_first=True), answers(begun_before=True, claimed=Turn.GIVEN_UP)),
        (dispatch(), answers(begin=Begun((), written=False), claimed=Turn.GIVEN_UP)),
    ):
        asked = run(plan_of, given)
        assert kinds(asked)[-1] == "Claim", kinds(asked)
        assert "Lookup" not in kinds(asked) and "Report" not in kinds(asked)


def test_a_claim_that_waited_asks_the_transaction_again_before_it_looks_up() -> None:
    """While another holder's call was on the wire (a zombie's lease: 12-32 s at a 5 s
    provider timeout) the transaction may have moved on: a person failed it, or another
    answer settled the leg. No longer awaited, nothing is looked up, sent or reported (a
    write found absent would be sent again); still awaited, the call goes on as before."""
    for plan_of, given in (
        (dispatch(), answers(begun_before=True, claimed=Turn.WAITED, awaited=False)),
        (
            dispatch(lookup_first=True),
            answers(begun_before=True, claimed=Turn.WAITED, awaited=False),
        ),
        (dispatch(), answers(begin=Begun((), written=False), claimed=Turn.WAITED, awaited=False)),
    ):
        asked = run(plan_of, given)
        assert kinds(asked)[-2:] == ["Claim", "Awaited"], kinds(asked)
        assert "Lookup" not in kinds(asked) and "Report" not in kinds(asked)
    asked = run(dispatch(), answers(begun_before=True, claimed=Turn.WAITED))
    assert kinds(asked) == [
        "Gate",
        "Begin",
        "Claim",
        "Awaited",
        "Lookup",
        "Awaited",
        "Begin",
        "Apply",
        "Report",
    ]


def test_a_redelivery_found_absent_asks_the_transaction_again_before_it_sends() -> None:
    """The plan was judged on the state a take-over restored, or the begin found another
    caller's row: the call's own answer may have reached the owner since, a decline that
    leaves no effect to find, and failed the transaction. A provider that answers a
    declined key's resend afresh would make an effect nobody waits for (the simulator's
    `afresh` provider). No longer awaited: nothing begun, sent or reported."""
    for plan_of, given in (
        (dispatch(), answers(begun_before=True, awaited=False)),
        (dispatch(lookup_first=True), answers(begun_before=True, awaited=False)),
        (dispatch(), answers(begin=Begun((), written=False), awaited=False)),
    ):
        asked = run(plan_of, given)
        assert kinds(asked)[-3:] == ["Claim", "Lookup", "Awaited"], kinds(asked)
        assert "Apply" not in kinds(asked) and "Report" not in kinds(asked)
    # An effect found is reported whatever the transaction waits on: it is evidence.
    asked = run(dispatch(), answers(begun_before=True, lookup=FOUND, awaited=False))
    assert kinds(asked)[-2:] == ["Lookup", "Report"]
    # A first send asks nothing: its judgement is as fresh as the statements since.
    asked = run(dispatch(lookup_first=True), answers(awaited=False))
    assert "Awaited" not in kinds(asked) and "Apply" in kinds(asked)


def test_an_abort_recorded_before_the_call_stops_it() -> None:
    stopped = Begun((), written=False, aborted=True)
    asked = run(dispatch(), answers(begin=stopped))
    assert Apply() not in asked
    rejected = Seen(Outcome.REJECTED, error=ABORTED_BEFORE_CALL)
    assert asked[-1] == Report(Source.RESPONSE, rejected, 0)


def test_a_begin_whose_partition_was_taken_after_its_process_ends_the_call() -> None:
    """services.dispatcher.call_fence: a zombie's begin (a first send, or the last gate of a
    redelivery after its lookup) writes nothing, and the plan holds, reports and sends
    nothing, whatever else the statement saw: the owner calls what its state waits on."""
    superseded = Begun(("ks_1",), written=False, aborted=True, superseded=True)
    asked = run(dispatch(), answers(begin=superseded))
    assert kinds(asked) == ["Gate", "Begin"]
    asked = run(dispatch(lookup_first=True), answers(begin=superseded))
    assert kinds(asked) == ["Gate", "WasBegun", "Lookup", "Begin"]


def test_a_call_a_kill_switch_holds_at_begin_is_not_made() -> None:
    asked = run(dispatch(), answers(begin=Begun(("ks_1",), written=False)))
    assert kinds(asked) == ["Gate", "Begin", "Hold"]
    assert asked[-1] == Hold(("ks_1",))


def test_an_unknown_answer_is_resolved_by_lookups_with_backoff() -> None:
    asked = run(dispatch(), answers(apply=UNKNOWN, lookup=Seen(Outcome.UNAVAILABLE, 503)))
    sleeps = [r.seconds for r in asked if isinstance(r, Sleep)]
    assert sleeps == list(LOOKUP_BACKOFF_S)
    assert asked[-1] == Report(Source.LOOKUP, Seen(Outcome.UNAVAILABLE, 503), 5)


def test_a_new_refund_whose_balance_no_longer_holds_asks_a_person_instead() -> None:
    refund = dispatch("payments.refund", attempt=2, payload={"amount": 50, "charge": "ch_1"})
    asked = run(refund, answers(balance=(200, {"refundable": 10})))
    assert Apply() not in asked and Begin() not in asked
    assert isinstance(asked[-1], Review) and asked[-1].reason == PRECONDITION_FAILED
    # The first attempt is not re-checked: its approval was given against the world now.
    assert Balance("ch_1") not in run(
        dispatch("payments.refund", payload=refund.payload), answers()
    )


def test_an_unknown_provider_is_unknown_never_failed() -> None:
    asked = run(dispatch(), answers(), adapter_known=False)
    assert len(asked) == 1 and isinstance(asked[0], Report)
    assert asked[0].seen.outcome is Outcome.UNKNOWN


def test_a_report_becomes_the_dispatchers_observation_with_its_deterministic_id() -> None:
    d = dispatch()
    (env,) = seal(
        tenant="demo",
        tx_id="tx-1",
        last_seq=0,
        last_hash=GENESIS_HASH,
        events=[d],
        causation_id="c",
        occurred_at=T0,
    )
    obs = dispatch_observation(env, d, Report(Source.LOOKUP, FOUND, 2), T0)
    assert obs.message_id == dispatch_observation_id("k", 1, "lookup", "succeeded", 2)
    assert (obs.tenant, obs.tx_id, obs.action, obs.op_key) == ("demo", "tx-1", "a", "k")
    assert (obs.by_dispatcher, obs.remote_id, obs.attempt, obs.observed_at) == (
        True,
        "eff_1",
        1,
        T0,
    )
