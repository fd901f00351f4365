"""The drift scan's span per account (reconcilers.drift_span) and compare's rule that each
effect and each leg is judged once: from the account's cursor, past its grace."""

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.definition import Leg
from events.drift import DriftKind
from reconcilers.drift import Effect, LedgerEntry, compare
from reconcilers.drift_span import backstop_due, span
from services.config import ConfigError, load_settings

NOW = datetime(2026, 12, 5, 12, tzinfo=UTC)
WINDOW = timedelta(days=1)
GRACE = timedelta(seconds=60)
CHARGE = {"amount": 1299, "currency": "usd"}


def test_an_account_never_scanned_whole_is_judged_over_the_window() -> None:
    judged = span(None, NOW, WINDOW, GRACE)
    assert judged.judged_from == NOW - WINDOW
    assert judged.judged_to == NOW - GRACE
    assert judged.ask_since == NOW - WINDOW - GRACE


def test_a_scan_asks_from_its_cursor_less_the_grace() -> None:
    cursor = NOW - timedelta(minutes=2)
    judged = span(cursor, NOW, WINDOW, GRACE)
    assert (judged.judged_from, judged.ask_since) == (cursor, cursor - GRACE)


def test_a_cursor_older_than_the_window_starts_at_the_window() -> None:
    assert span(NOW - timedelta(days=3), NOW, WINDOW, GRACE).judged_from == NOW - WINDOW


def test_the_cursor_moves_over_a_whole_listing_alone() -> None:
    judged = span(NOW - timedelta(minutes=2), NOW, WINDOW, GRACE)
    assert judged.advanced(whole=True) == NOW - GRACE
    assert judged.advanced(whole=False) is None


@given(
    st.lists(st.integers(min_value=1, max_value=600), min_size=1, max_size=20),
    st.integers(min_value=0, max_value=100_000),
)
def test_successive_whole_scans_judge_every_instant_once(gaps_s: list[int], at_s: int) -> None:
    """Scans at increasing instants, each whole: the spans tile time without gap or overlap,
    so an effect or a leg at any instant is judged by exactly one of them."""
    cursor, now = None, NOW
    spans = []
    for gap in gaps_s:
        now += timedelta(seconds=gap)
        judged = span(cursor, now, WINDOW, GRACE)
        spans.append((judged.judged_from, judged.judged_to))
        cursor = judged.advanced(whole=True)
    instant = spans[0][0] + timedelta(seconds=at_s)
    if instant < spans[-1][1]:
        assert sum(start <= instant < end for start, end in spans) == 1


def _entry(dispatched_at: datetime) -> LedgerEntry:
    return LedgerEntry(
        tenant="demo",
        tx_id="tx-1",
        action="charge",
        leg=Leg.FORWARD,
        op_key="rk1_a",
        provider="sandbox",
        operation="payments.charge",
        payload=CHARGE,
        dispatched_at=dispatched_at,
        confirmed=True,
    )


def _effect(key: str, created_at: datetime, payload: dict[str, object] = CHARGE) -> Effect:
    return Effect(
        id=f"ch_{key}",
        operation="payments.charge",
        idempotency_key=key,
        payload=dict(payload),
        created_at=created_at,
    )


def _judge(effects: list[Effect], ledger: list[LedgerEntry], cursor: datetime) -> list[DriftKind]:
    found = compare(
        provider="sandbox",
        effects=effects,
        ledger=ledger,
        known_keys=set(),
        now=NOW,
        window_start=cursor,
        grace=GRACE,
    )
    return [d.kind for d in found]


def test_what_came_before_the_cursor_is_not_judged_again() -> None:
    cursor = NOW - timedelta(minutes=5)
    before = cursor - timedelta(seconds=1)
    assert _judge([_effect("stray", before)], [], cursor) == []
    assert _judge([], [_entry(before)], cursor) == []
    mismatched = _effect("rk1_a", before, {**CHARGE, "amount": 1})
    assert _judge([mismatched], [_entry(before)], cursor) == []
    # At the cursor and after, past the grace: judged.
    at = cursor
    assert _judge([_effect("stray", at)], [], cursor) == [DriftKind.EFFECT_WITHOUT_INTENT]
    assert _judge([], [_entry(at)], cursor) == [DriftKind.INTENT_WITHOUT_EFFECT]
    mismatched = _effect("rk1_a", at, {**CHARGE, "amount": 1})
    assert _judge([mismatched], [_entry(at)], cursor) == [DriftKind.MISMATCH]


def test_an_effect_within_its_grace_is_judged_by_a_later_scan_and_still_proves_its_leg() -> None:
    cursor = NOW - timedelta(minutes=5)
    young = NOW - GRACE / 2
    mismatched = _effect("rk1_a", young, {**CHARGE, "amount": 1})
    # Not a mismatch yet, and not "without effect" either: its key is listed.
    assert _judge([mismatched], [_entry(NOW - timedelta(minutes=2))], cursor) == []


def test_every_nth_scan_of_a_process_is_a_backstop_its_first_included() -> None:
    # The first: a reconciler restarted more often than every N scans still runs one.
    assert [n for n in range(10) if backstop_due(n, every=4)] == [0, 4, 8]
    assert all(backstop_due(n, every=1) for n in range(5))  # 1: every scan is whole


def test_the_backstops_period_is_a_bounded_whole_number(monkeypatch: pytest.MonkeyPatch) -> None:
    assert load_settings().reconciler.drift_backstop_every == 60
    monkeypatch.setenv("RECON_DRIFT_BACKSTOP_EVERY", "1")
    assert load_settings().reconciler.drift_backstop_every == 1
    for bad in ("0", "100001", "hourly", "-5"):
        monkeypatch.setenv("RECON_DRIFT_BACKSTOP_EVERY", bad)
        with pytest.raises(ConfigError, match="RECON_DRIFT_BACKSTOP_EVERY"):
            load_settings()
