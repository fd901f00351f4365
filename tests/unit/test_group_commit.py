"""Which decisions the decider may stage for the partition's next Kafka transaction, and how
long they may wait (services.decider.group_commit), and how the wait is configured."""

import pytest
from support.txbuilders import compensated_history, observed, submit

from events.inputs import DeciderInput, Outcome, Source
from events.transaction_events import Event
from services.config import ConfigError, load_settings
from services.decider.group_commit import (
    IDLE_SPACING_S,
    MAX_STRETCH,
    QUICK_S,
    SPACING,
    backlog,
    interval,
    next_start,
    nobody_waits,
    spacing_bound,
)
from transactions.state import TransactionState
from transactions.transaction import handled, initial_state


def _decided(history: list[DeciderInput]) -> list[tuple[list[Event], TransactionState]]:
    """Each input's decided events, with the state after them, along `history`."""
    state, out = initial_state("demo", "tx-1"), []
    for message in history:
        state, _, events = handled(state, message)
        out.append((events, state))
    return out


COMMITTED: list[DeciderInput] = [
    submit(["reserve", "charge"], ("receipt",)),
    observed("reserve", 1, Outcome.SUCCEEDED),
    observed("reserve", 0, Outcome.SUCCEEDED, n=2, source=Source.WEBHOOK),
    observed("charge", 1, Outcome.SUCCEEDED),
    observed("receipt", 1, Outcome.SUCCEEDED),
    observed("receipt", 0, Outcome.SUCCEEDED, n=3, source=Source.WEBHOOK),
]


def test_evidence_and_a_notification_s_confirmation_are_staged() -> None:
    """Only what nobody waits for waits: evidence, a notification confirmed (after the
    outcome; nothing follows it). A step's answer and the commit commit at once."""
    waits = [nobody_waits(events, state) for events, state in _decided(COMMITTED)]
    assert waits == [False, False, True, False, True, True]
    compensated = _decided(compensated_history())
    assert [nobody_waits(e, s) for e, s in compensated][-2:] == [False, True]
    assert nobody_waits([], initial_state("demo", "tx-1"))  # only its offset to commit


def test_a_notification_that_did_not_succeed_commits_at_once() -> None:
    """Failed or unknown, a notification is retried, looked up or reviewed: someone acts."""
    for outcome in (Outcome.REJECTED, Outcome.UNKNOWN):
        events, state = _decided([*COMMITTED[:4], observed("receipt", 1, outcome)])[-1]
        assert events and not nobody_waits(events, state), outcome


def _wait(
    fetched: int,
    partitions: int,
    idle: float = 0.005,
    *,
    coming: bool = False,
    finished: bool = False,
) -> float:
    return interval(idle, fetched, partitions, answer_coming=coming, only_finished=finished)


def test_the_wait_is_the_idle_interval_and_grows_with_the_backlog_up_to_a_bound() -> None:
    assert _wait(0, 4) == 0.005
    assert _wait(4, 4) == 0.005  # one per partition: no backlog
    assert _wait(12, 4) == pytest.approx(0.015)
    assert _wait(10_000, 4) == pytest.approx(0.005 * MAX_STRETCH)
    assert _wait(3, 0) == pytest.approx(0.015)  # owning nothing
    assert _wait(400, 4, 0.0) == 0.0  # 0: group commit off
    # A call of the partition in flight: its answer will carry the evidence; waited for.
    assert _wait(0, 4, coming=True) == pytest.approx(0.005 * MAX_STRETCH)
    assert _wait(0, 4, 0.0, coming=True) == 0.0


def test_evidence_only_for_finished_transactions_waits_the_longest() -> None:
    """A webhook a provider sent seconds late finds its transaction ended and the partition
    idle: nothing reads it to move on, so it waits to ride with the partition's next."""
    assert _wait(0, 4, finished=True) == pytest.approx(0.005 * MAX_STRETCH)
    assert _wait(10_000, 4, finished=True) == pytest.approx(0.005 * MAX_STRETCH)  # no longer
    assert _wait(0, 4, 0.0, finished=True) == 0.0


def test_an_urgent_transaction_starts_at_once_but_not_back_to_back_with_the_last() -> None:
    # Idle: the partition's last transaction ended long before the decision.
    assert next_start(due=10.0, ended_at=1.0, took_s=0.02, bound_s=0.1) == 10.0
    # Busy: decided while the last one was on the wire, or just after it ended.
    assert next_start(due=1.0, ended_at=1.01, took_s=0.02, bound_s=0.1) == pytest.approx(
        1.01 + SPACING * 0.02
    )
    # A slow broker spaces them no further than the bound.
    assert next_start(due=1.0, ended_at=1.01, took_s=5.0, bound_s=0.1) == pytest.approx(1.11)
    # Never before the first partition's transaction has ended.
    assert next_start(due=0.5, ended_at=0.0, took_s=0.0, bound_s=0.1) == 0.5


def test_without_a_backlog_only_the_markers_are_waited_for() -> None:
    assert not backlog(4, 4)  # one record per partition
    assert backlog(5, 4)
    assert backlog(2, 0)  # owning nothing yet
    quick, slow = QUICK_S / 2, QUICK_S * 2
    # Under a backlog the spacing may reach MAX_STRETCH idle intervals, to gather inputs.
    assert spacing_bound(0.1, 40, 4, quick, alone=False) == pytest.approx(0.1 * MAX_STRETCH)
    assert spacing_bound(0.1, 40, 4, slow, alone=True) == pytest.approx(0.1 * MAX_STRETCH)
    # So it may after a slow transaction (a loaded broker) while other partitions have
    # decisions that matter, even when fetches are small.
    assert spacing_bound(0.1, 3, 4, slow, alone=False) == pytest.approx(0.1 * MAX_STRETCH)
    # Idle: nothing will come to ride with the decision; it waits only for the markers.
    assert spacing_bound(0.1, 3, 4, quick, alone=False) == IDLE_SPACING_S
    # Alone, after a slow transaction too: at concurrency 1 nothing rides either.
    assert spacing_bound(0.1, 3, 4, slow, alone=True) == IDLE_SPACING_S
    assert spacing_bound(0.0005, 3, 4, quick, alone=True) == pytest.approx(0.0005 * MAX_STRETCH)
    # The answer of a 4 ms call after an 8 ms transaction starts when it comes, not 4 ms later.
    ended, took = 1.0, 0.008
    start = next_start(ended + 0.004, ended, took, spacing_bound(0.1, 1, 4, took, alone=False))
    assert start == pytest.approx(ended + 0.004)
    start = next_start(ended + 0.001, ended, took, spacing_bound(0.1, 1, 4, took, alone=False))
    assert start == pytest.approx(ended + IDLE_SPACING_S)
    # The answer of a 30 ms call after a 200 ms transaction (a loaded machine), alone: at once.
    ended, took = 1.0, 0.2
    start = next_start(ended + 0.03, ended, took, spacing_bound(0.1, 1, 4, took, alone=True))
    assert start == pytest.approx(ended + 0.03)


def test_the_wait_is_read_in_milliseconds_and_refused_out_of_range(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("RECON_DECIDER_GROUP_COMMIT_MS", "20")
    assert load_settings().decider_group_commit_s == pytest.approx(0.02)
    monkeypatch.setenv("RECON_DECIDER_GROUP_COMMIT_MS", "0")
    assert load_settings().decider_group_commit_s == 0
    for bad in ("-1", "1001", "soon"):
        monkeypatch.setenv("RECON_DECIDER_GROUP_COMMIT_MS", bad)
        with pytest.raises(ConfigError, match="RECON_DECIDER_GROUP_COMMIT_MS"):
            load_settings()
