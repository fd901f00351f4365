"""Frozen vectors: changing these outputs would give in-flight operations new keys."""

from events.canonical import canonical_json, fingerprint
from events.drift import DriftKind
from events.inputs import Outcome, Source
from events.keys import (
    abort_id,
    approval_id,
    compensate_id,
    compensation_key,
    dispatch_observation_id,
    drift_id,
    event_id,
    lookup_observation_id,
    op_key,
    partition_key,
    plan_id,
    rejection_id,
    resolve_id,
    review_id,
    review_request_id,
    stale_rejection_id,
    submit_id,
    webhook_id,
)


def test_op_key_vector() -> None:
    key = op_key(
        tenant="demo", environment="dev", provider="sandbox", tx_id="order-42", action="charge"
    )
    assert key == "rk1_205fe8b494c1e29e52f2dca42cddcef2a9daae98"


def test_compensation_key_vector() -> None:
    assert compensation_key("rk1_0123") == "rc1_f48425b7ed9707ad1a5f1cb6a6e80d7de8596f84"


def test_op_key_depends_on_every_coordinate() -> None:
    base = {
        "tenant": "demo",
        "environment": "dev",
        "provider": "sandbox",
        "tx_id": "t",
        "action": "a",
    }
    keys = {op_key(**base)} | {op_key(**{**base, k: v + "x"}) for k, v in base.items()}  # type: ignore[arg-type]
    assert len(keys) == len(base) + 1


def test_canonical_json_ignores_key_order_and_spacing() -> None:
    assert canonical_json({"b": 1, "a": [1, {"d": "é", "c": None}]}) == (
        '{"a":[1,{"c":null,"d":"é"}],"b":1}'.encode()
    )
    assert fingerprint({"a": 1, "b": 2}) == fingerprint({"b": 2, "a": 1})
    assert fingerprint({"a": 1}) != fingerprint({"a": "1"})


def test_message_id_vectors() -> None:
    # The decider deduplicates on these ids and the log stores them (causation ids): a
    # changed derivation would make a retried command or a redelivered observation new.
    assert submit_id("demo", "order-42", "0123456789abcdef0123") == (
        "submit:demo:order-42:0123456789abcdef"
    )
    assert abort_id("demo", "order-42") == "abort:demo:order-42"
    assert resolve_id("rv_0123") == "resolve:rv_0123"
    assert plan_id("demo", "order-42") == "saga:plan:demo:order-42"
    assert compensate_id("demo", "order-42", "reserve") == "saga:compensate:demo:order-42:reserve"
    assert dispatch_observation_id("rk1_0123", 2, Source.LOOKUP.value, Outcome.ABSENT.value, 1) == (
        "rk1_0123:2:lookup:absent:1"
    )
    assert lookup_observation_id("rk1_0123", 2, 3) == "reconcile:rk1_0123:2:3"
    assert review_request_id("rk1_0123", 2) == "reconcile:rk1_0123:2:review"
    assert webhook_id("sandbox", "dlv-7") == "webhook:sandbox:dlv-7"
    assert rejection_id("order-42", "promote") == "reject-order-42-promote"


def test_approval_message_id_vectors() -> None:
    # The intake derived these in its route before they moved here: the same outputs, so an
    # approval or a stale rejection on the log keeps the id its derivation gives now.
    at = "2026-12-01T00:00:00+00:00"
    assert approval_id("demo", "order-42", "promote", "d" * 64, at) == (
        "ap_b78f597fcc014bea99d63728f6fa2b9e"
    )
    assert stale_rejection_id("demo", "order-42", "promote", "alice", at) == (
        "stale-54746d49d3697b86eb5bf39bc62f4923"
    )
    # One per request: a later request is a new command, not a duplicate the decider drops.
    later = "2026-12-01T00:00:01+00:00"
    assert stale_rejection_id("demo", "order-42", "promote", "alice", later) != (
        stale_rejection_id("demo", "order-42", "promote", "alice", at)
    )


def test_derived_id_vectors() -> None:
    assert partition_key("demo", "order-42") == b"demo/order-42"
    assert review_id("demo", "order-42", "charge", "forward", 1) == "rv_1127c98fb4a4ad137bfb97b4"
    assert event_id("demo", "order-42", 3) == "ev_6a8e5c47724b80113827e51fbda9e799"
    assert drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", "eff_1") == (
        "dr_b902968f39be0662e2a539ea"
    )
    # Found in tenant globex's own provider account (services.providers.accounts).
    assert drift_id(DriftKind.EFFECT_WITHOUT_INTENT, "sandbox", "eff_1", "globex") == (
        "dr_204ec2b03deef694a3fc105f"
    )
