"""`handle` folds each decided event once, from the decision's own fold, instead of reading
every sealed event back and folding it again (issue 24, S5). What it gives must stay what
the reference gives: the fold of `record` over the log (a restore from the events), and
`charged_to` over the whole decision, with sessions claiming and releasing in between so
that dispatches are charged to a successor (transactions.ownership)."""

from datetime import timedelta

from hypothesis import given
from hypothesis import strategies as st
from support.decider_scenarios import scenarios
from support.txbuilders import T0

from events.inputs import ClaimTransaction, DeciderInput, ReleaseTransaction
from transactions.ownership import charged_to
from transactions.transaction import decide, handle, initial_state, record

LEASE_S = 60


def _session_input(kind: int, agent: int, session: int, n: int) -> DeciderInput:
    at = T0 + timedelta(seconds=n * 20)
    agent_id, session_id = f"agent-{agent}", f"s-{session}"
    if kind == 0:
        return ReleaseTransaction(
            message_id=f"release-{n}", tenant="demo", tx_id="tx-1", agent_id=agent_id,
            session_id=session_id, issued_at=at,
        )  # fmt: skip
    return ClaimTransaction(
        message_id=f"claim-{n}", tenant="demo", tx_id="tx-1", agent_id=agent_id,
        session_id=session_id, lease_s=LEASE_S, issued_at=at,
    )  # fmt: skip


@st.composite
def with_sessions(draw: st.DrawFn) -> list[DeciderInput]:
    """A decider scenario submitted by a session, with claims and releases (by the owner
    or a successor, before or after the lease lapses) put in anywhere."""
    inputs = draw(scenarios())
    first = inputs[0].model_copy(update={"session_id": "s-1", "lease_s": LEASE_S})
    mixed: list[DeciderInput] = [first]
    for n, message in enumerate(inputs[1:]):
        if draw(st.integers(0, 3)) == 0:
            kind, agent = draw(st.integers(0, 2)), draw(st.integers(1, 2))
            mixed.append(_session_input(kind, agent, agent, n))
        mixed.append(message)
    return mixed


@given(with_sessions())
def test_handle_gives_the_fold_of_record_and_charges_the_whole_decision(
    inputs: list[DeciderInput],
) -> None:
    state, rebuilt = initial_state("demo", "tx-1"), initial_state("demo", "tx-1")
    for message in inputs:
        before = state
        decided = decide(before, message)
        state, envelopes = handle(before, message)
        assert [e.event() for e in envelopes] == decided
        # Charged in two parts (the decision, then what follows from it) as one list would be.
        assert charged_to(before.agent_id, before.owner, decided) == decided
        for envelope in envelopes:
            rebuilt = record(rebuilt, envelope)
        assert rebuilt == state
