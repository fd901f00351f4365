"""Properties of the approval gate and the destructive retry rule over arbitrary
interleavings: answers, lookups and webhooks for both steps, approvals that are right or
wrong in every way (another proposal, the agent's own, expired, repeated), rejections,
aborts and review resolutions (never `retry`: that is a person re-sending, which the
destructive rule allows), at any time.

- no dispatch of a step that needs approval without a matching (this proposal, another
  person), unused, unexpired approval at the time of the input that dispatched it;
- a destructive step is never dispatched twice.
"""

from collections import Counter
from datetime import datetime, timedelta

from hypothesis import example, given
from hypothesis import strategies as st
from support.approval_builders import AGENT, FINGERPRINT, approve, gated_submit, reject
from support.txbuilders import T0, abort, observed, request_review, resolve

from events.approval_events import ApprovalExpired, OperationApproved
from events.definition import Leg, Resolution
from events.inputs import DeciderInput, Outcome, Source
from events.transaction_events import OperationDispatched
from transactions.transaction import handle, initial_state


def _observation() -> st.SearchStrategy[DeciderInput]:
    return st.builds(
        lambda action, attempt, outcome, n, source: observed(action, attempt, outcome, n, source),
        st.sampled_from(["reserve", "promote"]),
        st.integers(1, 2),
        st.sampled_from(list(Outcome)),
        st.integers(0, 30),
        st.sampled_from([Source.RESPONSE, Source.LOOKUP, Source.WEBHOOK]),
    )


def _approval() -> st.SearchStrategy[DeciderInput]:
    return st.builds(
        lambda n, approval_id, digest, approver, valid_s: approve(
            n, approval_id=approval_id, digest=digest, approver=approver, valid_s=valid_s
        ),
        st.integers(0, 30),
        st.sampled_from(["a1", "a2"]),
        st.sampled_from([FINGERPRINT, "0" * 64]),
        st.sampled_from(["ops@example.com", AGENT]),
        st.sampled_from([0, 5, 600]),
    )


def _person() -> st.SearchStrategy[DeciderInput]:
    return st.one_of(
        st.builds(reject, st.integers(0, 120)),
        st.builds(abort, st.integers(0, 120)),
        st.builds(request_review, st.just("promote"), st.integers(1, 2)),
        st.builds(
            resolve,
            st.just("promote"),
            st.integers(1, 2),
            st.sampled_from([Resolution.APPLIED, Resolution.NOT_APPLIED]),
            st.just(Leg.FORWARD),
            st.integers(0, 120),
        ),
    )


def scenarios() -> st.SearchStrategy[list[DeciderInput]]:
    step = st.one_of(_observation(), _observation(), _observation(), _approval(), _person())
    return st.lists(step, max_size=25).map(lambda rest: [gated_submit(), *rest])


# The two ways to break each promise, so every run checks them whatever it draws: an
# approval that ran out before its step was reached, and a lost answer proven absent.
@example([gated_submit(), approve(0, valid_s=5), observed("reserve", 1, Outcome.SUCCEEDED, 30)])
@example(
    [
        gated_submit(),
        observed("reserve", 1, Outcome.SUCCEEDED),
        approve(2),
        observed("promote", 1, Outcome.UNKNOWN, 3),
        observed("promote", 1, Outcome.ABSENT, 4, Source.LOOKUP),
        observed("promote", 2, Outcome.UNKNOWN, 5),
    ]
)
@given(scenarios())
def test_no_gated_dispatch_without_a_live_bound_approval_and_never_twice(
    inputs: list[DeciderInput],
) -> None:
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    live: dict[str, datetime] = {}  # approval id -> expiry, not yet spent
    dispatches: Counter[str] = Counter()
    for envelope in log:
        event = envelope.event()
        at = datetime.fromisoformat(envelope.occurred_at)
        if isinstance(event, OperationApproved):
            assert event.proposal_digest == FINGERPRINT and event.approver != AGENT
            assert datetime.fromisoformat(event.expires_at) > at
            live[event.approval_id] = datetime.fromisoformat(event.expires_at)
        if isinstance(event, ApprovalExpired):
            live.clear()
        if isinstance(event, OperationDispatched) and event.leg is Leg.FORWARD:
            dispatches[event.action] += 1
            if event.action == "promote":
                assert any(expiry >= at for expiry in live.values()), (live, at)
                live.clear()  # spent by this dispatch
    # waitlist.promote is destructive: never sent twice by a machine.
    assert dispatches["promote"] <= 1, dispatches


def test_the_oracle_sees_a_dispatch() -> None:
    # Guard against a vacuous property: the happy path does dispatch the gated step.
    inputs: list[DeciderInput] = [
        gated_submit(),
        observed("reserve", 1, Outcome.SUCCEEDED),
        approve(5),
    ]
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes
    promoted = [
        e.event()
        for e in log
        if e.type == "OperationDispatched" and e.event().action == "promote"  # type: ignore[union-attr]
    ]
    assert len(promoted) == 1
    assert T0 + timedelta(seconds=5) == datetime.fromisoformat(log[-1].occurred_at)
