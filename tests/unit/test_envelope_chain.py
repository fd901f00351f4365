"""The hash chain detects a removed, reordered or altered event."""

from support.txbuilders import observed, submit

from events.envelope import Envelope, verify_chain
from events.inputs import Outcome
from transactions.transaction import handle, initial_state


def chain() -> list[Envelope]:
    state, log = initial_state("demo", "tx-1"), []
    for message in (
        submit(["a", "b"], ("n",)),
        observed("a", 1, Outcome.SUCCEEDED),
        observed("b", 1, Outcome.SUCCEEDED, 1),
    ):
        state, envelopes = handle(state, message)
        log += envelopes
    return log


def test_intact_chain_verifies() -> None:
    log = chain()
    assert len(log) >= 6 and verify_chain(log) == []


def test_removed_event_is_detected() -> None:
    log = chain()
    assert verify_chain(log[:2] + log[3:]) != []


def test_altered_event_is_detected() -> None:
    log = chain()
    tampered = log[1].model_copy(update={"data": {**log[1].data, "attempt": 7}})
    assert verify_chain([log[0], tampered, *log[2:]]) != []


def test_reordered_events_are_detected() -> None:
    log = chain()
    assert verify_chain([log[0], log[2], log[1], *log[3:]]) != []


def test_one_removed_event_is_reported_once() -> None:
    log = chain()
    problems = [str(p) for p in verify_chain(log[:2] + log[3:])]
    assert problems == [
        f"seq {log[3].seq} where 3 was expected",
        f"seq {log[3].seq}: prev_hash does not match the previous event",
    ]
