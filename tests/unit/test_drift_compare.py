"""The drift scan's comparison, one kind at a time."""

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from events.definition import Leg
from events.drift import DriftDetected, DriftKind, drift_id
from reconcilers.drift import Effect, LedgerEntry, UnreadableEffect, compare, effect_from_json
from services.providers.interface import NOTHING_COVERED

NOW = datetime(2025, 1, 2, tzinfo=UTC)
WINDOW = NOW - timedelta(days=1)
GRACE = timedelta(seconds=60)
CHARGE = {"amount": 1299, "currency": "usd", "customer": "cus_1"}


def entry(
    op_key: str = "rk1_a",
    *,
    confirmed: bool = True,
    age_s: float = 600,
    failed: bool = False,
    leg: Leg = Leg.FORWARD,
) -> LedgerEntry:
    return LedgerEntry(
        tenant="demo",
        tx_id="tx-1",
        action="charge",
        leg=leg,
        op_key=op_key,
        provider="sandbox",
        operation="payments.charge",
        payload=CHARGE,
        dispatched_at=NOW - timedelta(seconds=age_s),
        confirmed=confirmed,
        failed=failed,
    )


def effect(
    key: str = "rk1_a", payload: dict[str, object] | None = None, age_s: float = 590
) -> Effect:
    return Effect(
        id=f"ch_{key}",
        operation="payments.charge",
        idempotency_key=key,
        payload=dict(CHARGE) if payload is None else payload,
        created_at=NOW - timedelta(seconds=age_s),
    )


def scan(
    effects: list[Effect],
    ledger: list[LedgerEntry],
    known: set[str] | None = None,
    covered_from: datetime | None = None,
) -> list[DriftDetected]:
    return compare(
        provider="sandbox",
        effects=effects,
        ledger=ledger,
        known_keys=known or set(),
        now=NOW,
        window_start=WINDOW,
        grace=GRACE,
        covered_from=covered_from,
    )


def test_matching_effect_and_intent_is_no_drift() -> None:
    assert scan([effect()], [entry()]) == []


def test_effect_without_intent() -> None:
    [found] = scan([effect("someone-else")], [])
    assert found.kind is DriftKind.EFFECT_WITHOUT_INTENT
    assert found.drift_id == drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", "ch_someone-else")
    assert found.effect_id == "ch_someone-else" and found.tenant is None
    assert found.detail["idempotency_key"] == "someone-else"


def test_an_effect_within_the_grace_period_is_not_yet_without_intent() -> None:
    # The ledger comes from projections that may lag the provider: a fresh effect may be
    # one whose dispatch the projector has not written yet.
    assert scan([effect("someone-else", age_s=59)], []) == []
    [found] = scan([effect("someone-else", age_s=60)], [])
    assert found.kind is DriftKind.EFFECT_WITHOUT_INTENT


def test_an_effect_under_an_old_intent_key_is_not_drift() -> None:
    # Dispatched before the window, so not in the ledger, but the key is recon's.
    assert scan([effect("rk1_old")], [], known={"rk1_old"}) == []


def test_an_effect_older_than_the_window_is_not_scanned() -> None:
    assert scan([effect("someone-else", age_s=2 * 86400)], []) == []


def test_intent_without_effect() -> None:
    [found] = scan([], [entry()])
    assert found.kind is DriftKind.INTENT_WITHOUT_EFFECT
    assert found.drift_id == drift_id(DriftKind.INTENT_WITHOUT_EFFECT, "sandbox", "rk1_a")
    assert (found.tenant, found.tx_id, found.action, found.op_key) == (
        "demo",
        "tx-1",
        "charge",
        "rk1_a",
    )


def test_no_intent_without_effect_within_grace_or_unconfirmed() -> None:
    assert scan([], [entry(age_s=30)]) == []
    assert scan([], [entry(confirmed=False)]) == []


def test_amount_mismatch_is_named() -> None:
    [found] = scan([effect(payload={**CHARGE, "amount": 1300})], [entry()])
    assert found.kind is DriftKind.MISMATCH
    assert found.drift_id == drift_id(DriftKind.MISMATCH, "sandbox", "ch_rk1_a")
    assert found.detail["fields"] == ["amount"]
    assert found.detail["amount"] == {"recon": 1299, "provider": 1300}


def test_payload_mismatch_without_amount() -> None:
    [found] = scan([effect(payload={**CHARGE, "customer": "cus_2", "extra": 1})], [entry()])
    assert found.kind is DriftKind.MISMATCH
    assert found.detail["fields"] == ["customer", "extra"]
    assert "amount" not in found.detail


def test_the_same_drift_has_the_same_id_on_every_scan() -> None:
    effects, ledger = [effect("x"), effect(payload={"amount": 1})], [entry(), entry("rk1_b")]
    first = scan(effects, ledger)
    later = compare(
        provider="sandbox",
        effects=effects,
        ledger=ledger,
        known_keys=set(),
        now=NOW + timedelta(minutes=5),
        window_start=WINDOW,
        grace=GRACE,
    )
    assert [d.drift_id for d in first] == [d.drift_id for d in later]
    assert sorted(d.kind.value for d in first) == [
        "effect_without_intent",
        "intent_without_effect",
        "mismatch",
    ]


def test_effect_from_the_providers_json() -> None:
    parsed = effect_from_json(
        {
            "id": "ch_1",
            "operation": "payments.charge",
            "idempotency_key": "k",
            "payload": CHARGE,
            "status": "succeeded",
            "created_at": "2025-01-01T00:00:00.000000Z",
        }
    )
    assert parsed.created_at == datetime(2025, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    "change",
    [
        {"created_at": "2025-01-01T00:00:00"},
        {"created_at": None},
        {"idempotency_key": None},
        {"id": None},
        {"id": ""},  # would name the drift it reports after nothing
    ],
)
def test_an_item_without_a_zoned_time_a_key_or_an_id_is_unreadable(change: dict[str, Any]) -> None:
    # A naive time is no instant: inside or outside the window would be a guess.
    raw: dict[str, Any] = {"id": "ch_1", "operation": "payments.charge", "idempotency_key": "k"}
    raw |= {"payload": CHARGE, "created_at": "2025-01-01T00:00:00Z"} | change
    raw = {k: v for k, v in raw.items() if v is not None}
    with pytest.raises(UnreadableEffect):
        effect_from_json(raw)


def test_an_effect_under_a_failed_operations_key_is_effect_after_failure() -> None:
    # Recon holds the charge failed (refused, or resolved not_applied), the provider holds
    # the charge: the customer paid for something recon calls failed.
    [found] = scan([effect()], [entry(confirmed=False, failed=True)])
    assert found.kind is DriftKind.EFFECT_AFTER_FAILURE
    assert found.drift_id == drift_id(DriftKind.EFFECT_AFTER_FAILURE, "sandbox", "ch_rk1_a")
    assert (found.tenant, found.tx_id, found.action, found.op_key, found.effect_id) == (
        "demo",
        "tx-1",
        "charge",
        "rk1_a",
        "ch_rk1_a",
    )
    assert found.detail["operation"] == "payments.charge"
    assert found.detail["provider"]["payload"] == CHARGE
    assert found.detail["fields"] == []


def test_an_effect_after_failure_with_another_payload_is_reported_once() -> None:
    found = scan([effect(payload={**CHARGE, "amount": 1})], [entry(confirmed=False, failed=True)])
    assert [(d.kind, d.detail["fields"]) for d in found] == [
        (DriftKind.EFFECT_AFTER_FAILURE, ["amount"])
    ]


def test_a_compensated_step_has_its_effect_and_its_undo_and_is_no_drift() -> None:
    ledger = [entry("rk1_a"), entry("rk1_undo", leg=Leg.COMPENSATION)]
    compensation = Effect(
        id="re_1",
        operation="payments.charge",
        idempotency_key="rk1_undo",
        payload=dict(CHARGE),
        created_at=NOW - timedelta(seconds=500),
    )
    assert scan([effect(), compensation], ledger) == []


def test_a_cut_listing_proves_no_effect_absent_for_a_leg_older_than_the_cut() -> None:
    # A listing cut by a page cap holds the effects created after `covered_from` only (the
    # newest): the effect of a leg dispatched before it may be one it left out, which the
    # scan once reported as "confirmed without effect", drift that was not there.
    cut = NOW - timedelta(seconds=1000)
    assert scan([], [entry(age_s=2000)], covered_from=cut) == []
    # Within the grace after the cut, too: the provider's clock may differ from recon's.
    assert scan([], [entry(age_s=1000 - 59)], covered_from=cut) == []
    # A leg dispatched well after the cut is covered: its missing effect is drift.
    [found] = scan([], [entry(age_s=600)], covered_from=cut)
    assert found.kind is DriftKind.INTENT_WITHOUT_EFFECT


def test_compare_judges_a_missing_effect_from_the_cuts_edge_exactly() -> None:
    # reconcilers.drift.covers decides; compare must ask it for every leg it would report
    # (the runtime reads no older leg from the ledger, but compare's other callers may).
    cut = NOW - timedelta(seconds=1000)
    at_the_edge = replace(entry(), dispatched_at=cut + GRACE)
    just_after = replace(entry(), dispatched_at=cut + GRACE + timedelta(microseconds=1))
    assert scan([], [at_the_edge], covered_from=cut) == []
    [found] = scan([], [just_after], covered_from=cut)
    assert found.kind is DriftKind.INTENT_WITHOUT_EFFECT
    # Unknown order: a cut that covers nothing, however recent the leg.
    assert scan([], [entry(age_s=GRACE.total_seconds())], covered_from=NOTHING_COVERED) == []


def test_an_effect_a_cut_listing_holds_is_still_judged() -> None:
    cut = NOW - timedelta(seconds=1000)
    altered = effect("rk1_a", payload={**CHARGE, "amount": 1300}, age_s=1990)
    stray = effect("someone-else", age_s=700)
    found = scan([altered, stray], [entry("rk1_a", age_s=2000)], covered_from=cut)
    assert sorted(d.kind for d in found) == [DriftKind.EFFECT_WITHOUT_INTENT, DriftKind.MISMATCH]
