"""reconcilers.webhook_reading.read_effect_webhook (recon's own format) refuses what it
cannot read with a WebhookBodyError (a 400), never another exception (a 500 the provider
retries forever), and reads another event type as a type alone."""

import json
from datetime import UTC, datetime

import pytest
from support.unencodable_bodies import UNENCODABLE_BODIES

from events.drift import DriftDetected, DriftKind, drift_id
from events.inputs import OperationObserved
from reconcilers.webhook_intake import MatchedOperation, meaning
from reconcilers.webhook_reading import (
    EffectNotice,
    WebhookBodyError,
    WebhookReading,
    load_body,
    read_effect_webhook,
)


def test_a_webhook_body_nested_too_deeply_is_refused_not_a_crash() -> None:
    # 60 000 levels fit the 64 KiB webhook cap; json.loads gives up with RecursionError.
    deep = b'{"type": "effect.succeeded", "data": ' + b"[" * 60_000 + b"]" * 60_000 + b"}"

    with pytest.raises(WebhookBodyError, match="nested too deeply"):
        read_effect_webhook(deep)


@pytest.mark.parametrize(
    ("body", "why"),
    [
        (b"not json", "not JSON"),
        (b"[1, 2]", "JSON object"),
        (b'{"data": {}}', 'string "type"'),
    ],
)
def test_the_one_loader_refuses_a_body_that_is_no_event(body: bytes, why: str) -> None:
    with pytest.raises(WebhookBodyError, match=why):
        load_body(body)


def test_an_event_type_recon_does_not_act_on_is_read_as_its_type_alone() -> None:
    reading = read_effect_webhook(b'{"type": "effect.deleted", "data": "anything"}')
    assert reading == WebhookReading("effect.deleted")


def _notice(idempotency_key: str | None, meta_key: str | None) -> EffectNotice:
    effect: dict[str, object] = {"id": "ch_1", "operation": "payments.charge"}
    if idempotency_key is not None:
        effect["idempotency_key"] = idempotency_key
    if meta_key is not None:
        effect["metadata"] = {"op_key": meta_key}
    notice = read_effect_webhook(
        json.dumps({"type": "effect.succeeded", "data": {"effect": effect}}).encode()
    ).notice
    assert notice is not None
    return notice


OP = MatchedOperation(tenant="acme", tx_id="tx", action="charge", op_key="rk1_mine")
NOW = datetime(2026, 12, 1, tzinfo=UTC)


def test_the_metadata_op_key_is_never_a_key_to_match_on() -> None:
    # Given an effect anyone could create at the provider, naming acme's op key
    notice = _notice("their-own-key", "rk1_mine")
    # Then only the idempotency key is looked up
    assert notice.keys == ("their-own-key",)
    assert _notice(None, "rk1_mine").keys == ()


def test_a_notice_is_an_observation_only_when_its_keys_agree() -> None:
    agreeing = meaning("sandbox", None, "d1", _notice("rk1_mine", "rk1_mine"), OP, NOW)
    assert isinstance(agreeing, OperationObserved) and agreeing.op_key == "rk1_mine"
    no_metadata = meaning("sandbox", None, "d2", _notice("rk1_mine", None), OP, NOW)
    assert isinstance(no_metadata, OperationObserved)
    disagreeing = meaning("sandbox", None, "d3", _notice("rk1_mine", "rk1_other"), OP, NOW)
    assert isinstance(disagreeing, DriftDetected)
    assert (disagreeing.kind, disagreeing.tenant) == (DriftKind.MISMATCH, "acme")
    unmatched = meaning("sandbox", None, "d4", _notice("their-own-key", "rk1_mine"), None, NOW)
    assert isinstance(unmatched, DriftDetected) and unmatched.tenant is None


def test_a_signature_proves_only_what_its_own_account_holds() -> None:
    # acme's charge went through acme's own account; globex's through the shared one.
    notice = _notice("rk1_mine", "rk1_mine")
    acmes = MatchedOperation(
        tenant="acme", tx_id="tx", action="charge", op_key="rk1_mine", account="acme"
    )
    globexs = MatchedOperation(tenant="globex", tx_id="tx", action="charge", op_key="rk1_mine")
    # Signed by acme's own account: acme's operation is settled by it.
    settled = meaning("sandbox", "acme", "d1", notice, acmes, NOW)
    assert isinstance(settled, OperationObserved) and settled.tenant == "acme"
    assert settled.message_id == "webhook:acme/sandbox:d1"
    # Signed by the shared account, which acme's calls never reach: not acme's evidence,
    # but drift of the account that signed it (no tenant's).
    stray = meaning("sandbox", None, "d2", notice, acmes, NOW)
    assert isinstance(stray, DriftDetected) and stray.kind is DriftKind.EFFECT_WITHOUT_INTENT
    assert stray.tenant is None
    # Signed by acme's own account, naming a key whose calls went elsewhere: acme's drift.
    other = meaning("sandbox", "acme", "d3", notice, globexs, NOW)
    assert isinstance(other, DriftDetected) and other.tenant == "acme"
    # The shared account settles the operations whose calls went to it.
    assert isinstance(meaning("sandbox", None, "d4", notice, globexs, NOW), OperationObserved)


def test_a_mismatch_is_named_by_the_account_that_holds_the_effect() -> None:
    """The drift scan names a mismatch by its account (reconcilers.drift._mismatch): the
    webhook's of the same effect must be the same drift, and another account's effect of
    the same id another one."""
    acmes = MatchedOperation(
        tenant="acme", tx_id="tx", action="charge", op_key="rk1_mine", account="acme"
    )
    shared = MatchedOperation(tenant="globex", tx_id="tx", action="charge", op_key="rk1_mine")
    notice = _notice("rk1_mine", "rk1_other")
    own = meaning("sandbox", "acme", "d1", notice, acmes, NOW)
    assert isinstance(own, DriftDetected) and own.kind is DriftKind.MISMATCH
    assert own.drift_id == drift_id(DriftKind.MISMATCH, "sandbox", notice.effect_id, "acme")
    in_shared = meaning("sandbox", None, "d2", notice, shared, NOW)
    assert isinstance(in_shared, DriftDetected)
    # The shared account's ids are those derived before accounts existed.
    assert in_shared.drift_id == drift_id(DriftKind.MISMATCH, "sandbox", notice.effect_id)
    assert own.drift_id != in_shared.drift_id


@pytest.mark.parametrize("body", UNENCODABLE_BODIES)
def test_every_lone_surrogate_and_nul_a_body_can_carry_is_escaped(body: bytes) -> None:
    # The loader spares the walk over the strings only for bodies that cannot hold one
    # (ASCII, no NUL byte, no \u escape): each of these must still be walked and escaped.
    event = load_body(body)

    assert json.dumps(event, ensure_ascii=False).encode("utf-8")
    assert "\x00" not in json.dumps(event, ensure_ascii=False)
