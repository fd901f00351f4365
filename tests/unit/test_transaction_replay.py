"""`replay` (transactions.transaction): the state the intake judges a command on is the
decider's own, from the events alone: a fold of `record` less only what the envelopes add
(the chain's seq and hash, the input ids)."""

from hypothesis import given
from support.decider_scenarios import scenarios

from events.envelope import GENESIS_HASH
from events.inputs import DeciderInput
from transactions.transaction import handle, initial_state, replay


@given(scenarios())
def test_replaying_the_events_gives_the_deciders_state_but_for_the_chain(
    inputs: list[DeciderInput],
) -> None:
    state, log = initial_state("demo", "tx-1"), []
    for message in inputs:
        state, envelopes = handle(state, message)
        log += envelopes

    replayed = replay("demo", "tx-1", [envelope.event() for envelope in log])

    assert replayed == state.model_copy(update={"seq": 0, "last_hash": GENESIS_HASH, "seen": ()})
