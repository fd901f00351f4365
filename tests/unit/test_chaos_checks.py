"""The chaos verdict's checks: all green on a sound history, and each one red on a history
fabricated with the very fault it exists to catch."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

from events.definition import Compensation, Leg, OperationKind, OperationSpec
from events.envelope import GENESIS_HASH, seal
from events.inputs import Outcome, Source
from events.keys import compensation_key, op_key
from events.transaction_events import (
    CompensationPlanned,
    Event,
    Evidence,
    OperationCompensated,
    OperationConfirmed,
    OperationDispatched,
    OperationFailed,
    TransactionAccepted,
    TransactionCommitted,
    TransactionCompensated,
    TransactionFailed,
)
from services.devtools.chaos.checks import judge, table
from services.devtools.chaos.history import DriftReport, History, ProviderEffect, Submitted

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def spec(
    tx_id: str, action: str, operation: str, kind: OperationKind, compensation: str | None
) -> Any:
    key = op_key(tenant="demo", environment="dev", provider="sandbox", tx_id=tx_id, action=action)
    return OperationSpec(
        action=action,
        kind=kind,
        provider="sandbox",
        operation=operation,
        payload={},
        op_key=key,
        compensation=Compensation(operation=compensation) if compensation else None,
        compensation_key=compensation_key(key) if compensation else None,
    )


def steps(tx_id: str, *, third: bool = False) -> tuple[OperationSpec, ...]:
    ops = [
        spec(tx_id, "reserve", "inventory.reserve", OperationKind.STEP, "inventory.release"),
        spec(tx_id, "charge", "payments.charge", OperationKind.STEP, "payments.refund"),
    ]
    if third:
        ops.append(spec(tx_id, "deposit", "payments.charge", OperationKind.STEP, "payments.refund"))
    ops.append(spec(tx_id, "receipt", "email.send", OperationKind.ON_COMMIT, None))
    return tuple(ops)


def evidence(outcome: Outcome = Outcome.SUCCEEDED) -> Evidence:
    return Evidence(
        observation_id="ob", source=Source.RESPONSE, outcome=outcome, attempt=1, observed_at="x"
    )


def dispatched(op: OperationSpec, leg: Leg = Leg.FORWARD) -> OperationDispatched:
    compensation = leg is Leg.COMPENSATION
    return OperationDispatched(
        action=op.action,
        leg=leg,
        op_key=(op.compensation_key or "") if compensation else op.op_key,
        attempt=1,
        lookup_first=False,
        provider="sandbox",
        operation=op.compensation.operation if compensation and op.compensation else op.operation,
        payload={},
    )


def confirmed(op: OperationSpec) -> OperationConfirmed:
    return OperationConfirmed(action=op.action, attempt=1, remote_id="r", evidence=evidence())


def undone(op: OperationSpec, remaining: tuple[str, ...]) -> OperationCompensated:
    return OperationCompensated(
        action=op.action, attempt=1, remote_id="r", evidence=evidence(), remaining=remaining
    )


def sealed(tx_id: str, events: list[Event]) -> tuple[dict[str, Any], ...]:
    """Real envelopes, one second apart, chained as the decider chains them."""
    out: list[dict[str, Any]] = []
    prev = GENESIS_HASH
    for seq, event in enumerate(events):
        [envelope] = seal(
            tenant="demo",
            tx_id=tx_id,
            last_seq=seq,
            last_hash=prev,
            events=[event],
            causation_id=f"c{seq}",
            occurred_at=T0 + timedelta(seconds=seq),
        )
        prev = envelope.hash
        out.append(envelope.model_dump(mode="json"))
    return tuple(out)


def effect(key: str, operation: str, at: int, applied: int = 1) -> ProviderEffect:
    """Applied half a second after the event at `at` seconds."""
    created = T0 + timedelta(seconds=at, milliseconds=500)
    return ProviderEffect(f"ef_{key[-8:]}", operation, key, created, applied)


def committed_tx(tx_id: str) -> tuple[tuple[dict[str, Any], ...], list[ProviderEffect]]:
    reserve, charge, receipt = steps(tx_id)
    events: list[Event] = [
        TransactionAccepted(agent_id="a", fingerprint="f", operations=(reserve, charge, receipt)),
        dispatched(reserve),  # seq 2, t+1
        confirmed(reserve),
        dispatched(charge),
        confirmed(charge),
        TransactionCommitted(),  # seq 6, t+5
        dispatched(receipt),
        confirmed(receipt),
    ]
    effects = [
        effect(reserve.op_key, "inventory.reserve", 1),
        effect(charge.op_key, "payments.charge", 3),
        effect(receipt.op_key, "email.send", 6),
    ]
    return sealed(tx_id, events), effects


def compensated_events(tx_id: str, *, compensation_order: tuple[str, str]) -> list[Event]:
    reserve, charge, deposit, receipt = steps(tx_id, third=True)
    by_name = {"reserve": reserve, "charge": charge}
    first, second = (by_name[a] for a in compensation_order)
    return [
        TransactionAccepted(
            agent_id="a", fingerprint="f", operations=(reserve, charge, deposit, receipt)
        ),
        dispatched(reserve),
        confirmed(reserve),
        dispatched(charge),
        confirmed(charge),
        dispatched(deposit),
        OperationFailed(action="deposit", attempt=1, evidence=evidence(Outcome.REJECTED)),
        TransactionFailed(action="deposit", reason="rejected", compensable=("charge", "reserve")),
        CompensationPlanned(plan=compensation_order),
        dispatched(first, Leg.COMPENSATION),
        undone(first, (second.action,)),
        dispatched(second, Leg.COMPENSATION),
        undone(second, ()),
        TransactionCompensated(),
    ]


def compensated_tx(
    tx_id: str, compensation_order: tuple[str, str] = ("charge", "reserve")
) -> tuple[tuple[dict[str, Any], ...], list[ProviderEffect]]:
    reserve, charge, _, _ = steps(tx_id, third=True)
    by_name = {"reserve": reserve, "charge": charge}
    compensation_ops = {"reserve": "inventory.release", "charge": "payments.refund"}
    effects = [
        effect(reserve.op_key, "inventory.reserve", 1),
        effect(charge.op_key, "payments.charge", 3),
    ]
    for i, action in enumerate(compensation_order):
        key = by_name[action].compensation_key or ""
        effects.append(effect(key, compensation_ops[action], 9 + 2 * i))
    return sealed(tx_id, compensated_events(tx_id, compensation_order=compensation_order)), effects


def good_history() -> History:
    committed, effects_a = committed_tx("tx-a")
    compensated, effects_b = compensated_tx("tx-b")
    return History(
        submitted=(Submitted("tx-a", "happy", True), Submitted("tx-b", "decline-third", True)),
        events={"tx-a": committed, "tx-b": compensated},
        effects=(*effects_a, *effects_b),
    )


def failures(history: History) -> dict[str, int]:
    verdict = judge(history)
    found = {name: len(items) for name, items in verdict.problems.items() if items}
    if not verdict.chains_valid:
        found["chains"] = 1
    if not verdict.projections_equal:
        found["projections"] = 1
    return found


def test_a_sound_history_passes_every_check() -> None:
    verdict = judge(good_history())
    assert verdict.ok, table(verdict)
    assert verdict.outcomes == {"committed": 1, "compensated": 1}
    assert "VERDICT: PASS" in table(verdict)


def test_a_duplicate_apply_at_the_provider_fails() -> None:
    history = good_history()
    charge = history.effects[1]
    twice = dataclasses.replace(charge, applied_calls=2)
    bad = dataclasses.replace(history, effects=(twice, *history.effects[2:], history.effects[0]))
    assert failures(bad) == {"duplicate effects": 1}
    assert "VERDICT: FAIL" in table(judge(bad))


def test_a_stuck_transaction_fails() -> None:
    history = good_history()
    # The charge went out and nothing more is known: in flight for ever (and, truthfully,
    # the provider holds no charge and no receipt).
    bad = dataclasses.replace(
        history,
        events={**history.events, "tx-a": history.events["tx-a"][:4]},
        effects=(history.effects[0], *history.effects[3:]),
    )
    assert failures(bad) == {"stuck": 1}


def test_a_lost_intent_fails() -> None:
    history = good_history()
    bad = dataclasses.replace(
        history, submitted=(*history.submitted, Submitted("tx-c", "happy", True))
    )
    assert failures(bad) == {"lost": 1}
    # An intent that was never answered 2xx is no promise: not lost.
    refused = dataclasses.replace(
        history, submitted=(*history.submitted, Submitted("tx-c", "happy", False))
    )
    assert failures(refused) == {}


def test_a_notification_before_commit_fails() -> None:
    tx_id = "tx-a"
    reserve, charge, receipt = steps(tx_id)
    early: list[Event] = [
        TransactionAccepted(agent_id="a", fingerprint="f", operations=(reserve, charge, receipt)),
        dispatched(reserve),
        confirmed(reserve),
        dispatched(charge),
        dispatched(receipt),  # the receipt before the commit
        confirmed(charge),
        TransactionCommitted(),
        confirmed(receipt),
    ]
    history = good_history()
    bad = dataclasses.replace(history, events={**history.events, tx_id: sealed(tx_id, early)})
    assert failures(bad) == {"notifications before commit": 1}


def test_a_receipt_applied_before_the_commit_at_the_provider_fails() -> None:
    history = good_history()
    receipt = history.effects[2]
    earlier = dataclasses.replace(receipt, created_at=receipt.created_at - timedelta(seconds=3))
    bad = dataclasses.replace(
        history, effects=tuple(earlier if e is receipt else e for e in history.effects)
    )
    assert failures(bad) == {"notifications before commit": 1}


def test_undos_in_the_wrong_order_fail() -> None:
    history = good_history()
    wrong, effects = compensated_tx("tx-b", compensation_order=("reserve", "charge"))
    bad = dataclasses.replace(
        history,
        events={**history.events, "tx-b": wrong},
        effects=(*history.effects[:3], *effects),
    )
    assert failures(bad) == {"compensations out of order": 1}


def test_undos_applied_out_of_order_at_the_provider_fail() -> None:
    history = good_history()
    refund, release = history.effects[-2:]
    swapped = (
        dataclasses.replace(refund, created_at=release.created_at),
        dataclasses.replace(release, created_at=refund.created_at),
    )
    bad = dataclasses.replace(history, effects=(*history.effects[:-2], *swapped))
    assert failures(bad) == {"compensations out of order": 1}


def test_an_effect_nobody_asked_for_fails_unless_drift_reported_it() -> None:
    history = good_history()
    stray = ProviderEffect("ef_stray", "payments.charge", "someone-else", T0)
    bad = dataclasses.replace(history, effects=(*history.effects, stray))
    assert failures(bad) == {"unaccounted effects": 1}
    reported = dataclasses.replace(
        bad, drift=(DriftReport("dr_1", "effect_without_intent", "ef_stray", None),)
    )
    assert failures(reported) == {}


def test_a_commit_without_every_step_confirmed_fails() -> None:
    tx_id = "tx-a"
    reserve, charge, receipt = steps(tx_id)
    hasty: list[Event] = [
        TransactionAccepted(agent_id="a", fingerprint="f", operations=(reserve, charge, receipt)),
        dispatched(reserve),
        confirmed(reserve),
        TransactionCommitted(),
        dispatched(charge),
        confirmed(charge),
        dispatched(receipt),
        confirmed(receipt),
    ]
    history = good_history()
    bad = dataclasses.replace(history, events={**history.events, tx_id: sealed(tx_id, hasty)})
    assert "committed with a step unconfirmed" in failures(bad)


def test_a_tampered_chain_and_unequal_projections_fail() -> None:
    history = good_history()
    envelopes = list(history.events["tx-a"])
    envelopes[2] = {**envelopes[2], "data": {**envelopes[2]["data"], "remote_id": "forged"}}
    bad = dataclasses.replace(history, events={**history.events, "tx-a": tuple(envelopes)})
    assert failures(bad) == {"broken chains (collected log)": 1, "chains": 1}
    assert failures(dataclasses.replace(history, audit_verify_ok=False)) == {"chains": 1}
    assert failures(dataclasses.replace(history, rebuild_compare_ok=False)) == {"projections": 1}


def test_an_effect_under_review_is_accounted_only_by_evidence_of_it() -> None:
    from events.transaction_events import (
        ObservationIgnored,
        OperationNeedsReview,
        TransactionNeedsReview,
    )

    tx_id = "tx-r"
    reserve, charge, receipt = steps(tx_id)
    charged = ProviderEffect("ch_late", "payments.charge", charge.op_key, T0 + timedelta(seconds=9))

    def history(seen: str | None) -> History:
        events: list[Event] = [
            TransactionAccepted(
                agent_id="a", fingerprint="f", operations=(reserve, charge, receipt)
            ),
            dispatched(reserve),
            confirmed(reserve),
            dispatched(charge),
            OperationNeedsReview(
                action="charge", attempt=1, reason="attempt_budget_exhausted", review_id="rv"
            ),
            TransactionNeedsReview(action="charge", reason="attempt_budget_exhausted"),
        ]
        if seen is not None:
            late = evidence().model_copy(update={"remote_id": seen})
            events.append(
                ObservationIgnored(
                    action="charge",
                    attempt=1,
                    current_attempt=1,
                    reason="operation_manual_review",
                    evidence=late,
                )
            )
        return History(
            submitted=(Submitted(tx_id, "happy", True),),
            events={tx_id: sealed(tx_id, events)},
            effects=(effect(reserve.op_key, "inventory.reserve", 1), charged),
        )

    assert failures(history("ch_late")) == {}
    assert judge(history("ch_late")).reviews == [
        f"{tx_id}: charge forward: attempt_budget_exhausted"
    ]
    assert failures(history(None)) == {"unaccounted effects": 1}
    assert failures(history("ch_other")) == {"unaccounted effects": 1}
